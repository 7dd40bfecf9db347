/**
 * The HTTP fuzz corpus sent to Wick and to llama-server, side by side.
 *
 *   npx tsx benches/fuzz-peer.ts [--model .cache/models/SmolLM2-135M-Instruct.Q4_1.gguf]
 *       [--runs 1000 (generated cases per route)] [--peers wick,llama] [--parallel 4] [--ctx 256]
 *       [--threads 2] [--concurrency 4] [--timeout-s 120] [--results benches/RESULTS.md]
 *
 * The cases are test/http-fuzz.test.ts's: the same generator, the same fixed seeds
 * (benches/lib/http-fuzz.ts; `sampleCases` yields what the test's property runs, in order) and
 * the kept regression cases of test/fuzz-corpus/http.json, on the routes both servers have
 * (`/v1/chat/completions`, `/v1/completions`; Wick's Ollama routes are not llama-server's).
 * Between batches `GET /health` and `GET /v1/models` check the server still answers.
 *
 * One server at a time, on a free loopback port: `wick serve -np P -c C` and
 * `llama-server -np P -c C×P` (its -c is the whole KV cache). Per server it counts 2xx, 4xx and
 * 5xx answers, connection errors, timeouts and crashes (the process exited: it is restarted and
 * the run goes on), and how many answers break the OpenAI error shape that Wick's test asks for
 * (`problem()`: a 5xx, a non-JSON error body, an error without message/type/param/code, a stream
 * without [DONE]).
 */
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, openSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { FUZZ_RUNS, keptCorpus, problem, ROUTES, sampleCases, send, type Route } from "./lib/http-fuzz.ts";
import { appendResults } from "./lib/provenance.ts";
import { markdownTable, num, parseArgs } from "./serving.ts";
import { freePort } from "./lib/net.ts";
import { DEFAULT_MODEL, startWick } from "./soak.ts";

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const LLAMA_SERVER = join(ROOT, ".cache/llama-build/bin/llama-server");
const SHARED = ["/v1/chat/completions", "/v1/completions"];

interface Running {
  url: string;
  proc: ChildProcess;
  log: string;
}

interface PeerConfig {
  model: string;
  parallel: number;
  ctx: number;
  threads: number;
}

type Peer = "wick" | "llama";

async function startLlama(c: PeerConfig): Promise<Running> {
  if (!existsSync(LLAMA_SERVER)) throw new Error(`${LLAMA_SERVER} missing: run bash scripts/build-llama-server.sh`);
  const port = await freePort();
  const log = join(tmpdir(), `fuzz-peer-llama-${port}.log`);
  const fd = openSync(log, "w");
  const proc = spawn(LLAMA_SERVER, ["-m", c.model, "--host", "127.0.0.1", "--port", String(port), "-t", String(c.threads),
    "-np", String(c.parallel), "-c", String(c.ctx * c.parallel), "--no-webui"], { stdio: ["ignore", fd, fd] });
  const url = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 180_000;
  while (Date.now() < deadline) {
    if (proc.exitCode !== null) throw new Error(`llama-server exited with ${proc.exitCode}:\n${readFileSync(log, "utf8").slice(-1500)}`);
    try {
      if ((await fetch(`${url}/health`, { signal: AbortSignal.timeout(2000) })).status === 200) return { url, proc, log };
    } catch {
      /* not listening yet */
    }
    await new Promise((r) => setTimeout(r, 250));
  }
  proc.kill("SIGKILL");
  throw new Error(`llama-server not healthy after 180 s; see ${log}`);
}

async function start(peer: Peer, c: PeerConfig): Promise<Running> {
  if (peer === "llama") return startLlama(c);
  const w = await startWick(c);
  return { url: w.url, proc: w.proc, log: w.log };
}

function exited(p: ChildProcess): boolean {
  return p.exitCode !== null || p.signalCode !== null;
}

async function stop(p: ChildProcess): Promise<void> {
  if (exited(p)) return;
  const done = new Promise<void>((r) => p.once("exit", () => r()));
  p.kill("SIGTERM");
  const t = setTimeout(() => p.kill("SIGKILL"), 10_000);
  await done;
  clearTimeout(t);
}

export interface PeerTally {
  peer: Peer;
  sent: number;
  s2xx: number;
  s4xx: number;
  s5xx: number;
  other: number;
  connErrors: number;
  timeouts: number;
  crashes: number;
  /** answers that break the property Wick's fuzz test asserts (see problem()) */
  propertyBroken: number;
  liveness: { ok: number; failed: number };
  /** statuses by route */
  byRoute: Record<string, Record<number, number>>;
  /** the first few 5xx answers */
  examples: string[];
  /** every crash, connection error and timeout (the first 20) */
  severe: string[];
  seconds: number;
}

type Case = { route: Route; body: string | Buffer; type: string; origin: string };

export function fuzzCases(runs: number): Case[] {
  const routes = ROUTES.filter((r) => SHARED.includes(r.path) && !r.variant);
  return [
    ...keptCorpus().filter((c) => SHARED.includes(c.route.path)).map((c, i) => ({ route: c.route, body: c.body, type: "application/json", origin: `corpus #${i}` })),
    ...routes.flatMap((route) => sampleCases(route, runs).map(([body, type], i) => ({ route, body, type, origin: `seed case #${i}` }))),
  ];
}

async function runPeer(peer: Peer, cfg: PeerConfig, cases: Case[], concurrency: number, timeoutMs: number): Promise<PeerTally> {
  const t: PeerTally = { peer, sent: 0, s2xx: 0, s4xx: 0, s5xx: 0, other: 0, connErrors: 0, timeouts: 0, crashes: 0, propertyBroken: 0,
    liveness: { ok: 0, failed: 0 }, byRoute: {}, examples: [], severe: [], seconds: 0 };
  const t0 = Date.now();
  let server = await start(peer, cfg);
  process.stderr.write(`${peer}: ${server.url} (log ${server.log}), ${cases.length} cases\n`);
  let restarting: Promise<void> | null = null;
  const example = (s: string) => t.examples.length < 5 && t.examples.push(s);
  const severe = (s: string) => t.severe.length < 20 && t.severe.push(s);
  // A crash is counted once, however many in-flight requests it broke; the next case waits for the restart.
  const checkCrash = async (c: Case) => {
    if (restarting) return restarting;
    if (!exited(server.proc)) return;
    t.crashes++;
    severe(`crash (exit ${server.proc.exitCode ?? server.proc.signalCode}) around ${c.route.path} ${c.origin}: ${String(c.body).slice(0, 160)}`);
    restarting = (async () => {
      server = await start(peer, cfg);
    })();
    await restarting;
    restarting = null;
  };

  let next = 0;
  const worker = async () => {
    while (next < cases.length) {
      const i = next++;
      const c = cases[i]!;
      if (restarting) await restarting;
      t.sent++;
      const byRoute = (t.byRoute[c.route.path] ??= {});
      try {
        const r = await send(server.url, c.route, c.body, c.type, AbortSignal.timeout(timeoutMs));
        byRoute[r.status] = (byRoute[r.status] ?? 0) + 1;
        if (r.status >= 200 && r.status < 300) t.s2xx++;
        else if (r.status >= 400 && r.status < 500) t.s4xx++;
        else if (r.status >= 500) {
          t.s5xx++;
          example(`${r.status} on ${c.route.path} ${c.origin}: ${r.text.slice(0, 160)} ← ${String(c.body).slice(0, 120)}`);
        } else t.other++;
        let why: string | null;
        try {
          why = problem(c.route, r);
        } catch (e) {
          why = `unparsable answer: ${(e as Error).message}`;
        }
        if (why) t.propertyBroken++;
      } catch (e) {
        const err = e as Error & { cause?: { code?: string } };
        if (err.name === "TimeoutError") {
          t.timeouts++;
          severe(`timeout after ${timeoutMs / 1000} s on ${c.route.path} ${c.origin}: ${String(c.body).slice(0, 160)}`);
        } else {
          t.connErrors++;
          severe(`connection error ${err.cause?.code ?? err.message} on ${c.route.path} ${c.origin}: ${String(c.body).slice(0, 160)}`);
        }
        byRoute[-1] = (byRoute[-1] ?? 0) + 1;
      }
      await checkCrash(c);
      // Liveness between batches: the GET routes both servers have.
      if (i % 100 === 99) {
        for (const p of ["/health", "/v1/models"]) {
          try {
            const ok = (await fetch(server.url + p, { signal: AbortSignal.timeout(30_000) })).status === 200;
            if (ok) t.liveness.ok++;
            else t.liveness.failed++;
          } catch {
            t.liveness.failed++;
          }
        }
      }
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  await checkCrash(cases.at(-1)!);
  for (const p of ["/health", "/v1/models"]) {
    const ok = await fetch(server.url + p, { signal: AbortSignal.timeout(30_000) }).then((r) => r.status === 200, () => false);
    if (ok) t.liveness.ok++;
    else t.liveness.failed++;
  }
  await stop(server.proc);
  t.seconds = (Date.now() - t0) / 1000;
  return t;
}

export function peerTable(ts: PeerTally[]): string {
  const name = (p: Peer) => (p === "wick" ? "Wick" : "llama-server");
  const rows: [string, (t: PeerTally) => string][] = [
    ["cases sent", (t) => String(t.sent)],
    ["2xx", (t) => String(t.s2xx)],
    ["4xx", (t) => String(t.s4xx)],
    ["**5xx**", (t) => String(t.s5xx)],
    ["other status", (t) => String(t.other)],
    ["connection errors", (t) => String(t.connErrors)],
    ["timeouts", (t) => String(t.timeouts)],
    ["**crashes** (restarted)", (t) => String(t.crashes)],
    ["answers breaking Wick's fuzz property", (t) => String(t.propertyBroken)],
    ["liveness GETs ok / failed", (t) => `${t.liveness.ok} / ${t.liveness.failed}`],
    ["wall time", (t) => `${t.seconds.toFixed(0)} s`],
  ];
  const main = markdownTable(["", ...ts.map((t) => name(t.peer))], rows.map(([k, f]) => [k, ...ts.map(f)]));
  const routes = markdownTable(
    ["route", ...ts.map((t) => `${name(t.peer)} statuses`)],
    SHARED.map((r) => [r, ...ts.map((t) => Object.entries(t.byRoute[r] ?? {}).map(([s, n]) => `${s === "-1" ? "no answer" : s}: ${n}`).join(", "))]),
  );
  const list = (title: string, xs: string[]) => [title, "", ...xs.map((e) => `- ${e.replaceAll("\n", " ").replaceAll("|", "\\|")}`)].join("\n");
  const ex = ts.flatMap((t) => [
    ...(t.severe.length ? [list(`${name(t.peer)}'s crashes, connection errors and timeouts:`, t.severe)] : []),
    ...(t.examples.length ? [list(`${name(t.peer)}'s first 5xx answers:`, t.examples)] : []),
  ]);
  return [main, "", routes, ...ex.flatMap((e) => ["", e])].join("\n");
}

async function main(): Promise<void> {
  const { flags } = parseArgs(process.argv.slice(2));
  const cfg: PeerConfig = {
    model: resolve(flags.get("model") ?? DEFAULT_MODEL),
    parallel: num(flags, "parallel", 4),
    ctx: num(flags, "ctx", 256),
    threads: num(flags, "threads", 2),
  };
  const runs = num(flags, "runs", FUZZ_RUNS);
  const concurrency = num(flags, "concurrency", cfg.parallel);
  const timeoutMs = num(flags, "timeout-s", 120) * 1000;
  const peers = (flags.get("peers") ?? "wick,llama").split(",") as Peer[];
  const cases = fuzzCases(runs);
  const tallies: PeerTally[] = [];
  for (const p of peers) tallies.push(await runPeer(p, cfg, cases, concurrency, timeoutMs));
  const table = peerTable(tallies);
  process.stdout.write(table + "\n");
  if (flags.get("results")) {
    const notes = `The cases of test/http-fuzz.test.ts (benches/lib/http-fuzz.ts: same generator, fixed seeds 4242 + route length, ${runs} per route) on the routes both servers have, ${SHARED.join(" and ")}, plus the kept corpus's cases for them: ${cases.length} cases, ${concurrency} in flight. One server at a time: \`wick serve -np ${cfg.parallel} -c ${cfg.ctx} -t ${cfg.threads}\`, \`llama-server -np ${cfg.parallel} -c ${cfg.ctx * cfg.parallel} -t ${cfg.threads} --no-webui\`, same GGUF (${cfg.model.replace(ROOT + "/", "")}). "Breaking Wick's fuzz property" = a 5xx, an error body that is not OpenAI's shape (message, type, param, code), or a stream without [DONE]: llama-server's errors have no \`param\`, so that row measures shape, not robustness.`;
    appendResults(flags.get("results")!, "benches/fuzz-peer.ts", `HTTP fuzz corpus: ${peers.join(" vs ")}`, `${notes}\n\n${table}`);
  }
  const bad = tallies.find((t) => t.peer === "wick" && (t.s5xx || t.crashes || t.connErrors || t.timeouts));
  process.exit(bad ? 1 : 0);
}

if (process.argv[1] && import.meta.url === new URL(`file://${resolve(process.argv[1])}`).href) {
  main().catch((e) => {
    process.stderr.write(`${(e as Error).stack ?? e}\n`);
    process.exit(2);
  });
}
