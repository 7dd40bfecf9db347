/**
 * Soak: a real `wick serve` child under a mixed load for a long time, watched from outside.
 *
 *   npx tsx benches/soak.ts [--minutes 30] [--model .cache/models/SmolLM2-135M-Instruct.Q4_1.gguf]
 *       [--concurrency 16] [--parallel 16] [--ctx 1024] [--threads 2] [--seed 1] [--sample-s 60]
 *       [--rss-limit-pct 5] [--results benches/RESULTS.md]
 *
 * `--concurrency` clients loop without pause over a weighted mix: chat and completions,
 * streaming and not, streams aborted at a random point (before the answer's headers or after
 * some chunks), prompts near the context size, bad requests from the HTTP fuzz generator
 * (benches/lib/http-fuzz.ts, the one test/http-fuzz.test.ts runs) and Ollama's /api/chat. Every
 * `--sample-s` it samples the server process's RSS (/proc/<pid>/status VmRSS), open file
 * handles (/proc/<pid>/fd) and, from /metrics, KV blocks in use and running/waiting sequences.
 * After the load it waits for the server to go idle and checks that they drain to 0.
 *
 * Exits 1 on any unexpected error (a 5xx, a 4xx to a valid request, a malformed answer or
 * stream, a connection error, a timeout, the server exiting), RSS growth from the first sample
 * to the last under load above `--rss-limit-pct`, or KV blocks/sequences not back to 0.
 * test/soak.test.ts runs the same driver (`runSoak`) for 60 s.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { openSync, readdirSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { FUZZ_RUNS, keptCorpus, problem, ROUTES, sampleCases, send, type Route } from "./lib/http-fuzz.ts";
import { appendResults } from "./lib/provenance.ts";
import { markdownTable, num, parseArgs, rng } from "./serving.ts";
import { freePort } from "./lib/net.ts";

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "..");
export const DEFAULT_MODEL = join(ROOT, ".cache/models/SmolLM2-135M-Instruct.Q4_1.gguf");

// ---------- the server ----------

export interface WickChild {
  url: string;
  pid: number;
  proc: ChildProcess;
  log: string;
  stop(): Promise<number | null>;
}


export interface WickServeOptions {
  model: string;
  parallel: number;
  ctx: number;
  threads: number;
  extraArgs?: string[];
}

/** `node bin/wick.js serve` on a free loopback port (what users run), ready once /health is 200. */
export async function startWick(o: WickServeOptions): Promise<WickChild> {
  const port = await freePort();
  const args = [join(ROOT, "bin/wick.js"), "serve", "-m", o.model, "--host", "127.0.0.1", "--port", String(port),
    "-t", String(o.threads), "-np", String(o.parallel), "-c", String(o.ctx), ...(o.extraArgs ?? [])];
  // The log goes to the OS temp dir: .cache is shared read-only data.
  const log = join(tmpdir(), `wick-soak-${port}.log`);
  const fd = openSync(log, "w");
  const proc = spawn(process.execPath, args, { cwd: ROOT, stdio: ["ignore", fd, fd] });
  const url = `http://127.0.0.1:${port}`;
  const stop = async (): Promise<number | null> => {
    if (proc.exitCode !== null || proc.signalCode !== null) return proc.exitCode;
    const exited = new Promise<number | null>((r) => proc.once("exit", (code) => r(code)));
    proc.kill("SIGTERM");
    const t = setTimeout(() => proc.kill("SIGKILL"), 15_000);
    const code = await exited;
    clearTimeout(t);
    return code;
  };
  const deadline = Date.now() + 180_000;
  while (Date.now() < deadline) {
    if (proc.exitCode !== null) throw new Error(`wick serve exited with ${proc.exitCode} before /health:\n${readFileSync(log, "utf8").slice(-1500)}`);
    try {
      if ((await fetch(`${url}/health`, { signal: AbortSignal.timeout(2000) })).ok) return { url, pid: proc.pid!, proc, log, stop };
    } catch {
      /* not listening yet */
    }
    await new Promise((r) => setTimeout(r, 250));
  }
  proc.kill("SIGKILL");
  throw new Error(`wick serve not healthy after 180 s; see ${log}`);
}

// ---------- what is sampled ----------

export interface Sample {
  /** seconds since the load started */
  t: number;
  rssMiB: number;
  fds: number;
  kvUsed: number;
  kvCached: number;
  kvTotal: number;
  running: number;
  waiting: number;
  /** requests finished so far (all kinds) */
  requests: number;
}

/** Sums a metric over its label sets in Prometheus text. */
export function metricValue(text: string, name: string): number {
  let sum = 0;
  let found = false;
  for (const line of text.split("\n")) {
    if (!line.startsWith(name)) continue;
    const rest = line.slice(name.length);
    if (rest[0] !== "{" && rest[0] !== " ") continue;
    const v = Number(line.slice(line.lastIndexOf(" ") + 1));
    if (Number.isFinite(v)) {
      sum += v;
      found = true;
    }
  }
  if (!found) throw new Error(`/metrics has no ${name}`);
  return sum;
}

function procStatus(pid: number): { rssMiB: number; fds: number } {
  const status = readFileSync(`/proc/${pid}/status`, "utf8");
  const kb = Number(/^VmRSS:\s+(\d+) kB/m.exec(status)?.[1]);
  return { rssMiB: kb / 1024, fds: readdirSync(`/proc/${pid}/fd`).length };
}

async function sample(url: string, pid: number, t: number, requests: number): Promise<Sample> {
  const res = await fetch(`${url}/metrics`, { signal: AbortSignal.timeout(30_000) });
  if (!res.ok) throw new Error(`/metrics answered ${res.status}`);
  const m = await res.text();
  return {
    t,
    ...procStatus(pid),
    kvUsed: metricValue(m, "wick:kv_blocks_used"),
    kvCached: metricValue(m, "wick:kv_blocks_cached"),
    kvTotal: metricValue(m, "wick:kv_blocks_total"),
    running: metricValue(m, "wick:num_requests_running"),
    waiting: metricValue(m, "wick:num_requests_waiting"),
    requests,
  };
}

// ---------- the load ----------

export type Kind = "chat" | "chat-stream" | "completion" | "completion-stream" | "abort-stream" | "long-prompt" | "bad-request" | "api-chat";

/** The mix: relative weights of each kind of request. */
export const MIX: [Kind, number][] = [
  ["chat", 3],
  ["chat-stream", 3],
  ["completion", 2],
  ["completion-stream", 2],
  ["abort-stream", 3],
  ["long-prompt", 1],
  ["bad-request", 4],
  ["api-chat", 2],
];

export interface SoakOptions {
  url: string;
  pid: number;
  durationMs: number;
  sampleMs: number;
  concurrency: number;
  /** the server's context size per sequence: long prompts are made to nearly fill it */
  ctx: number;
  /** the server's --parallel: the warm-up runs this many near-full-context prompts at once */
  parallel: number;
  /** skip the warm-up that touches the whole KV pool before the load (default false) */
  noWarmup?: boolean;
  seed: number;
  rssLimitPct: number;
  requestTimeoutMs?: number;
  /** how long the server may take to drain after the load */
  drainMs?: number;
  /** called with each table row as it is sampled */
  onRow?: (row: string) => void;
}

export interface SoakResult {
  requests: number;
  /** RSS before and after the warm-up */
  warmup: { beforeMiB: number; afterMiB: number; seconds: number } | null;
  byKind: Record<string, number>;
  /** outcomes that are part of the plan: fuzz 2xx/4xx, aborted streams */
  expected: Record<string, number>;
  /** outcomes that are bugs: 5xx, connection errors, timeouts, malformed answers */
  unexpected: Record<string, number>;
  /** the first few unexpected outcomes in full */
  examples: string[];
  samples: Sample[];
  /** the sample after the load and the idle wait */
  end: Sample;
  rssGrowthPct: number;
  /** reasons the run fails; empty when it passes */
  failures: string[];
}

const WORDS = ("the of and to in is was for on that with as by at from his her an which are this be had not it have but they one all were " +
  "river stone garden window lantern harbor meadow winter copper signal orbit canvas marble thunder velvet compass quiet").split(" ");

const count = (r: Record<string, number>, k: string) => (r[k] = (r[k] ?? 0) + 1);

class Unexpected extends Error {}

/** Reads a streamed answer, optionally aborting after `abortAfter` chunks; returns the text read. */
async function readStream(res: Response, ctrl: AbortController, abortAfter: number | null): Promise<{ text: string; aborted: boolean }> {
  const reader = res.body!.getReader();
  const dec = new TextDecoder();
  let text = "";
  let chunks = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return { text, aborted: false };
    text += dec.decode(value, { stream: true });
    chunks++;
    if (abortAfter !== null && chunks >= abortAfter) {
      ctrl.abort();
      await reader.cancel().catch(() => {});
      return { text, aborted: true };
    }
  }
}

function checkSse(text: string): void {
  if (/"(internal_error|server_error)"/.test(text)) throw new Unexpected(`stream with a server error: ${text.slice(-300)}`);
  if (!text.trimEnd().endsWith("data: [DONE]")) throw new Unexpected(`stream ended without [DONE]: ${text.slice(-300)}`);
}

function errorName(e: unknown): string {
  const err = e as { name?: string; message?: string; cause?: { code?: string; message?: string } };
  return err.cause?.code ?? err.cause?.message ?? err.name ?? String(e);
}

export async function runSoak(o: SoakOptions): Promise<SoakResult> {
  const rand = rng(o.seed);
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)]!;
  const int = (lo: number, hi: number) => lo + Math.floor(rand() * (hi - lo + 1));
  const totalWeight = MIX.reduce((s, [, w]) => s + w, 0);
  const kindOf = (): Kind => {
    let x = rand() * totalWeight;
    for (const [k, w] of MIX) if ((x -= w) < 0) return k;
    return MIX[0]![0];
  };
  const timeoutMs = o.requestTimeoutMs ?? 180_000;
  const model = ((await (await fetch(`${o.url}/v1/models`)).json()) as { data: { id: string }[] }).data[0]!.id;

  // Bad requests: the fuzz generator's cases (fixed seeds) and the kept corpus, cycled through.
  const bad: { route: Route; body: string | Buffer; type: string }[] = [
    ...keptCorpus().map((c) => ({ route: c.route, body: c.body, type: "application/json" })),
    ...ROUTES.flatMap((route) => sampleCases(route, Math.min(FUZZ_RUNS, 300)).map(([body, type]) => ({ route, body, type }))),
  ];
  let badNext = 0;

  // Tokens per word of the filler text, measured once, so a long prompt nearly fills the context.
  const probeWords = 200;
  const probe = Array.from({ length: probeWords }, () => pick(WORDS)).join(" ");
  const usage = (await (await fetch(`${o.url}/v1/completions`, {
    method: "POST", headers: { "content-type": "application/json" },
    body: JSON.stringify({ model, prompt: probe, max_tokens: 1 }),
  })).json()) as { usage: { prompt_tokens: number } };
  const tokPerWord = usage.usage.prompt_tokens / probeWords;
  const words = (n: number) => Array.from({ length: n }, () => pick(WORDS)).join(" ");

  const result: SoakResult = { requests: 0, warmup: null, byKind: {}, expected: {}, unexpected: {}, examples: [], samples: [], end: undefined as never, rssGrowthPct: 0, failures: [] };
  const unexpected = (kind: string, what: string) => {
    count(result.unexpected, what);
    if (result.examples.length < 10) result.examples.push(`${kind}: ${what}`);
  };

  async function one(kind: Kind): Promise<void> {
    const ctrl = new AbortController();
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      ctrl.abort();
    }, timeoutMs);
    const post = (path: string, body: unknown) =>
      fetch(o.url + path, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body), signal: ctrl.signal });
    const maxTokens = int(1, 48);
    const temperature = pick([0, 0.7, 1]);
    const messages = [{ role: "user", content: words(int(3, 30)) }];
    let plannedAbort = false;
    try {
      switch (kind) {
        case "chat":
        case "completion":
        case "long-prompt": {
          const long = kind === "long-prompt";
          const chatForm = long ? rand() < 0.5 : kind === "chat";
          // 85–100 % of what fits with the answer, less a margin for the chat template.
          const promptWords = long ? Math.floor(((o.ctx - maxTokens - 48) / tokPerWord) * (0.85 + 0.15 * rand())) : int(3, 40);
          const res = chatForm
            ? await post("/v1/chat/completions", { model, messages: [{ role: "user", content: words(promptWords) }], max_tokens: maxTokens, temperature })
            : await post("/v1/completions", { model, prompt: words(promptWords), max_tokens: maxTokens, temperature });
          const text = await res.text();
          if (res.status !== 200) throw new Unexpected(`${res.status >= 500 ? "5xx" : "4xx on a valid request"}: ${res.status} ${text.slice(0, 200)}`);
          const body = JSON.parse(text) as { choices?: unknown[] };
          if (!Array.isArray(body.choices) || body.choices.length !== 1) throw new Unexpected(`malformed answer: ${text.slice(0, 200)}`);
          count(result.expected, "ok");
          break;
        }
        case "chat-stream":
        case "completion-stream":
        case "abort-stream": {
          const chatForm = kind === "abort-stream" ? rand() < 0.5 : kind === "chat-stream";
          const path = chatForm ? "/v1/chat/completions" : "/v1/completions";
          const body = chatForm ? { model, messages, max_tokens: kind === "abort-stream" ? 64 : maxTokens, temperature, stream: true }
            : { model, prompt: messages[0]!.content, max_tokens: kind === "abort-stream" ? 64 : maxTokens, temperature, stream: true };
          // Aborts: a third before the answer's headers (at a random moment), the rest after 1–20 chunks.
          let abortAfter: number | null = null;
          if (kind === "abort-stream") {
            plannedAbort = true;
            if (rand() < 1 / 3) setTimeout(() => ctrl.abort(), int(0, 300));
            else abortAfter = int(1, 20);
          }
          const res = await post(path, body);
          if (res.status !== 200) throw new Unexpected(`${res.status >= 500 ? "5xx" : "4xx on a valid request"}: ${res.status} ${(await res.text()).slice(0, 200)}`);
          const { text, aborted } = await readStream(res, ctrl, abortAfter);
          if (aborted) {
            count(result.expected, "aborted stream");
            break;
          }
          checkSse(text);
          count(result.expected, kind === "abort-stream" ? "ok (ended before its abort)" : "ok");
          break;
        }
        case "api-chat": {
          const stream = rand() < 0.5;
          const res = await post("/api/chat", { model, messages, stream, options: { num_predict: maxTokens, temperature } });
          const text = await res.text();
          if (res.status !== 200) throw new Unexpected(`${res.status >= 500 ? "5xx" : "4xx on a valid request"}: ${res.status} ${text.slice(0, 200)}`);
          const last = JSON.parse(text.trim().split("\n").at(-1)!) as { done?: boolean; error?: string };
          if (last.done !== true) throw new Unexpected(`/api/chat without a final done line: ${text.slice(-200)}`);
          count(result.expected, "ok");
          break;
        }
        case "bad-request": {
          const c = bad[badNext++ % bad.length]!;
          const r = await send(o.url, c.route, c.body, c.type, ctrl.signal);
          const why = problem(c.route, r);
          if (why) throw new Unexpected(`fuzz case on ${c.route.path}: ${why}`);
          count(result.expected, r.status < 300 ? "fuzz case 2xx" : `fuzz case ${r.status}`);
          break;
        }
      }
    } catch (e) {
      if (e instanceof Unexpected) unexpected(kind, e.message);
      else if (timedOut) unexpected(kind, `timeout after ${timeoutMs / 1000} s`);
      else if (plannedAbort && ctrl.signal.aborted) count(result.expected, "aborted stream");
      else unexpected(kind, `connection error: ${errorName(e)}`);
    } finally {
      clearTimeout(timer);
      result.requests++;
      count(result.byKind, kind);
    }
  }

  // Warm-up: the KV pool's pages are committed on first touch, so RSS climbs while the prefix
  // cache spreads over blocks never used before (+50 % in the first minute of a 16 × 1024 pool).
  // That is start-up, not a leak: `parallel` prompts that nearly fill their context, all at once,
  // touch every block before the first sample, so RSS growth after it measures leaks only.
  if (!o.noWarmup) {
    const w0 = Date.now();
    const beforeMiB = procStatus(o.pid).rssMiB;
    const promptWords = Math.floor((o.ctx - 16 - 24) / tokPerWord);
    await Promise.all(Array.from({ length: o.parallel }, async () => {
      const res = await fetch(`${o.url}/v1/completions`, {
        method: "POST", headers: { "content-type": "application/json" },
        body: JSON.stringify({ model, prompt: words(promptWords), max_tokens: 16, temperature: 0, ignore_eos: true }),
        signal: AbortSignal.timeout(600_000),
      });
      const text = await res.text();
      if (res.status !== 200) unexpected("warm-up", `warm-up request: ${res.status} ${text.slice(0, 200)}`);
    }));
    result.warmup = { beforeMiB, afterMiB: procStatus(o.pid).rssMiB, seconds: (Date.now() - w0) / 1000 };
  }

  const t0 = Date.now();
  const stopAt = t0 + o.durationMs;
  const clients = Array.from({ length: o.concurrency }, async () => {
    while (Date.now() < stopAt) await one(kindOf());
  });

  const rowOf = (s: Sample) => [s.t.toFixed(0), s.rssMiB.toFixed(1), String(s.fds), String(s.kvUsed), String(s.kvCached), String(s.kvTotal),
    String(s.running), String(s.waiting), String(s.requests)];
  o.onRow?.(`| t (s) | RSS MiB | fds | KV used | KV cached | KV total | running | waiting | requests |`);
  const takeSample = async (): Promise<Sample | null> => {
    try {
      const s = await sample(o.url, o.pid, (Date.now() - t0) / 1000, result.requests);
      o.onRow?.(`| ${rowOf(s).join(" | ")} |`);
      return s;
    } catch (e) {
      unexpected("sampler", `sampling failed: ${(e as Error).message}`);
      return null;
    }
  };
  const sampler = (async () => {
    for (let next = t0 + o.sampleMs; next <= stopAt + 1; next += o.sampleMs) {
      await new Promise((r) => setTimeout(r, Math.max(0, next - Date.now())));
      const s = await takeSample();
      if (s) result.samples.push(s);
    }
  })();
  await Promise.all([...clients, sampler]);

  // Idle: everything must drain (KV blocks held by sequences, running and waiting sequences).
  const drainDeadline = Date.now() + (o.drainMs ?? 30_000);
  let end: Sample | null = null;
  for (;;) {
    end = await takeSample();
    if (end && end.kvUsed === 0 && end.running === 0 && end.waiting === 0) break;
    if (Date.now() > drainDeadline) break;
    await new Promise((r) => setTimeout(r, 1000));
  }
  if (!end) throw new Error("the server could not be sampled after the load");
  result.end = end;

  const first = result.samples[0];
  const last = result.samples.at(-1);
  result.rssGrowthPct = first && last ? ((last.rssMiB - first.rssMiB) / first.rssMiB) * 100 : NaN;
  const nUnexpected = Object.values(result.unexpected).reduce((a, b) => a + b, 0);
  if (nUnexpected > 0) result.failures.push(`${nUnexpected} unexpected error(s): ${JSON.stringify(result.unexpected)}`);
  if (!(result.rssGrowthPct <= o.rssLimitPct)) result.failures.push(`RSS grew ${result.rssGrowthPct.toFixed(1)} % from the first sample to the last (limit ${o.rssLimitPct} %)`);
  if (end.kvUsed !== 0 || end.running !== 0 || end.waiting !== 0) {
    result.failures.push(`not drained after idle: ${end.kvUsed} KV blocks used, ${end.running} running, ${end.waiting} waiting`);
  }
  return result;
}

// ---------- report ----------

export function soakReport(r: SoakResult): string {
  const samples = markdownTable(
    ["t (s)", "RSS MiB", "open fds", "KV blocks used", "KV blocks cached", "running", "waiting", "requests done"],
    [...r.samples, r.end].map((s, i) => [i === r.samples.length ? `${s.t.toFixed(0)} (idle)` : s.t.toFixed(0), s.rssMiB.toFixed(1), String(s.fds),
      String(s.kvUsed), String(s.kvCached), String(s.running), String(s.waiting), String(s.requests)]),
  );
  const kinds = markdownTable(["request kind", "sent"], Object.entries(r.byKind).sort().map(([k, n]) => [k, String(n)]));
  const outcomes = markdownTable(
    ["outcome", "class", "count"],
    [
      ...Object.entries(r.expected).sort().map(([k, n]) => [k, "expected", String(n)]),
      ...Object.entries(r.unexpected).sort().map(([k, n]) => [k.slice(0, 120).replaceAll("|", "\\|"), "**unexpected**", String(n)]),
    ],
  );
  const first = r.samples[0];
  const last = r.samples.at(-1);
  const summary = [
    ...(r.warmup ? [`- warm-up (every KV block touched once, before the load): RSS ${r.warmup.beforeMiB.toFixed(1)} → ${r.warmup.afterMiB.toFixed(1)} MiB in ${r.warmup.seconds.toFixed(0)} s`] : []),
    `- requests served: ${r.requests}`,
    `- unexpected errors: ${Object.values(r.unexpected).reduce((a, b) => a + b, 0)}`,
    `- RSS first sample ${first?.rssMiB.toFixed(1)} MiB → last under load ${last?.rssMiB.toFixed(1)} MiB (${r.rssGrowthPct >= 0 ? "+" : ""}${r.rssGrowthPct.toFixed(2)} %); after idle ${r.end.rssMiB.toFixed(1)} MiB`,
    `- open fds first ${first?.fds} → last ${last?.fds}, after idle ${r.end.fds}`,
    `- at the end after idle: ${r.end.kvUsed} KV blocks used (${r.end.kvCached} cached for prefix reuse of ${r.end.kvTotal}), ${r.end.running} running, ${r.end.waiting} waiting`,
    `- verdict: ${r.failures.length ? `FAIL — ${r.failures.join("; ")}` : "pass"}`,
  ].join("\n");
  return [summary, "", samples, "", kinds, "", outcomes, ...(r.examples.length ? ["", "First unexpected outcomes:", "", ...r.examples.map((e) => `- ${e.slice(0, 300)}`)] : [])].join("\n");
}

// ---------- CLI ----------

async function main(): Promise<void> {
  const { flags } = parseArgs(process.argv.slice(2));
  const minutes = num(flags, "minutes", 30);
  const concurrency = num(flags, "concurrency", 16);
  const parallel = num(flags, "parallel", concurrency);
  const ctx = num(flags, "ctx", 1024);
  const threads = num(flags, "threads", 2);
  const sampleS = num(flags, "sample-s", 60);
  const rssLimitPct = num(flags, "rss-limit-pct", 5);
  const model = resolve(flags.get("model") ?? DEFAULT_MODEL);
  const seed = num(flags, "seed", 1);

  const server = await startWick({ model, parallel, ctx, threads });
  const kill = () => server.proc.exitCode === null && server.proc.kill("SIGKILL");
  process.on("exit", kill);
  process.on("SIGINT", () => process.exit(130));
  process.stderr.write(`wick serve pid ${server.pid} at ${server.url} (log ${server.log}); ${minutes} min at concurrency ${concurrency}\n`);
  const result = await runSoak({
    url: server.url, pid: server.pid, durationMs: minutes * 60_000, sampleMs: sampleS * 1000, concurrency, ctx, parallel, seed, rssLimitPct,
    onRow: (row) => process.stdout.write(row + "\n"),
  });
  if (server.proc.exitCode !== null || server.proc.signalCode !== null) result.failures.push(`the server exited during the run (${server.proc.exitCode ?? server.proc.signalCode})`);
  const code = await server.stop();
  const report = soakReport(result) + `\n\n- server exit code after SIGTERM: ${code}`;
  process.stdout.write("\n" + report + "\n");
  if (flags.get("results")) {
    const notes = `\`wick serve -m ${model.replace(ROOT + "/", "")} -np ${parallel} -c ${ctx} -t ${threads}\` as a child; ${concurrency} clients without pause for ${minutes} min, mix (weights) ${MIX.map(([k, w]) => `${k} ${w}`).join(", ")}; sampled every ${sampleS} s. A warm-up first runs ${parallel} near-full-context prompts at once (touches every KV block). RSS growth: first sample (end of the first interval) to the last under load.`;
    appendResults(flags.get("results")!, "benches/soak.ts", `soak: ${minutes} min at concurrency ${concurrency}`, `${notes}\n\n${report}`);
  }
  process.exit(result.failures.length ? 1 : 0);
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  main().catch((e) => {
    process.stderr.write(`${(e as Error).stack ?? e}\n`);
    process.exit(2);
  });
}
