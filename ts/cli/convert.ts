/**
 * `wick convert <dir> --outfile f.gguf --outtype q4_k_m`: a Hugging Face model directory →
 * GGUF, through the addon (the converter is Rust: crates/wick-convert). A progress bar on
 * stderr while it runs (plain lines when stderr is not a terminal); Ctrl-C cancels and
 * leaves no partial file.
 */
import path from "node:path";
import { convertModel, type ConvertProgress } from "../engine/convert.ts";
import { WickError } from "../engine/index.ts";
import type { ConvertFlags } from "./flags.ts";
import { CliError } from "./serve.ts";

const mb = (n: number) => `${(n / 1e6).toFixed(1)} MB`;

/** One progress line: bar, percent, bytes, tensors, the tensor just written. */
export function progressLine(p: ConvertProgress, width = 30): string {
  const frac = p.bytesTotal > 0 ? Math.min(1, p.bytesWritten / p.bytesTotal) : 0;
  const filled = Math.round(frac * width);
  const bar = "█".repeat(filled) + "░".repeat(width - filled);
  const pct = `${Math.floor(frac * 100)}`.padStart(3);
  return `${bar} ${pct}% ${mb(p.bytesWritten)} / ${mb(p.bytesTotal)}  [${p.tensorsDone}/${p.tensorsTotal}] ${p.tensor}`;
}

export async function convert(dir: string, flags: ConvertFlags): Promise<void> {
  const tty = process.stderr.isTTY === true;
  const abort = new AbortController();
  const onSigint = () => abort.abort();
  process.once("SIGINT", onSigint);
  let lastPct = -1;
  const onProgress = (p: ConvertProgress) => {
    if (p.tensorsTotal === 0) return;
    if (tty) {
      process.stderr.write(`\r\x1b[2K${progressLine(p)}`);
    } else {
      // Without a terminal: a line per 10%.
      const pct = Math.floor((p.bytesWritten / Math.max(1, p.bytesTotal)) * 10) * 10;
      if (pct !== lastPct) {
        lastPct = pct;
        process.stderr.write(`${progressLine(p)}\n`);
      }
    }
  };
  try {
    const outtype = flags.outtype;
    const r = await convertModel({ input: dir, outfile: flags.outfile, outtype, ...(flags.threads ? { threads: flags.threads } : {}) }, { onProgress, signal: abort.signal });
    if (tty) process.stderr.write("\n");
    const mix = new Map<string, number>();
    for (const t of r.types) mix.set(t.dtype, (mix.get(t.dtype) ?? 0) + 1);
    const types = [...mix].map(([k, v]) => `${k}×${v}`).join(" ");
    process.stdout.write(
      `wrote ${path.relative(process.cwd(), r.outfile) || r.outfile}: ${r.architecture} ${r.outtype}, ${r.tensors} tensors (${types}), ` +
        `${mb(r.bytesWritten)} in ${r.seconds.toFixed(1)}s (${(r.bytesRead / 1e6 / Math.max(r.seconds, 1e-9)).toFixed(0)} MB/s read)\n`,
    );
  } catch (err) {
    if (tty) process.stderr.write("\n");
    if (err instanceof WickError) {
      if (err.code === "CANCELLED") {
        process.stderr.write("wick: convert: cancelled, no file written\n");
        process.exit(130);
      }
      throw new CliError(`convert: ${err.message}`);
    }
    throw err;
  } finally {
    process.removeListener("SIGINT", onSigint);
  }
}
