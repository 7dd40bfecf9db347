/**
 * The `wick` CLI as a user runs it, for tests: bin/wick.js in a child process with its own
 * WICK_HOME (a temp folder) and WICK_HOST (a free loopback port), so a server the client
 * commands start in the background is this test's alone — and is stopped by `close()`.
 */
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { repoRoot } from "./assets.ts";
import { freePort } from "./server.ts";

export const BIN = path.join(repoRoot, "bin/wick.js");

export interface CliResult {
  status: number | null;
  stdout: string;
  stderr: string;
  /** stderr's non-empty lines. */
  lines: string[];
}

/** Runs `wick args…` to its end (asynchronously: a loopback hub in this process keeps answering). */
export function wick(args: string[], opts: { env?: NodeJS.ProcessEnv; input?: string; timeoutMs?: number } = {}): Promise<CliResult> {
  const child = spawn(process.execPath, [BIN, ...args], { cwd: repoRoot, env: opts.env ?? process.env, stdio: ["pipe", "pipe", "pipe"] });
  let stdout = "";
  let stderr = "";
  child.stdout.setEncoding("utf8").on("data", (d: string) => (stdout += d));
  child.stderr.setEncoding("utf8").on("data", (d: string) => (stderr += d));
  child.stdin.end(opts.input ?? "");
  const timer = setTimeout(() => child.kill("SIGKILL"), opts.timeoutMs ?? 120_000);
  return new Promise((resolve) => {
    child.once("close", (status) => {
      clearTimeout(timer);
      resolve({ status, stdout, stderr, lines: stderr.split("\n").filter(Boolean) });
    });
  });
}

export interface CliHome {
  home: string;
  port: number;
  /** process.env with WICK_HOME and WICK_HOST set (HF_TOKEN empty: a real token must not reach a loopback hub). */
  env: NodeJS.ProcessEnv;
  wick(args: string[], opts?: { input?: string; env?: NodeJS.ProcessEnv }): Promise<CliResult>;
  /** The pid of the server a client command started here, if any. */
  serverPid(): number | undefined;
  /** Stops that server (SIGTERM, then waits for it to go). */
  stopServer(): Promise<void>;
  close(): Promise<void>;
}

export async function cliHome(extraEnv: NodeJS.ProcessEnv = {}): Promise<CliHome> {
  const home = mkdtempSync(path.join(os.tmpdir(), "wick-cli-"));
  const port = await freePort();
  const env = { ...process.env, HF_TOKEN: "", ...extraEnv, WICK_HOME: home, WICK_HOST: `127.0.0.1:${port}` };
  const pidFile = path.join(home, "logs", `server-${port}.pid`);
  const serverPid = () => (existsSync(pidFile) ? Number(readFileSync(pidFile, "utf8").trim()) : undefined);
  const stopServer = async () => {
    const pid = serverPid();
    if (!pid || !alive(pid)) return;
    process.kill(pid, "SIGTERM");
    const deadline = Date.now() + 15_000;
    while (alive(pid) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    if (alive(pid)) process.kill(pid, "SIGKILL");
  };
  return {
    home,
    port,
    env,
    wick: (args, opts = {}) => wick(args, { input: opts.input, env: { ...env, ...opts.env } }),
    serverPid,
    stopServer,
    async close() {
      await stopServer();
      rmSync(home, { recursive: true, force: true });
    },
  };
}

export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** The start columns of a table's header cells, to check rows line up under them. */
export function columnStarts(header: string): number[] {
  return [...header.matchAll(/\S+/g)].map((m) => m.index);
}

/** A row cut at the header's column starts. */
export function cells(row: string, starts: number[]): string[] {
  return starts.map((s, i) => row.slice(s, starts[i + 1]).trim());
}
