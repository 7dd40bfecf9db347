/**
 * A child process's end as a test may read it: 'exit' can fire while the child's last output
 * is still in its pipes, so a test that reads stdout or the logs after the exit waits for
 * 'close' (every stdio stream ended) instead.
 */
import type { ChildProcess } from "node:child_process";

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
