/**
 * A child process's end as a test may read it: 'exit' can fire while the child's last output
 * is still in its pipes, so a test that reads stdout or the logs after the exit waits for
 * 'close' (every stdio stream ended) instead.
 */
import { spawn, type ChildProcess } from "node:child_process";

export interface Ended {
  code: number | null;
  signal: NodeJS.Signals | null;
}

/** Resolves once `child` has exited and all its output has been read. */
export function ended(child: ChildProcess): Promise<Ended> {
  if ((child.exitCode !== null || child.signalCode !== null) && !child.stdout?.readable && !child.stderr?.readable) {
    return Promise.resolve({ code: child.exitCode, signal: child.signalCode });
  }
  return new Promise((resolve) => child.once("close", (code, signal) => resolve({ code, signal })));
}

/** A `wick serve` child process, once it listens. */
export interface ServedProcess {
  child: ChildProcess;
  url: string;
  /** The exit, once every line the child wrote has been read. */
  exit: Promise<Ended>;
  stdout: () => string;
  stderr: () => string;
  /** The JSON log lines on stdout. */
  logs: () => Record<string, unknown>[];
}

/** Spawns `wick serve` (`BIN`, `args` after `serve`) with `env` and waits for its listening line. */
export async function spawnServe(bin: string, args: string[], opts: { cwd: string; env: NodeJS.ProcessEnv }): Promise<ServedProcess> {
  const child = spawn(process.execPath, [bin, "serve", ...args], { cwd: opts.cwd, env: opts.env, stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  let err = "";
  child.stdout.setEncoding("utf8").on("data", (d: string) => (out += d));
  const exit = ended(child);
  const url = await new Promise<string>((resolve, reject) => {
    child.stderr.setEncoding("utf8").on("data", (d: string) => {
      err += d;
      const m = /wick: serving .* at (http:\/\/\S+)\/v1\n/.exec(err);
      if (m) resolve(m[1]);
    });
    void exit.then(({ code }) => reject(new Error(`wick serve exited ${code}: ${err}`)));
  });
  const logs = () =>
    out
      .split("\n")
      .filter((l) => l.startsWith("{"))
      .map((l) => JSON.parse(l) as Record<string, unknown>);
  return { child, url, exit, stdout: () => out, stderr: () => err, logs };
}
