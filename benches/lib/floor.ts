/**
 * The memory-bandwidth floor of a decode, measured beside it: the weight bytes one token streams
 * (the engine's header reading, `GgufInfo.decodeBytes`) over the machine's read rate probed just
 * before and after the decode (`kernel_timing -- floor`: the best 2-thread pass over 1 GiB).
 * This VM's read rate moves by up to 2× within minutes, so a rate taken once for a whole run
 * would say little about any one decode.
 */
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { dirname, resolve } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "../..");

/** The `kernel_timing` bench executable, built on first use (with the scripts' `--target`, so
 * cargo reuses their artifacts; scripts/env.sh). */
function benchBinary(): string {
  const triple = /^host: (\S+)$/m.exec(execFileSync("rustc", ["-vV"], { encoding: "utf8" }))![1]!;
  const out = execFileSync("cargo", ["bench", "-q", "--no-run", "--message-format=json", "--target", triple, "-p", "wick-core", "--bench", "kernel_timing"], {
    cwd: ROOT,
    encoding: "utf8",
    stdio: ["ignore", "pipe", "inherit"],
  });
  for (const line of out.split("\n")) {
    const m = line.startsWith("{") ? (JSON.parse(line) as { target?: { name?: string }; executable?: string | null }) : undefined;
    if (m?.target?.name === "kernel_timing" && m.executable) return m.executable;
  }
  throw new Error("cargo built no kernel_timing executable");
}

/**
 * One `kernel_timing floor --serve` for the whole run, probing once per line written to it.
 * Why one process: spawning from a process that holds an engine forks it, and every page the
 * engine then writes takes a copy-on-write fault — ~23k faults in the next 512-token prompt of
 * the 1.2B, a few percent off its decode — so a probe spawned per prompt slowed the engine it was
 * measured beside. Start it before loading an engine (`startProber`).
 */
let prober: { proc: ChildProcess; lines: AsyncIterator<string> } | undefined;

export function startProber(): void {
  if (prober) return;
  const proc = spawn(benchBinary(), ["floor", "--serve"], { cwd: ROOT, stdio: ["pipe", "pipe", "inherit"] });
  prober = { proc, lines: createInterface({ input: proc.stdout! })[Symbol.asyncIterator]() };
}

/** The machine's read rate now, GB/s (~1 s). */
export async function probeFloorGbps(): Promise<number> {
  startProber();
  const { proc, lines } = prober!;
  proc.stdin!.write("\n");
  for (;;) {
    const line = await lines.next();
    if (line.done) throw new Error("kernel_timing floor --serve ended before a probe");
    const m = /\| memory floor .*\|\s*([\d.]+) GB\/s/.exec(line.value);
    if (m) return Number(m[1]);
  }
}

/** Weight bytes one decoded token of `model` streams (a mixture's experts at their routed share). */
export async function decodeBytes(model: string): Promise<number> {
  const { inspectModel } = await import("../../ts/engine/index.ts");
  return (await inspectModel(model, { maxArrayLen: 0 })).decodeBytes;
}
