/**
 * Embeddings per second, Wick beside llama-server `--embeddings` on the same file: requests of
 * one `--input-len`-token input each (token ids, so both embed the same tokens) to the OpenAI
 * `/v1/embeddings` route, held at each `--concurrency` level in flight, `--requests` per level
 * after a warmup. Both servers run `--threads` threads and as many slots as the highest level
 * (llama-server with flash attention off and a batch that holds every slot's input).
 *
 * With `--gen-model` (a generative GGUF), also Wick's decode throughput on that model alone and
 * with an embedding load beside it (`--beside` embedding requests in flight on the same model,
 * mean pooling): the cost of serving both from one scheduler.
 *
 *   npx tsx benches/embeddings.ts --model .cache/fixtures/bench/bench-lfm2-embed-350m-q8_0.gguf \
 *       [--gen-model .cache/fixtures/bench/bench-lfm2-350m-q8_0.gguf] [--input-len 512] \
 *       [--concurrency 1,16] [--requests 32] [--threads 2] [--beside 4] [--results benches/RESULTS.md]
 *
 * The embedding model: `wick-fixtures .cache/fixtures/bench --bench-embed` writes the LFM2.5-
 * Embedding-shaped one (LFM2-350M's shape, bidirectional, CLS pooling).
 */
import { existsSync } from "node:fs";
import { basename } from "node:path";
import { parseArgs } from "node:util";
import { startServer, stopServer, type PeerKind, type Server } from "./compare.ts";
import { appendResults, machine } from "./lib/provenance.ts";
import { markdownTable } from "./serving.ts";

const { values: a } = parseArgs({
  options: {
    model: { type: "string" },
    "gen-model": { type: "string" },
    "input-len": { type: "string", default: "512" },
    concurrency: { type: "string", default: "1,16" },
    requests: { type: "string", default: "32" },
    threads: { type: "string", default: "2" },
    beside: { type: "string", default: "4" },
    "gen-len": { type: "string", default: "64" },
    results: { type: "string" },
  },
});
if (!a.model || !existsSync(a.model)) throw new Error("usage: benches/embeddings.ts --model <embedding.gguf> (see the header)");
const inputLen = Number(a["input-len"]);
const levels = a.concurrency!.split(",").map(Number);
const requests = Number(a.requests);
const threads = Number(a.threads);
const slots = Math.max(...levels);

/** Request `i`'s input: `inputLen` ids from a fixed stream, in the first 30k ids (plain text tokens). */
const input = (i: number) => Array.from({ length: inputLen }, (_, k) => 1000 + ((i * 7919 + k * 104729) % 29000));

async function embedOnce(url: string, i: number): Promise<void> {
  const res = await fetch(`${url}/v1/embeddings`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model: "m", input: input(i) }),
  });
  const j = (await res.json()) as { data?: { embedding: number[] }[] };
  if (!res.ok || !j.data?.[0]?.embedding.length) throw new Error(`${url}: HTTP ${res.status} ${JSON.stringify(j).slice(0, 300)}`);
}

/** `n` requests held `c` in flight; embeddings per second. */
async function level(url: string, c: number, n: number, from: number): Promise<number> {
  let next = 0;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: c }, async () => {
      while (next < n) await embedOnce(url, from + next++);
    }),
  );
  return n / ((performance.now() - t0) / 1000);
}

async function embeddingsPerSecond(kind: PeerKind): Promise<number[]> {
  const extra = kind === "llama" ? ["--embeddings", "-fa", "off", "-b", String(inputLen * slots), "-ub", String(inputLen * slots), "--no-warmup"] : [];
  const s: Server = await startServer(kind, `${kind}-embed`, a.model!, threads, slots, inputLen + 64, extra);
  try {
    await level(s.url, 2, 2, 1_000_000); // warmup
    const out = [];
    for (const c of levels) out.push(await level(s.url, c, Math.max(requests, c), c * 10_000));
    return out;
  } finally {
    await stopServer(s);
  }
}

/** Decode tokens/s of one greedy completion, and the same with `beside` embedding requests in flight. */
async function generationBeside(model: string): Promise<[number, number, number]> {
  const beside = Number(a.beside);
  const gen = Number(a["gen-len"]);
  const s = await startServer("wick", "wick-gen-embed", model, threads, beside + 1, inputLen + 64);
  // Client-side decode rate: streamed chunks from the first token to the last.
  const decode = async () => {
    const res = await fetch(`${s.url}/v1/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: "m", prompt: "Once upon a time", max_tokens: gen, temperature: 0, ignore_eos: true, stream: true, stream_options: { include_usage: true } }),
    });
    if (!res.ok || !res.body) throw new Error(`completion: HTTP ${res.status}`);
    let [first, last, tokens] = [0, 0, 0];
    for await (const part of res.body as unknown as AsyncIterable<Uint8Array>) {
      const text = Buffer.from(part).toString("utf8");
      tokens = Number(/"completion_tokens":(\d+)/.exec(text)?.[1] ?? tokens);
      if (!/"text":"[^"]/.test(text)) continue;
      last = performance.now();
      if (!first) first = last;
    }
    return (tokens - 1) / ((last - first) / 1000);
  };
  try {
    await decode();
    const alone = await decode();
    let stop = false;
    let issued = 0;
    const finished: number[] = [];
    const load = Array.from({ length: beside }, async () => {
      while (!stop) {
        await embedOnce(s.url, issued++);
        finished.push(performance.now());
      }
    });
    await new Promise((r) => setTimeout(r, 1500)); // the embedding load is running
    const t0 = performance.now();
    const withLoad = await decode();
    const t1 = performance.now();
    stop = true;
    await Promise.all(load);
    // Embeddings finished while the completion ran (per second of it).
    const during = finished.filter((t) => t >= t0 && t <= t1).length;
    const seconds = (t1 - t0) / 1000;
    return [alone, withLoad, during / seconds];
  } finally {
    await stopServer(s);
  }
}

const wick = await embeddingsPerSecond("wick");
const llama = await embeddingsPerSecond("llama");
const rows = levels.map((c, i) => [String(c), wick[i]!.toFixed(2), llama[i]!.toFixed(2), (wick[i]! / llama[i]!).toFixed(2)]);
const parts = [
  `Model ${basename(a.model)}, ${inputLen}-token inputs, ${threads} threads, ${slots} slots; ${machine()}.`,
  "",
  markdownTable(["concurrency", "Wick embeddings/s", "llama-server embeddings/s", "Wick / llama-server"], rows),
];
if (a["gen-model"]) {
  const [alone, withLoad, embPerS] = await generationBeside(a["gen-model"]);
  parts.push(
    "",
    `Generation beside embeddings (Wick, ${basename(a["gen-model"])}, one greedy completion of ${a["gen-len"]} tokens):`,
    "",
    markdownTable(["decode alone (tok/s)", `decode with ${a.beside} embedding requests in flight (tok/s)`, "embeddings/s meanwhile"], [[alone.toFixed(1), withLoad.toFixed(1), embPerS.toFixed(2)]]),
  );
}
const body = parts.join("\n");
console.log(body);
if (a.results) appendResults(a.results, "benches/embeddings.ts", "embeddings vs llama-server --embeddings", body);
process.exit(0);
