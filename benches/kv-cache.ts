/**
 * Quantized KV caches (`--cache-type-k/-v`), Wick beside llama-server on the same file, 2
 * threads, one server at a time:
 *
 *   npx tsx benches/kv-cache.ts [--model .cache/models/SmolLM2-135M-Instruct.Q4_1.gguf] \
 *       [--prompt-len 16384] [--gen-len 64] [--rounds 1] [--threads 2] [--results benches/RESULTS.md]
 *
 * For each cache type pair: tokens one GiB holds (Wick: the engine's bytes per token;
 * llama-server: its own log line `K (q8_0): … MiB, V (…): … MiB` over its cells), the time to
 * the first token of a `--prompt-len` prompt (prefill at long context), and decode tokens/s
 * after it (streamed, first token to last: every step reads the whole long KV). llama.cpp
 * reads quantized values only with flash attention, so its rows with them run `-fa on`; its
 * f16 and q8_0-key rows run `-fa off`, the order Wick follows.
 */
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { startServer, stopServer, type Server } from "./compare.ts";
import { appendResults, machine } from "./lib/provenance.ts";
import { sseData } from "./lib/sse.ts";
import { markdownTable } from "./serving.ts";

const { values: a } = parseArgs({
  options: {
    model: { type: "string", default: ".cache/models/SmolLM2-135M-Instruct.Q4_1.gguf" },
    "prompt-len": { type: "string", default: "16384" },
    "gen-len": { type: "string", default: "64" },
    rounds: { type: "string", default: "1" },
    threads: { type: "string", default: "2" },
    results: { type: "string" },
  },
});
const promptLen = Number(a["prompt-len"]);
const genLen = Number(a["gen-len"]);
const ctx = Math.ceil((promptLen + genLen + 64) / 256) * 256;

const TYPES = [
  { k: "f16", v: "f16" },
  { k: "q8_0", v: "f16" },
  { k: "q8_0", v: "q8_0" },
  { k: "q4_0", v: "q4_0" },
] as const;

/** A long prompt of ordinary token ids (deterministic, clear of the special ids at the start). */
function prompt(n: number, seed = 7): number[] {
  let s = seed >>> 0;
  return Array.from({ length: n }, () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return 1000 + (s % 20000);
  });
}

interface Run {
  ttftS: number;
  decodeTps: number;
  tokens: number;
}

/** One streamed greedy completion of `ids`: time to the first token, decode rate after it. */
async function complete(server: Server, ids: number[]): Promise<Run> {
  const t0 = performance.now();
  const res = await fetch(`${server.url}/v1/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model: "m", prompt: ids, max_tokens: genLen, temperature: 0, ignore_eos: true, stream: true, cache_prompt: false }),
    signal: AbortSignal.timeout(3_600_000),
  });
  if (!res.ok || !res.body) throw new Error(`${server.name}: HTTP ${res.status} ${await res.text()}`);
  let [first, last, tokens] = [0, 0, 0];
  for await (const ev of sseData(res)) {
    if ((ev as { choices?: { text?: string }[] }).choices?.[0]?.text === undefined) continue;
    const now = performance.now();
    if (!first) first = now;
    last = now;
    tokens++;
  }
  // Streamed pieces are tokens (an incomplete UTF-8 piece may wait for the next: counts even out).
  return { ttftS: (first - t0) / 1000, decodeTps: (tokens - 1) / ((last - first) / 1000), tokens };
}

/** llama-server's bytes per KV token from its log (`size = … (N cells, …), K (t): x MiB, V (t): y MiB`, per cache; a context made twice logs each twice). */
function llamaBytesPerToken(log: string): number {
  let total = 0;
  const seen = new Set<string>();
  for (const m of log.matchAll(/llama_kv_cache: size = +[\d.]+ MiB \( *(\d+) cells.*?K \(\w+\): +([\d.]+) MiB, V \(\w+\): +([\d.]+) MiB/g)) {
    if (seen.has(m[0])) continue;
    seen.add(m[0]);
    total += ((Number(m[2]) + Number(m[3])) * 2 ** 20) / Number(m[1]);
  }
  return total;
}

/** Wick's bytes per KV token with `t`: the engine's own figure (loaded briefly, in process). */
async function wickBytesPerToken(t: { k: string; v: string }): Promise<number> {
  const { Engine } = await import("../ts/engine/index.ts");
  const e = await Engine.load({ modelPath: a.model!, contextSize: 256, maxSequences: 1, cacheTypeK: t.k, cacheTypeV: t.v, threads: Number(a.threads) });
  try {
    return e.info().kvBytesPerToken;
  } finally {
    await e.unload();
  }
}

type Key = `${"wick" | "llama"}/${string}`;
const runs = new Map<Key, Run[]>();
const perToken = new Map<Key, number>();
const ids = prompt(promptLen);

for (const t of TYPES) {
  perToken.set(`wick/${t.k}/${t.v}`, await wickBytesPerToken(t));
  // llama-server prints its cache's sizes only at verbose level: a short start just for them.
  const s = await startServer("llama", "llama-kv-size", a.model!, Number(a.threads), 1, 1024, ["-ctk", t.k, "-ctv", t.v, "-fa", t.v === "f16" ? "off" : "on", "-v"]);
  await stopServer(s);
  perToken.set(`llama/${t.k}/${t.v}`, llamaBytesPerToken(readFileSync(s.log, "utf8")));
}
for (let round = 0; round < Number(a.rounds); round++) {
  for (const t of TYPES) {
    const name = `${t.k}/${t.v}`;
    const fa = t.v === "f16" ? "off" : "on";
    for (const kind of ["wick", "llama"] as const) {
      const extra = ["-ctk", t.k, "-ctv", t.v, ...(kind === "llama" ? ["-fa", fa] : [])];
      const server = await startServer(kind, `${kind}-kv`, a.model!, Number(a.threads), 1, ctx, extra);
      try {
        const key: Key = `${kind}/${name}`;
        // A short warm-up pages the weights in and starts the threads.
        await complete(server, ids.slice(0, 64));
        const r = await complete(server, ids);
        runs.set(key, [...(runs.get(key) ?? []), r]);
        process.stderr.write(`round ${round + 1} ${key}: TTFT ${r.ttftS.toFixed(1)} s, decode ${r.decodeTps.toFixed(1)} tok/s (${r.tokens} tokens)\n`);
      } finally {
        await stopServer(server);
      }
    }
  }
}

const median = (v: number[]) => [...v].sort((x, y) => x - y)[Math.floor(v.length / 2)]!;
const rows: string[][] = [];
for (const t of TYPES) {
  const name = `${t.k}/${t.v}`;
  const [w, l] = [runs.get(`wick/${name}`)!, runs.get(`llama/${name}`)!];
  const [wd, ld] = [median(w.map((r) => r.decodeTps)), median(l.map((r) => r.decodeTps))];
  const [wt, lt] = [median(w.map((r) => r.ttftS)), median(l.map((r) => r.ttftS))];
  const gib = (k: Key) => (2 ** 30 / (perToken.get(k) ?? NaN)).toFixed(0);
  rows.push([name, t.v === "f16" ? "off" : "on", gib(`wick/${name}`), gib(`llama/${name}`), wt.toFixed(1), lt.toFixed(1), wd.toFixed(1), ld.toFixed(1), `${(wd / ld).toFixed(2)}×`]);
}
const table = markdownTable(["K/V", "llama -fa", "tokens/GiB Wick", "llama", `TTFT s (${promptLen}) Wick`, "llama", `decode tok/s after ${promptLen} Wick`, "llama", "Wick/llama decode"], rows);
const f16 = median(runs.get("wick/f16/f16")!.map((r) => r.decodeTps));
const summary =
  `Model ${a.model}, ${promptLen}-token prompt, ${genLen} tokens decoded after it, ${a.rounds} round(s) (medians), ${a.threads} threads, ${machine()}. ` +
  `Wick's decode with each type over its f16 cache: ${TYPES.slice(1)
    .map((t) => `${t.k}/${t.v} ${(median(runs.get(`wick/${t.k}/${t.v}`)!.map((r) => r.decodeTps)) / f16).toFixed(2)}×`)
    .join(", ")}.`;
process.stdout.write(`${table}\n\n${summary}\n`);
if (a.results) appendResults(a.results, "benches/kv-cache.ts", "quantized KV cache vs llama-server", `${table}\n\n${summary}`);
