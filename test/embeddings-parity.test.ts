/**
 * Embeddings and rerank scores equal llama.cpp's: the same GGUF served by llama-server
 * `--embeddings` (built from the bundled llama.cpp, flash attention off, the whole input in one
 * ubatch) and embedded by Wick's engine, from the same token ids. Shapes: a bidirectional LFM2
 * with CLS pooling (LFM2.5-Embedding), an LFM2 with ColBERT's `dense_2` giving per-token
 * vectors (LFM2.5-ColBERT), a Qwen3-Reranker-style classifier head (rank pooling, scored by
 * llama-server's `/v1/rerank`), a causal LFM2 and SmolLM2 with mean (and last) pooling.
 * Every vector: cosine ≥ 0.99999 to llama.cpp's, and the rerank order the same.
 */
import { Engine } from "../ts/engine/index.ts";
import { fixture, needs, smollm2, type Asset } from "./helpers/assets.ts";
import { llamaServerBin, startLlamaServer } from "./helpers/llama-server.ts";
import { postJson } from "./helpers/server.ts";

const bin = llamaServerBin();
const COS = 0.99999;

const TEXTS = [
  "hello world",
  "The quick brown fox jumps over the lazy dog.",
  "Liquid neural networks adapt their dynamics to the input; short convolutions and a few attention layers make LFM2 fast on a laptop. ".repeat(4),
  "a",
];

function cosine(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let [dot, na, nb] = [0, 0, 0];
  for (let i = 0; i < a.length; i++) {
    dot += a[i] * b[i];
    na += a[i] * a[i];
    nb += b[i] * b[i];
  }
  return dot / Math.sqrt(na * nb);
}

/** llama-server on `model` with `flags`, for the body of `fn`; stopped after. */
async function withPeer<T>(model: string, flags: string[], fn: (url: string) => Promise<T>): Promise<T> {
  const args = ["-m", model, "--embeddings", "-c", "2048", "-b", "2048", "-ub", "2048", "-np", "1", "-t", "2", "-fa", "off", "--no-warmup", ...flags];
  const peer = await startLlamaServer((bin as { path: string }).path, args);
  try {
    return await fn(peer.url);
  } finally {
    peer.stop();
  }
}

/** llama-server's `/embeddings` (not the OpenAI one: it also returns per-token vectors) for token ids. */
async function peerEmbedding(url: string, ids: number[]): Promise<number[][]> {
  const r = await postJson(`${url}/embeddings`, { content: ids });
  if (r.status !== 200) throw new Error(`llama-server /embeddings: ${r.status} ${r.text}`);
  return r.json[0].embedding as number[][];
}

interface Case {
  name: string;
  asset: () => Asset;
  flags: string[];
  pooling?: "mean" | "last" | "none" | "cls";
}

const cases: Case[] = [
  { name: "bidirectional LFM2, CLS pooling (LFM2.5-Embedding's shape)", asset: () => fixture("tiny-lfm2-embed-q8_0.gguf"), flags: [] },
  { name: "LFM2 with dense_2, per-token vectors (LFM2.5-ColBERT's shape)", asset: () => fixture("tiny-lfm2-colbert-q8_0.gguf"), flags: ["--pooling", "none"] },
  { name: "causal LFM2, mean pooling", asset: () => fixture("tiny-lfm2-q8_0.gguf"), flags: ["--pooling", "mean"], pooling: "mean" },
  { name: "llama, mean pooling", asset: () => fixture("tiny-llama-q8_0.gguf"), flags: ["--pooling", "mean"], pooling: "mean" },
  { name: "qwen2, last-token pooling", asset: () => fixture("tiny-qwen2-q8_0.gguf"), flags: ["--pooling", "last"], pooling: "last" },
  { name: "Gemma 3, mean pooling", asset: () => fixture("tiny-gemma3-q8_0.gguf"), flags: ["--pooling", "mean"], pooling: "mean" },
  { name: "LFM2-MoE, mean pooling", asset: () => fixture("tiny-lfm2moe-e8-lead2-q8_0.gguf"), flags: ["--pooling", "mean"], pooling: "mean" },
  { name: "SmolLM2, mean pooling", asset: smollm2, flags: ["--pooling", "mean"], pooling: "mean" },
  { name: "SmolLM2, last-token pooling", asset: smollm2, flags: ["--pooling", "last"], pooling: "last" },
];

for (const c of cases) {
  const { serial, path: model } = needs(c.asset(), bin);
  serial(`embeddings equal llama-server --embeddings: ${c.name}`, async (t) => {
    const engine = await Engine.load({ modelPath: model!, contextSize: 2048 });
    try {
      let worst = 1;
      let bitEqual = 0;
      let total = 0;
      await withPeer(model!, c.flags, async (url) => {
        for (const text of TEXTS) {
          const ids = engine.tokenize(text, { addSpecial: true, parseSpecial: true });
          const want = await peerEmbedding(url, ids);
          const got = (await engine.embed({ promptTokens: ids, pooling: c.pooling })).vectors;
          t.is(got.length, want.length, `${JSON.stringify(text.slice(0, 20))}: vectors`);
          for (let i = 0; i < Math.min(got.length, want.length); i++) {
            t.is(got[i].length, want[i].length, "width");
            worst = Math.min(worst, cosine(got[i], want[i]));
            total++;
            if (got[i].every((v, k) => v === Math.fround(want[i][k]))) bitEqual++;
          }
        }
      });
      t.true(worst >= COS, `lowest cosine ${worst}`);
      t.log(`${total} vectors: lowest cosine ${worst.toFixed(9)}, ${bitEqual} bit-equal`);
    } finally {
      await engine.unload();
    }
  });
}

// The rerank template of the GGUF (`tokenizer.chat_template.rerank`), filled as llama-server's
// `format_prompt_rerank` fills it, tokenized without added specials.
const reranker = needs(fixture("tiny-qwen3-rerank-q8_0.gguf"), bin);
reranker.serial("rerank scores and order equal llama-server --rerank (Qwen3-Reranker's classifier head)", async (t) => {
  const model = reranker.path!;
  const { inspectModel } = await import("../ts/engine/index.ts");
  const meta = (await inspectModel(model)).metadata as Record<string, unknown>;
  const template = meta["tokenizer.chat_template.rerank"];
  t.is(typeof template, "string", "the fixture carries a rerank template");
  const engine = await Engine.load({ modelPath: model, contextSize: 2048 });
  try {
    const query = "What do cats eat?";
    const docs = ["Cats are carnivores and eat meat.", "The stock market fell on Tuesday.", "Kittens drink milk.", "A recipe for bread", TEXTS[2]];
    const peer = await withPeer(model, ["--rerank"], async (url) => {
      const r = await postJson(`${url}/v1/rerank`, { query, documents: docs });
      t.is(r.status, 200, r.text);
      return r.json.results as { index: number; relevance_score: number }[];
    });
    const want = new Map(peer.map((r) => [r.index, r.relevance_score]));
    const got = new Map<number, number>();
    for (const [i, doc] of docs.entries()) {
      const prompt = (template as string).replaceAll("{query}", query).replaceAll("{document}", doc);
      const ids = engine.tokenize(prompt, { addSpecial: false, parseSpecial: true });
      got.set(i, (await engine.embed({ promptTokens: ids, pooling: "rank" })).vectors[0][0]);
    }
    let worst = 0;
    for (const [i, w] of want) {
      const g = got.get(i)!;
      // Scores near 0 (the fixture's wide logits): compare in log space.
      worst = Math.max(worst, Math.abs(Math.log(g) - Math.log(w)));
    }
    const order = (m: Map<number, number>) => [...m].sort((a, b) => b[1] - a[1]).map(([i]) => i);
    t.deepEqual(order(got), order(want), "same ranking");
    t.true(worst < 1e-3, `log-score difference up to ${worst}`);
    t.log(`scores ${JSON.stringify([...want].map(([i, s]) => [i, s.toExponential(3)]))}; log-score difference ≤ ${worst.toExponential(2)}`);
  } finally {
    await engine.unload();
  }
});
