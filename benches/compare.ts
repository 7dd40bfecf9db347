/**
 * Wick vs llama.cpp on the same GGUF, same thread count, one machine (DESIGN.md §7).
 *
 * Serving mode (default): starts each server on 127.0.0.1 in turn (never both at once),
 * waits for /health, runs benches/serving.ts at each concurrency with the same prompts,
 * stops it, and prints a side-by-side table with wick/llama ratios.
 *
 *   npx tsx benches/compare.ts serving [model.gguf ...] [--threads 2] [--concurrency 1,4,8,16]
 *       [--parallel N (default: max concurrency)] [--ctx 1024 (per sequence)]
 *       [--input-len 256] [--output-len 64] [--num-prompts N] [--peers wick,llama] [--rounds 1]
 *       [--wick-args="<extra wick serve flags>"] [--json out.json] [--results benches/RESULTS.md]
 *
 * Micro mode: prefill tokens/s (512-token prompt) and decode tokens/s (128 tokens), median
 * and spread over repeats, for Wick's in-process Engine, llama.cpp in-process through
 * node-llama-cpp, and llama-server's native /completion timings. Each engine runs in its
 * own child process (ggml worker threads spin; two engines in one process disturb each other).
 *
 *   npx tsx benches/compare.ts micro [model.gguf ...] [--threads 2] [--repeats 5] [--rounds 1]
 *       [--prompt-len 512] [--gen-len 128] [--engines wick,node-llama-cpp,llama-server]
 *       [--floor] [--json out.json] [--results benches/RESULTS.md]
 *
 * `--floor` probes the machine's read rate before and after each prompt and gives each decode
 * as a share of the bandwidth floor then (benches/lib/floor.ts).
 *
 * Long-context mode: micro at long prompts (default 4096 and 16384 tokens, one repeat, 32
 * decoded tokens after each): prefill at long context and decode over a long KV.
 *
 *   npx tsx benches/compare.ts long [model.gguf ...] [--prompt-lens 4096,16384] [--gen-len 32]
 *       [--repeats 1] [--prefill-chunk 0] [...micro flags]
 *
 * Models default to the two in .cache/models (`python3 scripts/fetch_models.py all`). A model
 * may also be named by its LFM2 bench alias (issue #20's shapes, see BENCH_FILES), resolved in
 * `--bench-dir` (default $WICK_BENCH_DIR or .cache/tmp/bench-lfm2); `files` writes them there:
 *
 *   npx tsx benches/compare.ts files [--bench-dir DIR]
 *
 * `files --real` writes the full-size LFM2.5-1.2B (Q8_0, Q4_K_M) and LFM2-8B-A1B (Q4_K_M, ≈5 GB)
 * shapes instead (REAL_FILES; about 15 GB on disk with their sources).
 *
 * Cold start: spawn → /health → first token of a one-token request, and RSS, per server:
 *
 *   npx tsx benches/compare.ts cold [model.gguf ...] [--threads 2] [--repeats 3]
 * `--peers llama,llama` runs llama-server against itself (validates the harness without Wick).
 */
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { appendFileSync, existsSync, mkdirSync, mkdtempSync, openSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, dirname, join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { fmt, intList, makePrompts, markdownTable, num, parseArgs, promptsNeeded, runServing, servingTable, stat, type ServingOptions, type ServingResult } from "./serving.ts";

import { summarize, type Summary } from "../ts/cli/bench.ts";
import { appendResults as appendProvenance, commit, machine } from "./lib/provenance.ts";
import { freePort } from "./lib/net.ts";
import { decodeBytes, probeFloorGbps, startProber } from "./lib/floor.ts";
import { llamaSample, loadWick, wickSample, type Sample } from "./lib/runs.ts";

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const LLAMA_SERVER = join(ROOT, ".cache/llama-build/bin/llama-server");
const LOG_DIR = join(ROOT, ".cache/tmp/bench-logs");
const DEFAULT_MODELS = [".cache/models/SmolLM2-135M-Instruct.Q4_1.gguf", ".cache/models/gemma-3-270m-q4_k_m.gguf"];
const LLAMA_QUANTIZE = join(ROOT, ".cache/llama-build/bin/llama-quantize");

/** The LFM2 bench files (issue #20) by alias: written by `wick-fixtures --bench-lfm2` (128k
 * llama-bpe vocabulary, tied head, 32k training context), the Q4_K_M one by llama-quantize
 * from the F16 one. */
const BENCH_FILES: Record<string, string> = {
  "lfm2-350m": "bench-lfm2-350m-v128k-q4_0.gguf",
  "lfm2-350m-q4km": "bench-lfm2-350m-v128k-q4_k_m.gguf",
  "lfm2-350m-s05": "bench-lfm2-350m-v128k-s05-q4_0.gguf",
  lfm2moe: "bench-lfm2moe-v128k-e32-top4-q4_0.gguf",
};

/** The full-size shapes (issue #31), by alias: `wick-fixtures --bench-real` writes the F16 /
 * Q8_0 ones, llama-quantize the Q4_K_M ones (the 8B-A1B's from its Q8_0). */
const REAL_FILES: Record<string, string> = {
  "lfm2.5-1.2b-q8_0": "bench-lfm2.5-1.2b-q8_0.gguf",
  "lfm2.5-1.2b-q4km": "bench-lfm2.5-1.2b-q4_k_m.gguf",
  "lfm2-8b-a1b-q4km": "bench-lfm2-8b-a1b-q4_k_m.gguf",
};
/** Each Q4_K_M file's llama-quantize source. */
const REAL_SOURCES: Record<string, string> = {
  "bench-lfm2.5-1.2b-q4_k_m.gguf": "bench-lfm2.5-1.2b-f16.gguf",
  "bench-lfm2-8b-a1b-q4_k_m.gguf": "bench-lfm2-8b-a1b-q8_0.gguf",
};

function benchDir(flags: Map<string, string>): string {
  return resolve(flags.get("bench-dir") ?? process.env.WICK_BENCH_DIR ?? join(ROOT, ".cache/tmp/bench-lfm2"));
}

/** A model argument: a bench alias (resolved in the bench dir) or a path. */
export function modelPath(arg: string, flags: Map<string, string>): string {
  const file = BENCH_FILES[arg] ?? REAL_FILES[arg];
  if (!file) return resolve(ROOT, arg);
  const real = arg in REAL_FILES ? " --real" : "";
  const p = join(benchDir(flags), file);
  if (!existsSync(p)) throw new Error(`${p} missing: run npx tsx benches/compare.ts files${real} --bench-dir ${benchDir(flags)}`);
  return p;
}

/** `llama-quantize src dst type` (from F16, or from Q8_0 where F16 would be too large). */
function quantize(src: string, dst: string, type: string): void {
  execFileSync(LLAMA_QUANTIZE, ["--allow-requantize", src, dst, type], {
    stdio: ["ignore", "ignore", "inherit"],
    env: { ...process.env, LD_LIBRARY_PATH: dirname(LLAMA_QUANTIZE) },
  });
}

/** Writes the missing bench files: the fixture writer (cargo, with the caller's
 * CARGO_TARGET_DIR), then llama-quantize for Q4_K_M. */
function writeBenchFiles(flags: Map<string, string>): void {
  const dir = benchDir(flags);
  mkdirSync(dir, { recursive: true });
  const missing = (f: string) => !existsSync(join(dir, f));
  if (flags.has("real")) {
    const written = Object.values(REAL_FILES).filter((f) => !REAL_SOURCES[f]);
    if ([...written, ...Object.values(REAL_SOURCES)].some(missing)) {
      execFileSync("cargo", ["run", "--release", "-q", "-p", "wick-fixtures", "--", dir, "--bench-real"], { cwd: ROOT, stdio: "inherit" });
    }
    for (const [f, src] of Object.entries(REAL_SOURCES)) if (missing(f)) quantize(join(dir, src), join(dir, f), "Q4_K_M");
    for (const [alias, f] of Object.entries(REAL_FILES)) console.log(`${alias}\t${join(dir, f)}`);
    return;
  }
  if (["bench-lfm2-350m-v128k-f16.gguf", ...Object.values(BENCH_FILES)].filter((f) => !f.includes("q4_k_m")).some(missing)) {
    execFileSync("cargo", ["run", "--release", "-q", "-p", "wick-fixtures", "--", dir, "--bench-lfm2"], { cwd: ROOT, stdio: "inherit" });
  }
  if (missing(BENCH_FILES["lfm2-350m-q4km"]!)) {
    quantize(join(dir, "bench-lfm2-350m-v128k-f16.gguf"), join(dir, BENCH_FILES["lfm2-350m-q4km"]!), "Q4_K_M");
  }
  for (const [alias, f] of Object.entries(BENCH_FILES)) console.log(`${alias}\t${join(dir, f)}`);
}

// ---------- processes ----------

const children = new Set<ChildProcess>();
function killAll(): void {
  for (const c of children) if (c.exitCode === null) c.kill("SIGKILL");
}
process.on("exit", killAll);
for (const sig of ["SIGINT", "SIGTERM"] as const) {
  process.on(sig, () => {
    killAll();
    process.exit(130);
  });
}

export interface Server {
  name: string;
  url: string;
  proc: ChildProcess;
  log: string;
}

export type PeerKind = "wick" | "llama";

/** Extra `wick serve` flags for every Wick peer (`--wick-args="--chunked-prefill-size 128"`). */
let wickArgs: string[] = [];

function serverCommand(kind: PeerKind, model: string, port: number, threads: number, parallel: number, ctx: number, extra: string[]): [string, string[]] {
  if (kind === "wick") {
    return [
      process.execPath,
      [join(ROOT, "bin/wick.js"), "serve", "-m", model, "--host", "127.0.0.1", "--port", String(port), "-t", String(threads), "-np", String(parallel), "-c", String(ctx), ...wickArgs, ...extra],
    ];
  }
  if (!existsSync(LLAMA_SERVER)) throw new Error(`${LLAMA_SERVER} missing: run bash scripts/build-llama-server.sh`);
  // llama-server's -c is the total KV size, split over the -np slots; Wick's -c is per sequence.
  return [LLAMA_SERVER, ["-m", model, "--host", "127.0.0.1", "--port", String(port), "-t", String(threads), "-np", String(parallel), "-c", String(ctx * parallel), "--no-webui", ...extra]];
}

/** `kind`'s server on `model`, healthy; `extra` flags go after the usual ones; /health is polled every `pollMs`. */
export async function startServer(kind: PeerKind, name: string, model: string, threads: number, parallel: number, ctx: number, extra: string[] = [], pollMs = 250): Promise<Server> {
  const port = await freePort();
  const [cmd, args] = serverCommand(kind, model, port, threads, parallel, ctx, extra);
  mkdirSync(LOG_DIR, { recursive: true });
  const log = join(LOG_DIR, `${name}-${basename(model, ".gguf")}.log`);
  const fd = openSync(log, "w");
  process.stderr.write(`start ${name}: ${[cmd, ...args].map((a) => a.replace(ROOT + "/", "")).join(" ")}  (log ${log.replace(ROOT + "/", "")})\n`);
  const proc = spawn(cmd, args, { cwd: ROOT, stdio: ["ignore", fd, fd] });
  children.add(proc);
  const url = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 180_000;
  while (Date.now() < deadline) {
    if (proc.exitCode !== null) {
      throw new Error(`${name} exited with ${proc.exitCode} before /health; see ${log}:\n${readFileSync(log, "utf8").slice(-1500)}`);
    }
    try {
      const res = await fetch(`${url}/health`, { signal: AbortSignal.timeout(2000) });
      if (res.ok) return { name, url, proc, log };
    } catch {
      /* not listening yet */
    }
    await new Promise((r) => setTimeout(r, pollMs));
  }
  proc.kill("SIGKILL");
  throw new Error(`${name} not healthy after 180 s; see ${log}`);
}

export async function stopServer(s: Server): Promise<void> {
  if (s.proc.exitCode !== null) return;
  const exited = new Promise<void>((r) => s.proc.once("exit", () => r()));
  s.proc.kill("SIGTERM");
  const t = setTimeout(() => s.proc.kill("SIGKILL"), 10_000);
  await exited;
  clearTimeout(t);
  children.delete(s.proc);
}

// ---------- tokenizer (prompts identical for every engine) ----------

interface Tok {
  /** Token ids of text, BOS prepended when the model adds one. */
  ids(text: string): number[];
  text(ids: number[]): string;
  dispose(): Promise<void>;
}

export async function llamaTokenizer(model: string): Promise<Tok> {
  const { getLlama } = await import("node-llama-cpp");
  const llama = await getLlama({ gpu: false, build: "never", usePrebuiltBinaries: true, skipDownload: true, logLevel: "error" as never });
  const m = await llama.loadModel({ modelPath: model, vocabOnly: true });
  const bos = m.tokens.shouldPrependBosToken && m.tokens.bos != null ? [m.tokens.bos] : [];
  return {
    ids: (text) => [...bos, ...m.tokenize(text)] as number[],
    text: (ids) => m.detokenize(ids as never),
    dispose: async () => {
      await m.dispose();
      await llama.dispose();
    },
  };
}

/** Exact-length text prompts (serving.ts's word prompts, measured with llama.cpp's tokenizer). */
function exactTextPrompts(tok: Tok, n: number, len: number, seed: number): Promise<string[]> {
  return makePrompts(n, len, seed, async (text) => tok.ids(text).length);
}

/** Token-id prompts of exactly `len` ids (BOS first when the model adds one). */
export async function idPrompts(tok: Tok, n: number, len: number, seed: number): Promise<number[][]> {
  return (await exactTextPrompts(tok, n, len + 8, seed)).map((t) => tok.ids(t).slice(0, len));
}

// ---------- machine / provenance: benches/lib/provenance.ts ----------

function appendResults(file: string, title: string, body: string): void {
  appendProvenance(file, "benches/compare.ts", title, body);
}

function ratio(a: number, b: number, digits = 2): string {
  return Number.isFinite(a) && Number.isFinite(b) && b !== 0 ? (a / b).toFixed(digits) : "-";
}

// ---------- serving ----------

async function servingMode(flags: Map<string, string>, models: string[]): Promise<void> {
  const threads = num(flags, "threads", 2);
  const concurrency = intList(flags.get("concurrency") ?? "1,4,8,16");
  const parallel = num(flags, "parallel", Math.max(...concurrency));
  const ctx = num(flags, "ctx", 1024);
  const inputLen = num(flags, "input-len", 256);
  const outputLen = num(flags, "output-len", 64);
  const rounds = num(flags, "rounds", 1);
  if (inputLen + outputLen + 8 > ctx) throw new Error(`--ctx ${ctx} is too small for ${inputLen}+${outputLen} tokens`);
  wickArgs = (flags.get("wick-args") ?? "").split(/\s+/).filter(Boolean);
  const peers = (flags.get("peers") ?? "wick,llama").split(",").map((p) => p.trim()) as PeerKind[];
  for (const p of peers) if (p !== "wick" && p !== "llama") throw new Error(`--peers: unknown ${p} (wick, llama)`);
  const names = peers.map((p, i) => (peers.indexOf(p) === i ? p : `${p}#${i + 1}`));
  const base: Omit<ServingOptions, "baseUrl"> = {
    concurrency,
    numPrompts: flags.has("num-prompts") ? num(flags, "num-prompts", 0) : undefined,
    inputLen,
    outputLen,
    warmup: num(flags, "warmup", 2),
    seed: num(flags, "seed", 0),
    maxLevelS: num(flags, "max-level-s", 300),
    requestTimeoutS: num(flags, "request-timeout-s", 120),
    model: "bench",
  };
  const all: { model: string; results: Record<string, ServingResult>; rounds?: Record<string, ServingResult>[] }[] = [];
  const sections: string[] = [];
  for (const model of models) {
    const tok = await llamaTokenizer(model);
    const prompts = await exactTextPrompts(tok, promptsNeeded(base), inputLen, base.seed);
    await tok.dispose();
    // Rounds alternate the servers' order, so a slow spell of the machine does not always
    // fall on the same one.
    const byRound: Record<string, ServingResult>[] = [];
    for (let round = 0; round < rounds; round++) {
      const order = peers.map((_, i) => (round % 2 ? peers.length - 1 - i : i));
      const results: Record<string, ServingResult> = {};
      for (const i of order) {
        const s = await startServer(peers[i]!, names[i]!, model, threads, parallel, ctx);
        try {
          results[names[i]!] = await runServing({ ...base, baseUrl: s.url }, { prompts, exact: true });
        } finally {
          await stopServer(s);
        }
      }
      byRound.push(results);
    }
    const results = byRound[0]!;
    all.push({ model, results, ...(rounds > 1 ? { rounds: byRound } : {}) });
    const lines = [`### ${basename(model)} — serving, threads=${threads}, -np ${parallel}, ctx ${ctx}/seq, ${inputLen} in / ${outputLen} out`, ""];
    if (rounds > 1) lines.push(`Full tables of round 1; the output throughput of every round follows them.`, "");
    for (const n of names) lines.push(`**${n}**`, "", servingTable(results[n]!), "");
    if (names.length >= 2) lines.push(`**${names[0]} / ${names[1]}** (TTFT/TPOT/ITL: < 1 is faster; throughput: > 1 is faster)`, "", sideBySide(results[names[0]!]!, results[names[1]!]!), "");
    if (rounds > 1) lines.push(`**output tok/s over ${rounds} rounds** (median (min–max); scaling = median / the median at concurrency ${concurrency[0]})`, "", roundsTable(byRound, names), "");
    sections.push(lines.join("\n"));
    console.log(`\n${lines.join("\n")}`);
  }
  const notes = [
    "Times in ms (mean/median/p99 over requests; ITL over all inter-chunk gaps), throughput per second.",
    "Servers run one at a time with the same prompts (exact token length via llama.cpp's tokenizer), temperature 0, ignore_eos, streaming /v1/completions.",
  ].join(" ");
  if (flags.get("json")) writeFileSync(flags.get("json")!, JSON.stringify({ machine: machine(), commit: commit(), runs: all }, null, 1));
  if (flags.get("results")) appendResults(flags.get("results")!, `serving: ${names.join(" vs ")}`, `${notes}\n\n${sections.join("\n")}`);
}

/** Output throughput per concurrency over rounds: each server's median and its scaling from
 * the first level, and the first two servers' ratio of medians. */
function roundsTable(byRound: Record<string, ServingResult>[], names: string[]): string {
  const levels = byRound[0]![names[0]!]!.levels.map((l) => l.concurrency);
  const at = (n: string, i: number) => summarize(byRound.map((r) => r[n]!.levels[i]!.outputThroughput));
  const head = ["conc", ...names.flatMap((n) => [`${n} out tok/s`, `${n} scaling`])];
  if (names.length >= 2) head.push(`${names[0]} / ${names[1]}`);
  const rows = levels.map((c, i) => {
    const row = [String(c)];
    for (const n of names) {
      const s = at(n, i);
      row.push(`${fmt(s.median)} (${fmt(s.min)}–${fmt(s.max)})`, ratio(s.median, at(n, 0).median));
    }
    if (names.length >= 2) row.push(ratio(at(names[0]!, i).median, at(names[1]!, i).median));
    return row;
  });
  return markdownTable(head, rows);
}

function sideBySide(a: ServingResult, b: ServingResult): string {
  const head = ["conc", "out tok/s", "req/s", "TTFT mean", "TTFT med", "TTFT p99", "TPOT mean", "TPOT med", "TPOT p99", "ITL med", "ITL p99"];
  const rows = a.levels.map((la, i) => {
    const lb = b.levels[i]!;
    return [
      String(la.concurrency),
      `${fmt(la.outputThroughput)} / ${fmt(lb.outputThroughput)} = ${ratio(la.outputThroughput, lb.outputThroughput)}`,
      ratio(la.requestThroughput, lb.requestThroughput),
      ratio(la.ttftMs.mean, lb.ttftMs.mean),
      ratio(la.ttftMs.median, lb.ttftMs.median),
      ratio(la.ttftMs.p99, lb.ttftMs.p99),
      ratio(la.tpotMs.mean, lb.tpotMs.mean),
      ratio(la.tpotMs.median, lb.tpotMs.median),
      ratio(la.tpotMs.p99, lb.tpotMs.p99),
      ratio(la.itlMs.median, lb.itlMs.median),
      ratio(la.itlMs.p99, lb.itlMs.p99),
    ];
  });
  return markdownTable(head, rows);
}

// ---------- prefix ----------

/**
 * Prefix reuse: per repeat a fresh shared prefix; a first request (prefix + suffix A) finds
 * nothing cached, a second (prefix + suffix B) can reuse the prefix's KV. Latency of a
 * one-token /v1/completions request ≈ TTFT. llama-server (-np 1) reuses its slot's cache for
 * the common prefix the same way (cache_prompt), so it is the peer.
 */
async function prefixMode(flags: Map<string, string>, models: string[]): Promise<void> {
  const threads = num(flags, "threads", 2);
  const prefixLen = num(flags, "prefix-len", 400);
  const suffixLen = num(flags, "suffix-len", 32);
  const repeats = num(flags, "repeats", 5);
  const peers = (flags.get("peers") ?? "wick,llama").split(",").map((p) => p.trim()) as PeerKind[];
  const sections: string[] = [];
  for (const model of models) {
    const tok = await llamaTokenizer(model);
    const prefixes = await exactTextPrompts(tok, repeats, prefixLen, 1);
    const suffixes = await exactTextPrompts(tok, 2 * repeats, suffixLen, 2);
    await tok.dispose();
    const rows: string[][] = [];
    const medians: Record<string, { cold: number; warm: number }> = {};
    for (const peer of peers) {
      const s = await startServer(peer, peer, model, threads, 1, prefixLen + 2 * suffixLen + 64);
      try {
        const ask = async (prompt: string) => {
          const t0 = performance.now();
          const res = await fetch(`${s.url}/v1/completions`, {
            method: "POST",
            headers: { "content-type": "application/json" },
            body: JSON.stringify({ model: "bench", prompt, max_tokens: 1, temperature: 0 }),
          });
          const body = (await res.json()) as { usage?: { prompt_tokens?: number; prompt_tokens_details?: { cached_tokens?: number } } };
          if (!res.ok) throw new Error(`${peer}: HTTP ${res.status} ${JSON.stringify(body)}`);
          return { ms: performance.now() - t0, cached: body.usage?.prompt_tokens_details?.cached_tokens, prompt: body.usage?.prompt_tokens };
        };
        await ask(suffixes[0]!); // warm-up
        const cold: number[] = [];
        const warm: number[] = [];
        let cachedInfo = "";
        for (let r = 0; r < repeats; r++) {
          const a = await ask(`${prefixes[r]} ${suffixes[2 * r]}`);
          const b = await ask(`${prefixes[r]} ${suffixes[2 * r + 1]}`);
          cold.push(a.ms);
          warm.push(b.ms);
          if (b.cached !== undefined) cachedInfo = `${b.cached} of ${b.prompt}`;
        }
        const [c, w] = [stat(cold).median, stat(warm).median];
        medians[peer] = { cold: c, warm: w };
        rows.push([peer, fmt(c), fmt(w), (w / c).toFixed(2), cachedInfo || "n/a"]);
      } finally {
        await stopServer(s);
      }
    }
    const lines = [`### ${basename(model)} — prefix reuse, threads=${threads}, ${prefixLen}-token shared prefix + ${suffixLen}-token suffix, ${repeats} repeats`, ""];
    lines.push(markdownTable(["server", "TTFT first (ms, median)", "TTFT sharing the prefix (ms, median)", "shared/first", "cached_tokens reported"], rows));
    if (medians.wick && medians.llama) {
      lines.push("", `Wick/llama-server: first ${ratio(medians.wick.cold, medians.llama.cold)}, sharing the prefix ${ratio(medians.wick.warm, medians.llama.warm)} (< 1: Wick is faster).`);
    }
    sections.push(lines.join("\n"));
    console.log(`\n${lines.join("\n")}`);
  }
  const notes = "TTFT = wall time of a streaming-free /v1/completions request with max_tokens 1, temperature 0, one request at a time; each server alone on the machine, -np 1.";
  if (flags.get("results")) appendResults(flags.get("results")!, `prefix reuse: ${peers.join(" vs ")}`, `${notes}\n\n${sections.join("\n")}`);
}

// ---------- cold start ----------

/** Resident set size of a process in MiB (/proc/PID/status VmRSS). */
function rssMiB(pid: number): number {
  const m = /^VmRSS:\s+(\d+) kB$/m.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
  return m ? Number(m[1]) / 1024 : NaN;
}

/**
 * Cold start: per repeat, the time from spawning the server to /health, and to the first
 * token of a one-token /v1/completions request sent right after; RSS after load (at /health)
 * and after that request. Servers one at a time, alternating, `-np 1`.
 */
/** Cold mode's rows: Wick with its pack cache written by an earlier start, Wick packing at start (`--no-mmap`), llama-server. */
const COLD_PEERS: Record<string, { kind: PeerKind; extra: string[] }> = {
  wick: { kind: "wick", extra: [] },
  "wick-no-mmap": { kind: "wick", extra: ["--no-mmap"] },
  llama: { kind: "llama", extra: [] },
};

async function coldMode(flags: Map<string, string>, models: string[]): Promise<void> {
  const threads = num(flags, "threads", 2);
  const repeats = num(flags, "repeats", 3);
  const peers = (flags.get("peers") ?? "wick,wick-no-mmap,llama").split(",").map((p) => p.trim());
  for (const p of peers) if (!COLD_PEERS[p]) throw new Error(`cold: unknown peer ${p} (${Object.keys(COLD_PEERS).join(", ")})`);
  // What a user's `wick serve` runs (scripts/start.sh, the npm package): the one-file bundle.
  if (peers.some((p) => COLD_PEERS[p]!.kind === "wick")) execFileSync("npm", ["run", "--silent", "build:ts"], { cwd: ROOT, stdio: ["ignore", "ignore", "inherit"] });
  // Wick's pack cache in a directory of the bench's own, written by a first start of each model.
  process.env.WICK_PACK_CACHE = join(ROOT, ".cache/bench-packs");
  const sections: string[] = [];
  for (const model of models) {
    if (peers.includes("wick")) await writePackCache(model, threads);
    const got: Record<string, { health: number[]; first: number[]; rssLoad: number[]; rssFirst: number[] }> = {};
    for (let r = 0; r < repeats; r++) {
      for (const peer of r % 2 ? [...peers].reverse() : peers) {
        const g = (got[peer] ??= { health: [], first: [], rssLoad: [], rssFirst: [] });
        const t0 = performance.now();
        const s = await startServer(COLD_PEERS[peer]!.kind, `${peer}-cold`, model, threads, 1, 512, COLD_PEERS[peer]!.extra, 2);
        try {
          g.health.push(performance.now() - t0);
          g.rssLoad.push(rssMiB(s.proc.pid!));
          const res = await fetch(`${s.url}/v1/completions`, {
            method: "POST",
            headers: { "content-type": "application/json" },
            body: JSON.stringify({ model: "bench", prompt: "Hello", max_tokens: 1, temperature: 0 }),
          });
          if (!res.ok) throw new Error(`${peer}: HTTP ${res.status} ${await res.text()}`);
          await res.json();
          g.first.push(performance.now() - t0);
          g.rssFirst.push(rssMiB(s.proc.pid!));
        } finally {
          await stopServer(s);
        }
      }
    }
    const rows = peers.map((p) => {
      const g = got[p]!;
      return [p, fmt(stat(g.health).median), fmt(stat(g.first).median), fmt(stat(g.rssLoad).median), fmt(stat(g.rssFirst).median)];
    });
    const lines = [
      `### ${basename(model)} — cold start, threads=${threads}, ${repeats} repeats (median)`,
      "",
      markdownTable(["server", "spawn → /health (ms)", "spawn → first token (ms)", "RSS at /health (MiB)", "RSS after the first token (MiB)"], rows),
    ];
    sections.push(lines.join("\n"));
    console.log(`\n${lines.join("\n")}`);
  }
  const notes =
    "Spawn to /health (polled every 2 ms) and to the end of a one-token, non-streaming /v1/completions request sent right after; RSS from /proc/PID/status (Wick: the Node process with the addon; its mapped pack cache counts as file pages). `wick`: the model's repacked weights mapped from the pack cache, written by a start before the runs (as every start after a model's first); `wick-no-mmap`: packed at start (`--no-mmap`, a model's first start). Wick runs dist/cli/bundle.cjs (built first with `npm run build:ts`, as scripts/start.sh does) with its V8 code cache, written by that first start. The GGUF is in the page cache (the runs before warm it).";
  if (flags.get("results")) appendResults(flags.get("results")!, `cold start: ${peers.join(" vs ")}`, `${notes}\n\n${sections.join("\n")}`);
}

/**
 * Starts Wick on `model` once so its pack cache file is written (the writer runs after /health),
 * and the bundle's code cache (written a second after a start without one), as by a user's first start.
 */
async function writePackCache(model: string, threads: number): Promise<void> {
  const s = await startServer("wick", "wick-pack-cache", model, threads, 1, 512);
  try {
    await new Promise((r) => setTimeout(r, 1500));
    const deadline = Date.now() + 300_000;
    for (;;) {
      const loaded = readFileSync(s.log, "utf8")
        .split("\n")
        .find((l) => l.includes('"model loaded"'));
      const cache = loaded ? (JSON.parse(loaded) as { packCache?: { state: string; path?: string } }).packCache : undefined;
      if (loaded && (cache?.state !== "writing" || existsSync(cache.path!))) break;
      if (Date.now() > deadline) throw new Error(`the pack cache of ${model} was not written in 300 s`);
      await new Promise((r) => setTimeout(r, 100));
    }
  } finally {
    await stopServer(s);
  }
}

// ---------- micro ----------

type EngineName = "wick" | "node-llama-cpp" | "llama-server";

/** Runs in a child process: one engine, one model, every prompt; prints one JSON line. */
async function microWorker(engine: EngineName, model: string, promptsFile: string, genLen: number, threads: number, prefillChunk = 0, floor = false): Promise<void> {
  const prompts = JSON.parse(readFileSync(promptsFile, "utf8")) as number[][];
  const ctxSize = Math.ceil((Math.max(...prompts.map((p) => p.length)) + genLen + 16) / 256) * 256;
  const samples: Sample[] = [];
  // `--floor`: the read rate probed before the first prompt and after each; a sample gets the
  // mean of the probes around it (the rate moves within minutes here, so per run is too coarse).
  const probes: number[] = [];
  const probe = async () => {
    if (floor) probes.push(await probeFloorGbps());
  };
  // Before the engine loads (lib/floor.ts: a probe spawned later would fork the engine's process).
  if (floor) startProber();
  if (engine === "wick") {
    const eng = await loadWick(model, ctxSize, threads, prefillChunk);
    await probe();
    for (const promptTokens of prompts) {
      samples.push(await wickSample(eng, promptTokens, genLen));
      await probe();
    }
    await eng.unload();
  } else if (engine === "node-llama-cpp") {
    const { getLlama } = await import("node-llama-cpp");
    const llama = await getLlama({ gpu: false, build: "never", usePrebuiltBinaries: true, skipDownload: true, logLevel: "error" as never, maxThreads: threads });
    const m = await llama.loadModel({ modelPath: model });
    const ctx = await m.createContext({ contextSize: ctxSize, sequences: 1, threads: { ideal: threads, min: threads }, batchSize: 512 });
    const seq = ctx.getSequence();
    await probe();
    for (const p of prompts) {
      await seq.clearHistory();
      // Same split as Wick's timings: prompt = all prompt tokens up to the first sampled
      // token; decode = first sampled token to the last (genLen - 1 forward passes).
      const t0 = performance.now();
      await seq.evaluateWithoutGeneratingNewTokens(p.slice(0, -1) as never);
      let n = 0;
      let tFirst = 0;
      for await (const _ of seq.evaluate(p.slice(-1) as never, { temperature: 0, yieldEogToken: true })) {
        n++;
        if (n === 1) tFirst = performance.now();
        if (n >= genLen) break;
      }
      const tEnd = performance.now();
      samples.push({ prefillTps: p.length / ((tFirst - t0) / 1000), decodeTps: (n - 1) / ((tEnd - tFirst) / 1000), promptTokens: p.length, genTokens: n });
      await probe();
    }
    await ctx.dispose();
    await m.dispose();
    await llama.dispose();
  } else {
    const s = await startServer("llama", "llama-server-micro", model, threads, 1, ctxSize);
    try {
      const pid = s.proc.pid!;
      await probe();
      for (const p of prompts) {
        samples.push(await llamaSample(s.url, pid, p, genLen));
        await probe();
      }
    } finally {
      await stopServer(s);
    }
  }
  if (floor) samples.forEach((s, i) => (s.floorGbps = (probes[i]! + probes[i + 1]!) / 2));
  process.stdout.write(`${JSON.stringify(samples)}\n`);
}

/** A share as `median % (min–max)`. */
export function percent(s: Summary | undefined): string {
  return s ? `${fmt(100 * s.median, 0)} % (${fmt(100 * s.min, 0)}–${fmt(100 * s.max, 0)})` : "-";
}

function cell(s: Summary | undefined): string {
  if (!s) return "-";
  const spread = ((s.max - s.min) / s.median) * 100;
  return `${fmt(s.median)} (${fmt(s.min)}–${fmt(s.max)}, ±${fmt(spread / 2, 0)}%)`;
}

async function runWorker(engine: EngineName, model: string, promptsFile: string, genLen: number, threads: number, prefillChunk = 0, floor = false): Promise<Sample[]> {
  const args = [
    "--import",
    "tsx",
    fileURLToPath(import.meta.url),
    "micro-worker",
    "--engine",
    engine,
    "--model",
    model,
    "--prompts",
    promptsFile,
    "--gen-len",
    String(genLen),
    "--threads",
    String(threads),
    "--prefill-chunk",
    String(prefillChunk),
    ...(floor ? ["--floor"] : []),
  ];
  return new Promise((res, rej) => {
    const proc = spawn(process.execPath, args, { cwd: ROOT, stdio: ["ignore", "pipe", "inherit"] });
    children.add(proc);
    let out = "";
    proc.stdout!.on("data", (d) => (out += d));
    const timer = setTimeout(() => proc.kill("SIGKILL"), num(workerFlags, "worker-timeout-s", 600) * 1000);
    proc.on("exit", (code) => {
      clearTimeout(timer);
      children.delete(proc);
      const line = out.trim().split("\n").pop() ?? "";
      if (code === 0 && line.startsWith("[")) res(JSON.parse(line) as Sample[]);
      else rej(new Error(`${engine} worker failed (exit ${code}): ${out.slice(-500)}`));
    });
  });
}

/** Flags the micro workers' parent passes down (`--worker-timeout-s`). */
let workerFlags = new Map<string, string>();

async function microMode(flags: Map<string, string>, models: string[], title = "micro"): Promise<void> {
  workerFlags = flags;
  const prefillChunk = num(flags, "prefill-chunk", 0);
  const threads = num(flags, "threads", 2);
  const repeats = num(flags, "repeats", 5);
  const rounds = num(flags, "rounds", 1);
  const promptLen = num(flags, "prompt-len", 512);
  const genLen = num(flags, "gen-len", 128);
  const engines = (flags.get("engines") ?? "wick,node-llama-cpp,llama-server").split(",").map((e) => e.trim()) as EngineName[];
  for (const e of engines) if (!["wick", "node-llama-cpp", "llama-server"].includes(e)) throw new Error(`--engines: unknown ${e}`);
  const tmp = mkdtempSync(join(tmpdir(), "wick-micro-"));
  const rows: string[][] = [];
  // `--floor`: each prompt between two probes of the read rate, and its decode as a share of that floor.
  const floor = flags.has("floor");
  type Res = { prefill: Summary; decode: Summary; prefillCpu?: Summary; decodeCpu?: Summary; floorGbps?: Summary; ofFloor?: Summary; samples: Sample[] };
  const json: Record<string, Record<string, Res>> = {};
  for (const model of models) {
    const tok = await llamaTokenizer(model);
    // One warm-up prompt plus `repeats` distinct prompts (no prefix-cache hits between them).
    const prompts = await idPrompts(tok, repeats + 1, promptLen, num(flags, "seed", 0));
    await tok.dispose();
    // A shorter warm-up (`--warmup-len`) still pages the weights in and starts the threads; at
    // 16k tokens a full-length one would double the run.
    prompts[0] = prompts[0]!.slice(0, num(flags, "warmup-len", promptLen));
    const file = join(tmp, `${basename(model)}.json`);
    writeFileSync(file, JSON.stringify(prompts));
    const res: Record<string, Res> = {};
    const bytes = floor ? await decodeBytes(model) : NaN;
    // Rounds alternate the engines' order so that a slow spell of a shared machine (memory
    // bandwidth moves with the neighbours' load) falls on both sides, not on one.
    const pooled = new Map<EngineName, Sample[]>();
    for (let round = 0; round < rounds; round++) {
      for (const e of round % 2 ? [...engines].reverse() : engines) {
        process.stderr.write(`micro ${basename(model)}: ${e} round ${round + 1}/${rounds} (${repeats} + 1 warm-up, ${promptLen} prompt, ${genLen} gen, ${threads} threads)\n`);
        try {
          const samples = (await runWorker(e, model, file, genLen, threads, prefillChunk, floor)).slice(1);
          pooled.set(e, [...(pooled.get(e) ?? []), ...samples]);
        } catch (err) {
          process.stderr.write(`  ${(err as Error).message}\n`);
        }
      }
    }
    for (const [e, samples] of pooled) {
      res[e] = {
        prefill: summarize(samples.map((s) => s.prefillTps)),
        decode: summarize(samples.map((s) => s.decodeTps)),
        samples,
        prefillCpu: summarize(samples.map((s) => s.prefillCpuTps ?? NaN)),
        decodeCpu: summarize(samples.map((s) => s.decodeCpuTps ?? NaN)),
        ...(floor && {
          floorGbps: summarize(samples.map((s) => s.floorGbps!)),
          ofFloor: summarize(samples.map((s) => (s.decodeTps * bytes) / 1e9 / s.floorGbps!)),
        }),
      };
      process.stderr.write(`  ${e}: prefill ${cell(res[e].prefill)} tok/s, decode ${cell(res[e].decode)} tok/s; per CPU-s prefill ${cell(res[e].prefillCpu)}, decode ${cell(res[e].decodeCpu)}\n`);
    }
    json[model] = res;
    const w = res["wick"];
    for (const e of engines) {
      const r = res[e];
      rows.push([
        basename(model),
        e,
        cell(r?.prefill),
        cell(r?.decode),
        e === "wick" ? "" : ratio(w?.prefill.median ?? NaN, r?.prefill.median ?? NaN),
        e === "wick" ? "" : ratio(w?.decode.median ?? NaN, r?.decode.median ?? NaN),
        cell(r?.prefillCpu),
        cell(r?.decodeCpu),
        e === "wick" ? "" : ratio(w?.prefillCpu?.median ?? NaN, r?.prefillCpu?.median ?? NaN),
        e === "wick" ? "" : ratio(w?.decodeCpu?.median ?? NaN, r?.decodeCpu?.median ?? NaN),
        ...(floor ? [fmt(((r?.decode.median ?? NaN) * bytes) / 1e9), cell(r?.floorGbps), percent(r?.ofFloor)] : []),
      ]);
    }
  }
  const table = markdownTable(
    [
      "model",
      "engine",
      `prefill tok/s (${promptLen})`,
      `decode tok/s (${genLen})`,
      "wick/this prefill",
      "wick/this decode",
      "prefill tok/CPU-s",
      "decode tok/CPU-s",
      "wick/this prefill (CPU)",
      "wick/this decode (CPU)",
      ...(floor ? ["decode GB/s of weights", "read rate GB/s (probe)", "decode of floor"] : []),
    ],
    rows,
  );
  const notes =
    `Median (min–max, ±half-range %) over ${repeats} repeats after 1 warm-up${flags.has("warmup-len") ? ` of ${flags.get("warmup-len")} tokens` : ""}${rounds > 1 ? `, × ${rounds} rounds alternating the engines' order` : ""}, threads=${threads}, distinct random prompts of exactly ${promptLen} tokens. ` +
    "prefill = prompt tokens / time to the first sampled token; decode = (generated − 1) / time from the first to the last token. " +
    "Wick: Engine timings (promptMs, decodeMs). node-llama-cpp: wall clock around evaluateWithoutGeneratingNewTokens + evaluate. " +
    "llama-server: native /completion timings (prompt_per_second, predicted_per_second; cache_prompt false, streamed). Ratios > 1: Wick is faster. " +
    "tok/CPU-s: tokens per second of the engine process's CPU time (user + system; Wick: the whole Node process, llama-server: /proc/PID/stat), prefill up to the first streamed token, decode after it: the load-robust comparison with --threads 1 (node-llama-cpp: not measured)." +
    (floor
      ? " Floor (--floor): decode GB/s = decode tok/s × the weight bytes a token streams (GgufInfo.decodeBytes: every weight but an untied embedding, experts at their routed share); read rate = `kernel_timing -- floor` (best 2-thread pass over 1 GiB) probed before and after each prompt, the two around a sample averaged; decode of floor = each sample's GB/s over its probes' rate, median (min–max)."
      : "");
  console.log(`\n${table}\n\n${notes}`);
  if (flags.get("json")) writeFileSync(flags.get("json")!, JSON.stringify({ machine: machine(), commit: commit(), threads, repeats, promptLen, genLen, results: json }, null, 1));
  if (flags.get("results")) appendResults(flags.get("results")!, `${title}: ${engines.join(", ")}`, `${notes}\n\n${table}`);
}

/** Long context: micro at each of `--prompt-lens` (one repeat after the warm-up by default;
 * the warm-up is a prompt of the same length, so it costs as much as a measured one). */
async function longMode(flags: Map<string, string>, models: string[]): Promise<void> {
  const lens = intList(flags.get("prompt-lens") ?? "4096,16384");
  for (const [k, v] of [
    ["repeats", "1"],
    ["gen-len", "32"],
    ["engines", "wick,llama-server"],
    ["worker-timeout-s", "1800"],
  ]) {
    if (!flags.has(k!)) flags.set(k!, v!);
  }
  for (const len of lens) {
    flags.set("prompt-len", String(len));
    await microMode(flags, models, `long context (${len}-token prompt)`);
  }
}

// ---------- CLI ----------

const USAGE = `usage:
  tsx benches/compare.ts serving [model.gguf ...] [--threads 2] [--concurrency 1,4,8,16] [--parallel N]
      [--ctx 1024] [--input-len 256] [--output-len 64] [--num-prompts N] [--warmup 2] [--peers wick,llama] [--rounds 1]
      [--wick-args="<extra wick serve flags>"]
      [--max-level-s 300] [--json out.json] [--results benches/RESULTS.md]
  tsx benches/compare.ts micro [model.gguf ...] [--threads 2] [--repeats 5] [--rounds 1] [--prompt-len 512] [--gen-len 128]
      [--engines wick,node-llama-cpp,llama-server] [--floor] [--json out.json] [--results benches/RESULTS.md]
  tsx benches/compare.ts long [model.gguf ...] [--prompt-lens 4096,16384] [--gen-len 32] [--repeats 1] [--warmup-len N] [--prefill-chunk 0] [...micro flags]
  tsx benches/compare.ts cold [model.gguf ...] [--threads 2] [--repeats 3] [--peers wick,llama]   (spawn → first token, RSS)
  tsx benches/compare.ts files [--bench-dir DIR]   (writes the LFM2 bench files; name them as ${Object.keys(BENCH_FILES).join(", ")})
  tsx benches/compare.ts prefix [model.gguf ...] [--threads 2] [--prefix-len 400] [--suffix-len 32] [--repeats 5]
      [--peers wick,llama] [--results benches/RESULTS.md]`;

async function main(): Promise<void> {
  const { flags, positional } = parseArgs(process.argv.slice(2));
  const mode = positional[0] && ["serving", "micro", "long", "cold", "prefix", "files", "micro-worker"].includes(positional[0]) ? positional.shift()! : "serving";
  if (flags.has("help")) {
    console.error(USAGE);
    return;
  }
  if (mode === "micro-worker") {
    return microWorker(
      flags.get("engine") as EngineName,
      flags.get("model")!,
      flags.get("prompts")!,
      num(flags, "gen-len", 128),
      num(flags, "threads", 2),
      num(flags, "prefill-chunk", 0),
      flags.has("floor"),
    );
  }
  if (mode === "files") return writeBenchFiles(flags);
  const models = positional.length ? positional.map((m) => modelPath(m, flags)) : DEFAULT_MODELS.filter((m) => existsSync(join(ROOT, m))).map((m) => resolve(ROOT, m));
  if (models.length === 0) throw new Error("no models: pass a GGUF path or run python3 scripts/fetch_models.py all");
  for (const m of models) if (!existsSync(m)) throw new Error(`no such model: ${m}`);
  if (flags.get("results")) flags.set("results", resolve(process.cwd(), flags.get("results")!));
  if (mode === "micro") await microMode(flags, models);
  else if (mode === "long") await longMode(flags, models);
  else if (mode === "cold") await coldMode(flags, models);
  else if (mode === "prefix") await prefixMode(flags, models);
  else await servingMode(flags, models);
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main().then(
    () => process.exit(0),
    (err) => {
      console.error(`compare: ${(err as Error).message ?? err}`);
      process.exit(1);
    },
  );
}
