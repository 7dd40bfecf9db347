/**
 * Pull progress as people read it: on a terminal, one bar per download redrawn in place
 * (`pulling 8eeb52dfb3bb:  45% ▕███████         ▏ 42 MB/93 MB  21 MB/s  2s`); elsewhere
 * (a log, a pipe) plain lines: each status once, a download every 10%.
 */
import { humanBytes, shortDuration } from "./format.ts";

export interface Progress {
  status: string;
  digest?: string;
  total?: number;
  completed?: number;
}

export interface ProgressOptions {
  out?: NodeJS.WritableStream & { isTTY?: boolean; columns?: number };
  /** Bar on a terminal (default: whether `out` is one). */
  tty?: boolean;
  /** Put before each plain line (`wick: ` for serve's stderr). */
  prefix?: string;
  now?: () => number;
}

export type ProgressFn = ((p: Progress) => void) & { end(): void };

export function progressReporter(opts: ProgressOptions = {}): ProgressFn {
  const out = opts.out ?? process.stderr;
  const tty = opts.tty ?? !!out.isTTY;
  return tty ? barReporter(out, opts.now ?? Date.now) : lineReporter(out, opts.prefix ?? "");
}

const mib = (n: number) => (n / 2 ** 20).toFixed(1);

/** Each status once; a download at 0%, every 10% and 100%. */
function lineReporter(out: NodeJS.WritableStream, prefix: string): ProgressFn {
  let last = "";
  let shown = -1;
  const fn = (p: Progress) => {
    if (p.total && p.completed !== undefined) {
      const pct = Math.floor((p.completed * 100) / Math.max(1, p.total));
      if (p.status === last && pct < shown + 10 && pct < 100) return;
      if (p.status === last && pct === shown) return;
      last = p.status;
      shown = pct;
      out.write(`${prefix}${p.status} ${pct}% (${mib(p.completed)}/${mib(p.total)} MiB)\n`);
    } else if (p.status !== last) {
      last = p.status;
      shown = -1;
      out.write(`${prefix}${p.status}\n`);
    }
  };
  return Object.assign(fn, { end() {} });
}

/** One bar redrawn in place per download, with bytes, speed and time left. */
function barReporter(out: NodeJS.WritableStream & { columns?: number }, now: () => number): ProgressFn {
  let open: string | undefined; // the status whose bar is on the current line
  let lastStatus = "";
  let samples: { t: number; c: number }[] = [];
  let final = "";

  const finish = () => {
    if (open !== undefined) out.write(`\r\x1b[K${final}\n`);
    open = undefined;
  };
  const fn = (p: Progress) => {
    if (!(p.total && p.completed !== undefined)) {
      finish();
      if (p.status !== lastStatus) out.write(`${p.status}\n`);
      lastStatus = p.status;
      return;
    }
    if (open !== p.status) {
      finish();
      open = p.status;
      samples = [];
    }
    lastStatus = p.status;
    const t = now();
    samples.push({ t, c: p.completed });
    while (samples.length > 2 && t - samples[0].t > 3000) samples.shift();
    const first = samples[0];
    const rate = t > first.t ? ((p.completed - first.c) * 1000) / (t - first.t) : 0;
    const done = p.completed >= p.total;
    const pct = Math.floor((p.completed * 100) / p.total);
    const head = `${p.status}: ${String(pct).padStart(3)}% `;
    const tail = done
      ? ` ${humanBytes(p.total)}`
      : ` ${humanBytes(p.completed)}/${humanBytes(p.total)}${rate > 0 ? `  ${humanBytes(rate)}/s  ${shortDuration(((p.total - p.completed) * 1000) / rate)}` : ""}`;
    const width = Math.max(10, Math.min(50, (out.columns || 80) - head.length - tail.length - 4));
    const filled = Math.round((width * p.completed) / p.total);
    const line = `${head}▕${"█".repeat(filled)}${" ".repeat(width - filled)}▏${tail}`;
    final = `${head.replace(/\d+%/, "100%")}▕${"█".repeat(width)}▏ ${humanBytes(p.total)}`;
    out.write(`\r\x1b[K${line}`);
    if (done) finish();
  };
  return Object.assign(fn, { end: finish });
}
