/**
 * A real terminal for CLI tests: the command runs on a pseudo-terminal (python3's `pty`
 * module, no native dependency), with a window size, so it sees a TTY on stdin, stdout and
 * stderr exactly as in a terminal emulator; the test types keys (Enter is "\r", Ctrl-C "\x03",
 * Ctrl-D "\x04", arrow up "\x1b[A") and reads the screen's byte stream.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { ended } from "./process.ts";

const RELAY = String.raw`
import fcntl, os, pty, select, struct, sys, termios
cols, rows, argv = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
pid, fd = pty.fork()
if pid == 0:
    fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    os.execvp(argv[0], argv)
stdin_open = True
while True:
    r, _, _ = select.select([fd] + ([0] if stdin_open else []), [], [])
    if fd in r:
        try:
            data = os.read(fd, 65536)
        except OSError:
            data = b""
        if not data:
            break
        os.write(1, data)
    if 0 in r:
        data = os.read(0, 65536)
        if data:
            os.write(fd, data)
        else:
            stdin_open = False
_, status = os.waitpid(pid, 0)
code = os.waitstatus_to_exitcode(status)
sys.exit(code if code >= 0 else 128 - code)
`;

export interface Pty {
  child: ChildProcess;
  /** Sends keys as typed. */
  type(keys: string): void;
  /** Everything shown so far, escape sequences removed and line ends as "\n". */
  screen(): string;
  /** Everything shown so far, as the bytes came. */
  raw(): string;
  /** Waits until `pattern` shows at or after `from` (a screen() offset); resolves with the offset just past it. */
  waitFor(pattern: string | RegExp, opts?: { from?: number; timeoutMs?: number }): Promise<number>;
  /** The exit code (128 + n for signal n), once all the output has been read. */
  exited: Promise<number | null>;
  /** Whether `exited` has settled: nothing more will show on the screen. */
  gone(): boolean;
  /** Ends the command and its terminal (a test that failed half-way). */
  kill(): void;
}

/** Removes terminal control sequences (colours, cursor moves, line erases) and carriage returns. */
export function plain(s: string): string {
  return s
    .replace(/\x1b\[[0-9;?]*[A-Za-z]/g, "")
    .replace(/\x1b[()][A-Za-z0-9]/g, "")
    .replace(/\r+\n/g, "\n")
    .replace(/\r/g, "");
}

export function spawnPty(command: string, args: string[], opts: { cwd?: string; env?: NodeJS.ProcessEnv; cols?: number; rows?: number } = {}): Pty {
  const child = spawn("python3", ["-c", RELAY, String(opts.cols ?? 100), String(opts.rows ?? 30), command, ...args], {
    cwd: opts.cwd,
    env: opts.env ?? process.env,
    stdio: ["pipe", "pipe", "inherit"],
  });
  let raw = "";
  child.stdout.setEncoding("utf8");
  child.stdout.on("data", (d: string) => (raw += d));
  // After the exit, the screen holds everything the child drew.
  let isGone = false;
  const exited = ended(child).then(({ code }) => {
    isGone = true;
    return code;
  });
  return {
    child,
    type: (keys) => void child.stdin.write(keys),
    screen: () => plain(raw),
    raw: () => raw,
    exited,
    gone: () => isGone,
    kill: () => {
      if (child.exitCode === null) child.stdin.end();
      if (child.exitCode === null) child.kill("SIGKILL");
    },
    async waitFor(pattern, { from = 0, timeoutMs = 60_000 } = {}) {
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        const text = plain(raw).slice(from);
        const m = typeof pattern === "string" ? (text.includes(pattern) ? { index: text.indexOf(pattern), 0: pattern } : null) : pattern.exec(text);
        if (m) return from + m.index + m[0].length;
        if (Date.now() > deadline) throw new Error(`timed out waiting for ${String(pattern)}; the screen from ${from}:\n${text.slice(-3000)}`);
        if (isGone) throw new Error(`exited ${child.exitCode} before ${String(pattern)} showed; the screen from ${from}:\n${text.slice(-3000)}`);
        await new Promise((r) => setTimeout(r, 20));
      }
    },
  };
}

/** Waits for the REPL prompt (`>>> ` as the last thing on the screen) shown after offset `from`; resolves with the screen's length. */
export async function prompt(p: Pty, from: number, timeoutMs = 60_000): Promise<number> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const s = p.screen();
    if (s.endsWith(">>> ") && s.length - 4 >= from) return s.length;
    if (Date.now() > deadline) throw new Error(`no prompt after ${from}; the screen:\n${s.slice(-2000)}`);
    if (p.gone()) throw new Error(`exited ${p.child.exitCode}; the screen:\n${s.slice(-2000)}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** Types a line (or keys, e.g. arrow up) at the prompt, then Enter; returns what came back before the next prompt. */
export async function say(p: Pty, keys: string): Promise<string> {
  const from = p.screen().length;
  p.type(`${keys}\r`);
  const end = await prompt(p, from + 1);
  const shown = p.screen().slice(from, end - 4);
  // The echo of the line (readline redraws it for keys such as arrow up) ends at the first newline.
  return shown.slice(shown.indexOf("\n") + 1);
}
