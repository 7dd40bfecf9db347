/**
 * Serving benchmark client for any OpenAI-compatible `/v1/completions` endpoint (streaming),
 * modelled on `vllm bench serve` / `sglang.bench_serving` with the random dataset:
 * fixed-length random prompts, `max_tokens` fixed with `ignore_eos: true`, all requests
 * released at t=0 and held to `concurrency` in flight (vLLM's `--max-concurrency` with
 * `--request-rate inf`).
 *
 *   npx tsx benches/serving.ts --base-url http://127.0.0.1:8080 \
 *       [--concurrency 1,4,8,16] [--num-prompts N] [--input-len 256] [--output-len 64] \
 *       [--warmup 2] [--seed 0] [--max-level-s 300] [--request-timeout-s 120] [--json out.json]
 *
 * Definitions (reference/api-anchors.md §3.6, §4.3):
 *   TTFT  time from sending the request to the first chunk carrying non-empty text.
 *   ITL   gaps between successive chunks carrying non-empty text (one per chunk, so a
 *         server that packs several tokens per chunk shows fewer, longer gaps).
 *   E2EL  time from sending to the last chunk with `choices` (the finish chunk).
 *   TPOT  (E2EL - TTFT) / (output_tokens - 1), only for requests with > 1 output token.
 *   output_tokens  `usage.completion_tokens` from the final usage chunk
 *         (`stream_options.include_usage`), else the number of text chunks.
 *   request throughput = completed / duration; output throughput = sum(output_tokens) /
 *         duration; duration = first send to last completion of the level.
 * Prompt length: exact when the server has llama.cpp's `/tokenize` (the word count is
 * adjusted until the text tokenizes to `input-len` tokens, BOS included when the model
 * adds one), otherwise approximate (the words are about one token each). The prompt token
 * count each server reports in `usage.prompt_tokens` is averaged into the result.
 * Loopback only: refuses any host but 127.0.0.1 / ::1 / localhost.
 */
import { pathToFileURL } from "node:url";
import { writeFileSync } from "node:fs";

export interface ServingOptions {
  baseUrl: string;
  model?: string;
  concurrency: number[];
  /** Requests per concurrency level; default max(8, 4 x concurrency) capped at 128. */
  numPrompts?: number;
  inputLen: number;
  outputLen: number;
  warmup: number;
  seed: number;
  maxLevelS: number;
  requestTimeoutS: number;
  /** Extra JSON fields merged into every request body. */
  extraBody?: Record<string, unknown>;
  quiet?: boolean;
}

export interface RequestResult {
  ok: boolean;
  error?: string;
  promptTokens: number;
  outputTokens: number;
  ttftMs: number;
  e2eMs: number;
  itlMs: number[];
  tpotMs?: number;
}

export interface Stat {
  mean: number;
  median: number;
  p99: number;
}

export interface LevelResult {
  concurrency: number;
  numPrompts: number;
  completed: number;
  failed: number;
  errors: string[];
  durationS: number;
  meanPromptTokens: number;
  totalOutputTokens: number;
  requestThroughput: number;
  outputThroughput: number;
  totalTokenThroughput: number;
  ttftMs: Stat;
  tpotMs: Stat;
  itlMs: Stat;
  e2eMs: Stat;
}

export interface ServingResult {
  baseUrl: string;
  model: string;
  inputLen: number;
  outputLen: number;
  exactPromptLen: boolean;
  date: string;
  levels: LevelResult[];
}

// ---------- prompts ----------

// Common English words: random sequences of them make prompts of a predictable token count.
const WORDS = (
  "the of and to in is was for on that with as by at from his her they this are be which or an had " +
  "not but were one all their there been has have when who will more no if out so said what up its " +
  "about into than them can only other new some could time these two may then do first any my now " +
  "such like our over man me even most made after also did many before must through back years where " +
  "much your way well down should because each just those people how too little state good very make " +
  "world still own see men work long get here between both life being under never day same another know " +
  "while last might us great old year off come since against go came right used take three place small " +
  "house water room light river city music garden window paper table market winter summer school " +
  "family friend number story point question answer morning evening country village mountain island " +
  "forest ocean bridge road train station letter picture voice color green blue red yellow black white " +
  "quiet loud early late quick slow warm cold bright dark simple strong gentle careful happy open close"
).split(" ");

/** Deterministic PRNG (mulberry32). */
export function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function words(rand: () => number, n: number): string[] {
  return Array.from({ length: n }, () => WORDS[Math.floor(rand() * WORDS.length)]!);
}

export type Tokenizer = (text: string) => Promise<number>;

/** llama.cpp's `/tokenize` (also the count the server will see, BOS included), or null. */
export async function serverTokenizer(baseUrl: string): Promise<Tokenizer | null> {
  const count: Tokenizer = async (text) => {
    const res = await fetch(`${baseUrl}/tokenize`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ content: text, add_special: true }),
      signal: AbortSignal.timeout(10_000),
    });
    if (!res.ok) throw new Error(`/tokenize: HTTP ${res.status}`);
    const body = (await res.json()) as { tokens?: unknown[] };
    if (!Array.isArray(body.tokens)) throw new Error("/tokenize: no tokens");
    return body.tokens.length;
  };
  try {
    await count("hello world");
    return count;
  } catch {
    return null;
  }
}

/**
 * `n` random prompts of `inputLen` tokens: exact with a tokenizer (word count searched so
 * the text tokenizes to inputLen; if no word count hits it exactly, the closest below).
 */
export async function makePrompts(n: number, inputLen: number, seed: number, tokenize: Tokenizer | null): Promise<string[]> {
  const rand = rng(seed);
  const out: string[] = [];
  for (let i = 0; i < n; i++) {
    const pool = words(rand, Math.ceil(inputLen * 1.5) + 16);
    if (!tokenize) {
      // These common words are about one token each (with the leading space); one more for BOS.
      out.push(pool.slice(0, Math.max(1, inputLen - 1)).join(" "));
      continue;
    }
    // Token count is monotone in the word count: binary-search the largest k with count <= inputLen.
    let lo = 1;
    let hi = pool.length;
    while ((await tokenize(pool.slice(0, hi).join(" "))) < inputLen && hi < 8 * inputLen) {
      pool.push(...words(rand, inputLen));
      hi = pool.length;
    }
    while (lo < hi) {
      const mid = Math.ceil((lo + hi) / 2);
      if ((await tokenize(pool.slice(0, mid).join(" "))) <= inputLen) lo = mid;
      else hi = mid - 1;
    }
    out.push(pool.slice(0, lo).join(" "));
  }
  return out;
}

// ---------- statistics ----------

/** numpy.percentile with linear interpolation (what vLLM reports). */
export function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return NaN;
  const idx = (p / 100) * (sorted.length - 1);
  const lo = Math.floor(idx);
  const hi = Math.ceil(idx);
  return sorted[lo]! + (sorted[hi]! - sorted[lo]!) * (idx - lo);
}

export function stat(values: number[]): Stat {
  const s = [...values].sort((a, b) => a - b);
  const mean = s.length ? s.reduce((a, b) => a + b, 0) / s.length : NaN;
  return { mean, median: percentile(s, 50), p99: percentile(s, 99) };
}

// ---------- one request ----------

export function assertLoopback(baseUrl: string): void {
  const host = new URL(baseUrl).hostname;
  if (!["127.0.0.1", "localhost", "[::1]", "::1"].includes(host)) {
    throw new Error(`refusing non-loopback host ${host}: this benchmark only talks to 127.0.0.1`);
  }
}

export async function modelId(baseUrl: string): Promise<string> {
  try {
    const res = await fetch(`${baseUrl}/v1/models`, { signal: AbortSignal.timeout(10_000) });
    const body = (await res.json()) as { data?: { id?: string }[] };
    return body.data?.[0]?.id ?? "default";
  } catch {
    return "default";
  }
}

async function oneRequest(
  baseUrl: string,
  body: Record<string, unknown>,
  signal: AbortSignal,
): Promise<RequestResult> {
  const r: RequestResult = { ok: false, promptTokens: 0, outputTokens: 0, ttftMs: 0, e2eMs: 0, itlMs: [] };
  const start = performance.now();
  let last = 0;
  let lastChoice = 0;
  let textChunks = 0;
  let usageTokens: number | undefined;
  try {
    const res = await fetch(`${baseUrl}/v1/completions`, {
      method: "POST",
      headers: { "content-type": "application/json", accept: "text/event-stream" },
      body: JSON.stringify(body),
      signal,
    });
    if (!res.ok || !res.body) {
      r.error = `HTTP ${res.status}: ${(await res.text()).slice(0, 200)}`;
      return r;
    }
    const decoder = new TextDecoder();
    let buf = "";
    let done = false;
    for await (const bytes of res.body as unknown as AsyncIterable<Uint8Array>) {
      const now = performance.now();
      buf += decoder.decode(bytes, { stream: true });
      // SSE events end with a blank line (\n\n, \r\n\r\n or \r\r).
      let m: RegExpExecArray | null;
      const sep = /\r\n\r\n|\n\n|\r\r/;
      while ((m = sep.exec(buf))) {
        const event = buf.slice(0, m.index);
        buf = buf.slice(m.index + m[0].length);
        const data = event
          .split(/\r\n|\n|\r/)
          .filter((l) => l.startsWith("data:"))
          .map((l) => l.slice(5).trimStart())
          .join("\n");
        if (!data) continue;
        if (data.startsWith("[DONE]")) {
          done = true;
          continue;
        }
        const json = JSON.parse(data) as {
          error?: unknown;
          choices?: { text?: string }[];
          usage?: { prompt_tokens?: number; completion_tokens?: number } | null;
        };
        if (json.error) throw new Error(`stream error: ${JSON.stringify(json.error).slice(0, 200)}`);
        if (json.usage) {
          usageTokens = json.usage.completion_tokens;
          r.promptTokens = json.usage.prompt_tokens ?? 0;
        }
        if (json.choices && json.choices.length > 0) {
          lastChoice = now;
          if (json.choices[0]!.text) {
            if (textChunks === 0) r.ttftMs = now - start;
            else r.itlMs.push(now - last);
            last = now;
            textChunks++;
          }
        }
      }
    }
    if (!done) throw new Error("stream ended without [DONE]");
    if (textChunks === 0) throw new Error("no text chunk");
    r.e2eMs = lastChoice - start;
    r.outputTokens = usageTokens ?? textChunks;
    if (r.outputTokens > 1) r.tpotMs = (r.e2eMs - r.ttftMs) / (r.outputTokens - 1);
    r.ok = true;
  } catch (err) {
    r.error = (err as Error).name === "AbortError" || (err as Error).name === "TimeoutError" ? "timeout" : String((err as Error).message ?? err);
  }
  return r;
}

// ---------- a level ----------

async function runLevel(
  opts: ServingOptions,
  model: string,
  prompts: string[],
  concurrency: number,
): Promise<LevelResult> {
  const levelAbort = new AbortController();
  const levelTimer = setTimeout(() => levelAbort.abort(), opts.maxLevelS * 1000);
  const results: RequestResult[] = [];
  let next = 0;
  const start = performance.now();
  let end = start;
  const worker = async () => {
    while (next < prompts.length && !levelAbort.signal.aborted) {
      const prompt = prompts[next++]!;
      const body = {
        model,
        prompt,
        max_tokens: opts.outputLen,
        temperature: 0,
        ignore_eos: true,
        stream: true,
        stream_options: { include_usage: true },
        ...opts.extraBody,
      };
      const signal = AbortSignal.any([levelAbort.signal, AbortSignal.timeout(opts.requestTimeoutS * 1000)]);
      const r = await oneRequest(opts.baseUrl, body, signal);
      results.push(r);
      if (r.ok) end = performance.now();
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  clearTimeout(levelTimer);
  const skipped = prompts.length - results.length;
  const ok = results.filter((r) => r.ok);
  const durationS = (end - start) / 1000;
  const outTotal = ok.reduce((a, r) => a + r.outputTokens, 0);
  const inTotal = ok.reduce((a, r) => a + r.promptTokens, 0);
  const errors = [...new Set(results.filter((r) => !r.ok).map((r) => r.error ?? "?"))];
  if (skipped > 0) errors.push(`${skipped} not sent: level exceeded --max-level-s ${opts.maxLevelS}`);
  return {
    concurrency,
    numPrompts: prompts.length,
    completed: ok.length,
    failed: prompts.length - ok.length,
    errors,
    durationS,
    meanPromptTokens: ok.length ? inTotal / ok.length : NaN,
    totalOutputTokens: outTotal,
    requestThroughput: ok.length / durationS,
    outputThroughput: outTotal / durationS,
    totalTokenThroughput: (inTotal + outTotal) / durationS,
    ttftMs: stat(ok.map((r) => r.ttftMs)),
    tpotMs: stat(ok.filter((r) => r.tpotMs !== undefined).map((r) => r.tpotMs!)),
    itlMs: stat(ok.flatMap((r) => r.itlMs)),
    e2eMs: stat(ok.map((r) => r.e2eMs)),
  };
}

export function defaultNumPrompts(concurrency: number): number {
  return Math.min(128, Math.max(8, 4 * concurrency));
}

/** Prompts a run needs: the warm-up ones plus a distinct set per level (no cross-level cache hits). */
export function promptsNeeded(opts: Pick<ServingOptions, "concurrency" | "numPrompts" | "warmup">): number {
  return opts.warmup + opts.concurrency.reduce((a, c) => a + (opts.numPrompts ?? defaultNumPrompts(c)), 0);
}

/**
 * Runs every concurrency level. `prompts` may be given (so two servers get the same text);
 * otherwise they are made here, exact-length when the server has /tokenize.
 */
export async function runServing(opts: ServingOptions, given?: { prompts: string[]; exact: boolean }): Promise<ServingResult> {
  assertLoopback(opts.baseUrl);
  const model = opts.model ?? (await modelId(opts.baseUrl));
  const needed = promptsNeeded(opts);
  let prompts = given?.prompts;
  let exact = given?.exact ?? false;
  if (!prompts) {
    const tok = await serverTokenizer(opts.baseUrl);
    exact = tok !== null;
    prompts = await makePrompts(needed, opts.inputLen, opts.seed, tok);
  }
  if (prompts.length < needed) throw new Error(`${needed} prompts needed, ${prompts.length} given`);
  const log = (s: string) => opts.quiet || process.stderr.write(`${s}\n`);
  if (opts.warmup > 0) {
    log(`warmup: ${opts.warmup} request(s)`);
    await runLevel({ ...opts, maxLevelS: Math.min(opts.maxLevelS, 120) }, model, prompts.slice(0, opts.warmup), 1);
  }
  const levels: LevelResult[] = [];
  let used = opts.warmup;
  for (const c of opts.concurrency) {
    const n = opts.numPrompts ?? defaultNumPrompts(c);
    const chosen = prompts.slice(used, used + n);
    used += n;
    log(`concurrency ${c}: ${n} requests, ${opts.inputLen} in / ${opts.outputLen} out`);
    const lr = await runLevel(opts, model, chosen, c);
    levels.push(lr);
    log(
      `  done in ${lr.durationS.toFixed(1)} s: ${lr.completed} ok, ${lr.failed} failed` +
        (lr.errors.length ? ` (${lr.errors.join("; ")})` : ""),
    );
  }
  return {
    baseUrl: opts.baseUrl,
    model,
    inputLen: opts.inputLen,
    outputLen: opts.outputLen,
    exactPromptLen: exact,
    date: new Date().toISOString(),
    levels,
  };
}

// ---------- output ----------

export function fmt(x: number, digits = 1): string {
  if (!Number.isFinite(x)) return "-";
  return x.toFixed(digits);
}

/** A markdown table, one row per concurrency level. */
export function servingTable(r: ServingResult): string {
  const head = [
    "conc", "reqs ok/n", "in tok", "req/s", "out tok/s",
    "TTFT mean", "TTFT med", "TTFT p99", "TPOT mean", "TPOT med", "TPOT p99", "ITL mean", "ITL med", "ITL p99",
  ];
  const rows = r.levels.map((l) => [
    String(l.concurrency), `${l.completed}/${l.numPrompts}`, fmt(l.meanPromptTokens, 0), fmt(l.requestThroughput, 2),
    fmt(l.outputThroughput), fmt(l.ttftMs.mean), fmt(l.ttftMs.median), fmt(l.ttftMs.p99),
    fmt(l.tpotMs.mean, 2), fmt(l.tpotMs.median, 2), fmt(l.tpotMs.p99, 2),
    fmt(l.itlMs.mean, 2), fmt(l.itlMs.median, 2), fmt(l.itlMs.p99, 2),
  ]);
  return markdownTable(head, rows);
}

export function markdownTable(head: string[], rows: string[][]): string {
  const line = (cells: string[]) => `| ${cells.join(" | ")} |`;
  return [line(head), line(head.map(() => "---")), ...rows.map(line)].join("\n");
}

// ---------- CLI ----------

export function parseArgs(argv: string[]): { flags: Map<string, string>; positional: string[] } {
  const flags = new Map<string, string>();
  const positional: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    if (a.startsWith("--")) {
      const eq = a.indexOf("=");
      if (eq > 0) flags.set(a.slice(2, eq), a.slice(eq + 1));
      else if (i + 1 < argv.length && !argv[i + 1]!.startsWith("--")) flags.set(a.slice(2), argv[++i]!);
      else flags.set(a.slice(2), "true");
    } else positional.push(a);
  }
  return { flags, positional };
}

export function intList(s: string): number[] {
  const xs = s.split(",").map((x) => Number(x.trim()));
  if (xs.some((x) => !Number.isInteger(x) || x < 1)) throw new Error(`bad list: ${s}`);
  return xs;
}

export function num(flags: Map<string, string>, name: string, dflt: number): number {
  const v = flags.get(name);
  if (v === undefined) return dflt;
  const n = Number(v);
  if (!Number.isFinite(n)) throw new Error(`--${name}: not a number: ${v}`);
  return n;
}

const USAGE = `usage: tsx benches/serving.ts --base-url http://127.0.0.1:PORT [--model ID]
  [--concurrency 1,4,8,16] [--num-prompts N (per level; default max(8, 4*c) <= 128)]
  [--input-len 256] [--output-len 64] [--warmup 2] [--seed 0]
  [--max-level-s 300] [--request-timeout-s 120] [--extra-body '{"cache_prompt":false}'] [--json out.json]`;

async function main(): Promise<void> {
  const { flags } = parseArgs(process.argv.slice(2));
  if (flags.has("help") || !flags.has("base-url")) {
    console.error(USAGE);
    process.exit(flags.has("help") ? 0 : 2);
  }
  const opts: ServingOptions = {
    baseUrl: flags.get("base-url")!.replace(/\/+$/, ""),
    model: flags.get("model"),
    concurrency: intList(flags.get("concurrency") ?? "1,4,8,16"),
    numPrompts: flags.has("num-prompts") ? num(flags, "num-prompts", 0) : undefined,
    inputLen: num(flags, "input-len", 256),
    outputLen: num(flags, "output-len", 64),
    warmup: num(flags, "warmup", 2),
    seed: num(flags, "seed", 0),
    maxLevelS: num(flags, "max-level-s", 300),
    requestTimeoutS: num(flags, "request-timeout-s", 120),
    extraBody: flags.has("extra-body") ? JSON.parse(flags.get("extra-body")!) : undefined,
  };
  const result = await runServing(opts);
  console.log(
    `\n${result.baseUrl} model=${result.model} input=${result.inputLen}${result.exactPromptLen ? " (exact)" : " (approx.)"} output=${result.outputLen} (ms; throughput per s)\n`,
  );
  console.log(servingTable(result));
  const json = flags.get("json");
  if (json) writeFileSync(json, JSON.stringify(result, null, 1));
  if (result.levels.some((l) => l.completed === 0)) process.exit(1);
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main().catch((err) => {
    console.error(`serving: ${(err as Error).message ?? err}`);
    process.exit(1);
  });
}
