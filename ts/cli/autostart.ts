/**
 * Client commands need a server: `connect()` asks `GET /` at WICK_HOST and, when nothing
 * listens there (connection refused) on this machine, starts `wick serve` in the background —
 * detached, its output appended to $WICK_HOME/logs/server.log, its pid in
 * $WICK_HOME/logs/server-<port>.pid — and waits until it answers. A lock file
 * ($WICK_HOME/serve-<port>.lock, created exclusively) makes sure two commands started together
 * start one server: the other waits for it.
 */
import { spawn } from "node:child_process";
import http from "node:http";
import { closeSync, mkdirSync, openSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import path from "node:path";
import { defaultHome } from "../store/store.ts";
import { formatHostPort } from "./address.ts";
import { target, WickClient, type Target } from "./client.ts";
import { CliError } from "./errors.ts";

const BIN = path.resolve(import.meta.dirname, "../../bin/wick.js");
const REPO = path.resolve(import.meta.dirname, "../..");
/** How long a started server may take to answer (it loads no model: the store opens, the port binds). */
const START_TIMEOUT_MS = 60_000;
/** A lock older than this is left over from a command that died while starting a server. */
const STALE_LOCK_MS = 90_000;
const LOCAL_HOSTS = new Set(["127.0.0.1", "localhost", "::1", "0.0.0.0", "::"]);

type Probe = { state: "up" } | { state: "down" | "unreachable" | "other"; why: string };

/** Network errors that say nothing answered (as opposed to something that answered wrongly). */
const UNREACHABLE = new Set(["EHOSTUNREACH", "ENETUNREACH", "ENOTFOUND", "EAI_AGAIN", "ETIMEDOUT", "TimeoutError"]);

/**
 * What answers at `url`: a Wick server, nothing (refused, unreachable), or something else.
 * node:http rather than fetch: a peer that hangs up at once can leave fetch pending with
 * nothing to keep the process alive.
 */
export function probe(url: string): Promise<Probe> {
  return new Promise((resolve) => {
    const req = http.get(`${url}/`, { timeout: 5_000, agent: false }, (res) => {
      let text = "";
      res.setEncoding("utf8");
      res.on("data", (d: string) => (text += d.length < 200 ? d : d.slice(0, 200)));
      res.on("end", () => {
        if (res.statusCode === 200 && text.startsWith("Wick is running")) resolve({ state: "up" });
        else resolve({ state: "other", why: `GET / answered ${res.statusCode}${text.trim() ? ` ${JSON.stringify(text.trim().slice(0, 40))}` : ""}` });
      });
      res.on("error", (err) => resolve({ state: "other", why: (err as NodeJS.ErrnoException).code ?? err.message }));
    });
    req.on("timeout", () => req.destroy(Object.assign(new Error("no answer within 5 s"), { code: "TimeoutError" })));
    req.on("error", (err: NodeJS.ErrnoException) => {
      const why = err.code ?? err.message;
      if (why === "ECONNREFUSED") resolve({ state: "down", why });
      else resolve({ state: UNREACHABLE.has(why) ? "unreachable" : "other", why: why === "TimeoutError" ? err.message : why });
    });
  });
}

/** A client for the server at WICK_HOST, started first when none answers there. */
export async function connect(env: NodeJS.ProcessEnv = process.env): Promise<WickClient> {
  const t = target(env);
  await ensureServer(t, env);
  return new WickClient(t.url, env.WICK_API_KEY || undefined);
}

async function ensureServer(t: Target, env: NodeJS.ProcessEnv): Promise<void> {
  const first = await probe(t.url);
  if (first.state === "up") return;
  const local = LOCAL_HOSTS.has(t.host);
  if (!local && first.state !== "other") throw new CliError(`could not connect to the Wick server at ${t.url} (${first.why}); start it there with 'wick serve'`);
  if (first.state !== "down") throw new CliError(`something that is not a Wick server answers at ${t.host}:${t.port} (${first.why}); set WICK_HOST to another address`);

  const home = path.resolve(env.WICK_HOME || defaultHome());
  mkdirSync(path.join(home, "logs"), { recursive: true });
  const lock = path.join(home, `serve-${t.port}.lock`);
  const deadline = Date.now() + START_TIMEOUT_MS;
  while (Date.now() < deadline) {
    if (takeLock(lock)) {
      try {
        // Someone may have started it between our probe and the lock.
        if ((await probe(t.url)).state === "up") return;
        return await startServer(t, home, env, deadline);
      } finally {
        rmSync(lock, { force: true });
      }
    }
    // Another command is starting it: wait for it to answer (or for its lock to go).
    await sleep(100);
    const p = await probe(t.url);
    if (p.state === "up") return;
    if (p.state !== "down") throw new CliError(`something that is not a Wick server answers at ${t.host}:${t.port} (${p.why})`);
  }
  throw new CliError(`no Wick server answered at ${t.url} within ${START_TIMEOUT_MS / 1000} s (another command holds ${lock})`);
}

/** Creates the lock file, or clears a stale one; true when this process holds it. */
function takeLock(lock: string): boolean {
  try {
    writeFileSync(lock, `${process.pid}\n`, { flag: "wx" });
    return true;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw new CliError(`cannot create ${lock}: ${(err as Error).message}`);
  }
  let stale = false;
  try {
    const pid = Number(readFileSync(lock, "utf8").trim());
    stale = !alive(pid) || Date.now() - statSync(lock).mtimeMs > STALE_LOCK_MS;
  } catch {
    return false; // removed meanwhile: try again next round
  }
  if (stale) rmSync(lock, { force: true });
  return false;
}

function alive(pid: number): boolean {
  if (!Number.isInteger(pid) || pid <= 0) return false;
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "EPERM";
  }
}

async function startServer(t: Target, home: string, env: NodeJS.ProcessEnv, deadline: number): Promise<void> {
  const logFile = path.join(home, "logs", "server.log");
  const fd = openSync(logFile, "a");
  const from = statSync(logFile).size;
  const child = spawn(process.execPath, [BIN, "serve"], {
    cwd: REPO,
    detached: true,
    stdio: ["ignore", fd, fd],
    env: { ...env, WICK_HOME: home, WICK_HOST: formatHostPort(t.host, t.port) },
  });
  closeSync(fd);
  child.unref();
  let exited: number | null | undefined;
  child.once("exit", (code) => (exited = code));
  child.once("error", () => (exited = -1));
  writeFileSync(path.join(home, "logs", `server-${t.port}.pid`), `${child.pid}\n`);
  if (process.stderr.isTTY) process.stderr.write(`wick: starting a server at ${t.host}:${t.port} (log: ${logFile})\n`);
  while (Date.now() < deadline) {
    await sleep(100);
    if (exited !== undefined) throw new CliError(`the Wick server did not start: ${lastLine(logFile, from)} (log: ${logFile})`);
    if ((await probe(t.url)).state === "up") return;
  }
  if (child.pid) process.kill(child.pid, "SIGTERM");
  throw new CliError(`the Wick server did not answer within ${START_TIMEOUT_MS / 1000} s (log: ${logFile})`);
}

/** The server's own error line (`wick: …`) from what it logged since `from`, else its last line. */
function lastLine(file: string, from: number): string {
  const lines = readFileSync(file)
    .subarray(from)
    .toString("utf8")
    .split("\n")
    .map((l) => l.trim())
    .filter(Boolean);
  const own = lines.filter((l) => l.startsWith("wick: ") && !l.startsWith("wick: note:") && !l.startsWith("wick: ignoring"));
  return (own.at(-1) ?? lines.at(-1) ?? "it exited without a word").replace(/^wick: /, "");
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
