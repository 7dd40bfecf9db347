/**
 * The embedding and ranking routes through real clients on a real server on 127.0.0.1: the
 * `openai` client's `embeddings.create` (floats, its default base64, `dimensions`), the `ollama`
 * client's `embed` and `embeddings`, Jina/Cohere-shaped rerank by fetch on a cross-encoder
 * (tiny Qwen3-Reranker) and on ColBERT (MaxSim), vLLM's /v1/score, llama-server's non-OAI
 * /embeddings, `/api/show` capabilities, `wick run` printing a vector, and bad input in each
 * API's own error shape (the server serving on afterwards). Parity-relevant facts of the
 * service are checked cheaply: N inputs in one request are bit-equal to N requests, token-id
 * input equals its text, base64 equals floats.
 */
import OpenAI from "openai";
import { Ollama } from "ollama";
import { Engine } from "../ts/engine/index.ts";
import { embed, rerank } from "../ts/lib.ts";
import { ModelManager } from "../ts/service/models.ts";
import { showModel } from "../ts/service/show.ts";
import { fixture, needs } from "./helpers/assets.ts";
import { cliHome } from "./helpers/cli.ts";
import { loadModels, openaiClient, postJson, startServer, type RunningServer } from "./helpers/server.ts";
import test, { type ExecutionContext } from "ava";

const embedAsset = fixture("tiny-lfm2-embed-q8_0.gguf");
const colbertAsset = fixture("tiny-lfm2-colbert-q8_0.gguf");
const rerankAsset = fixture("tiny-qwen3-rerank-q8_0.gguf");
const lfm2Asset = fixture("tiny-lfm2-q8_0.gguf");
const { serial } = needs(embedAsset, colbertAsset, rerankAsset, lfm2Asset);
const path = (a: typeof embedAsset) => ("path" in a ? a.path : "");

const CTX = 256;
const s = {} as { server: RunningServer; client: OpenAI; ollama: Ollama; unload: () => Promise<void> };

test.before(async () => {
  if (!("path" in embedAsset && "path" in colbertAsset && "path" in rerankAsset && "path" in lfm2Asset)) return;
  const loaded = await loadModels({ embed: path(embedAsset), colbert: path(colbertAsset), rerank: path(rerankAsset), lfm2: path(lfm2Asset) }, { contextSize: CTX, maxSequences: 4 });
  s.server = await startServer({ registry: loaded.registry });
  s.client = openaiClient(s.server.url);
  s.ollama = new Ollama({ host: s.server.url });
  s.unload = () => loaded.unload();
});
test.after.always(async () => {
  await s.server?.close();
  await s.unload?.();
});

const post = (route: string, body: unknown) => postJson(`${s.server.url}${route}`, body);
const norm = (v: ArrayLike<number>) => Math.sqrt(Array.from(v).reduce((a, x) => a + x * x, 0));
const TEXTS = ["The cat sat on the mat.", "Paris is the capital of France.", "Quantum chromodynamics describes the strong force."];

serial("openai embeddings.create: one L2-normalised vector per input, usage, floats equal to the client's default base64", async (t) => {
  const floats = await s.client.embeddings.create({ model: "embed", input: TEXTS, encoding_format: "float" });
  t.is(floats.object, "list");
  t.is(floats.model, "embed");
  t.is(floats.data.length, 3);
  floats.data.forEach((d, i) => {
    t.is(d.object, "embedding");
    t.is(d.index, i);
    t.is(d.embedding.length, 64);
    t.true(Math.abs(norm(d.embedding) - 1) < 1e-5);
  });
  const tokens = await Promise.all(TEXTS.map((content) => post("/tokenize", { model: "embed", content, add_special: true })));
  const count = tokens.reduce((n, r) => n + (r.json.tokens as number[]).length, 0);
  t.deepEqual(floats.usage, { prompt_tokens: count, total_tokens: count });

  // No encoding_format: the openai client asks for base64 and decodes it (little-endian float32).
  const b64 = await s.client.embeddings.create({ model: "embed", input: TEXTS });
  t.deepEqual(
    b64.data.map((d) => d.embedding),
    floats.data.map((d) => d.embedding),
  );
  const raw = await post("/v1/embeddings", { model: "embed", input: TEXTS[0], encoding_format: "base64" });
  t.is(typeof raw.json.data[0].embedding, "string");
  const buf = Buffer.from(raw.json.data[0].embedding as string, "base64");
  t.deepEqual(
    Array.from({ length: buf.length / 4 }, (_, i) => buf.readFloatLE(i * 4)),
    floats.data[0].embedding,
  );
});

serial("N inputs in one request are bit-equal to N requests; token ids equal their text", async (t) => {
  const batch = await s.client.embeddings.create({ model: "embed", input: TEXTS, encoding_format: "float" });
  const one = await Promise.all(TEXTS.map((input) => s.client.embeddings.create({ model: "embed", input, encoding_format: "float" })));
  t.deepEqual(
    one.map((r) => r.data[0].embedding),
    batch.data.map((d) => d.embedding),
  );
  const ids = await Promise.all(TEXTS.map(async (content) => (await post("/tokenize", { model: "embed", content, add_special: true, parse_special: true })).json.tokens as number[]));
  const byIds = await s.client.embeddings.create({ model: "embed", input: ids, encoding_format: "float" });
  t.deepEqual(
    byIds.data.map((d) => d.embedding),
    batch.data.map((d) => d.embedding),
  );
  const single = await s.client.embeddings.create({ model: "embed", input: ids[1], encoding_format: "float" });
  t.deepEqual(single.data[0].embedding, batch.data[1].embedding);
});

serial("dimensions: the first N re-normalised (Matryoshka); more than the model has is a 400", async (t) => {
  const full = (await s.client.embeddings.create({ model: "embed", input: TEXTS[0], encoding_format: "float" })).data[0].embedding;
  const cut = (await s.client.embeddings.create({ model: "embed", input: TEXTS[0], encoding_format: "float", dimensions: 16 })).data[0].embedding;
  t.is(cut.length, 16);
  t.true(Math.abs(norm(cut) - 1) < 1e-5);
  const n = norm(full.slice(0, 16));
  cut.forEach((x, i) => t.true(Math.abs(x - full[i] / n) < 1e-6));
  const err = await t.throwsAsync(s.client.embeddings.create({ model: "embed", input: "x", dimensions: 65 }), { instanceOf: OpenAI.BadRequestError });
  t.regex(err.message, /65 is more than this model's 64 dimensions/);
  t.is(err.param, "dimensions");
  const ollama = await post("/api/embed", { model: "embed", input: "x", dimensions: 65 });
  t.is(ollama.status, 400);
  t.regex(ollama.json.error, /64 dimensions/);
});

serial("ollama embed and embeddings: normalised batch, dimensions, the older route's raw vector", async (t) => {
  const res = await s.ollama.embed({ model: "embed", input: TEXTS });
  t.is(res.model, "embed");
  t.is(res.embeddings.length, 3);
  const oai = await s.client.embeddings.create({ model: "embed", input: TEXTS, encoding_format: "float" });
  t.deepEqual(
    res.embeddings,
    oai.data.map((d) => d.embedding),
  );
  t.true(res.prompt_eval_count > 0);
  t.true(res.total_duration > 0);
  const dims = await s.ollama.embed({ model: "embed", input: TEXTS[0], dimensions: 8 });
  t.is(dims.embeddings[0].length, 8);
  t.true(Math.abs(norm(dims.embeddings[0]) - 1) < 1e-5);

  const old = await s.ollama.embeddings({ model: "embed", prompt: TEXTS[0] });
  t.is(old.embedding.length, 64);
  const n = norm(old.embedding);
  old.embedding.forEach((x, i) => t.true(Math.abs(x / n - oai.data[0].embedding[i]) < 1e-5));

  // No input only loads the model, as Ollama answers it.
  t.deepEqual((await post("/api/embed", { model: "embed" })).json, { model: "embed", embeddings: [] });
});

serial("a generative model embeds with mean pooling on both APIs", async (t) => {
  const res = await s.client.embeddings.create({ model: "lfm2", input: "hello world", encoding_format: "float" });
  t.is(res.data[0].embedding.length, 64);
  t.true(Math.abs(norm(res.data[0].embedding) - 1) < 1e-5);
  const o = await s.ollama.embed({ model: "lfm2", input: "hello world" });
  t.deepEqual(o.embeddings[0], res.data[0].embedding);
});

serial("over the context: OpenAI 400; Ollama cuts to fit by default and 400s with truncate false", async (t) => {
  const long = "word ".repeat(CTX + 50);
  const err = await t.throwsAsync(s.client.embeddings.create({ model: "embed", input: long }), { instanceOf: OpenAI.BadRequestError });
  t.is(err.code, "context_length_exceeded");
  t.regex(err.message, new RegExp(`context of ${CTX} tokens`));
  const cut = await post("/api/embed", { model: "embed", input: long });
  t.is(cut.status, 200);
  t.is(cut.json.prompt_eval_count, CTX);
  const refused = await post("/api/embed", { model: "embed", input: [TEXTS[0], long], truncate: false });
  t.is(refused.status, 400);
  t.regex(refused.json.error, /input\[1\] has \d+ tokens, more than this model's context/);
  t.deepEqual(Object.keys(refused.json), ["error"]);
});

serial("llama-server's /embeddings: per-token vectors for ColBERT, the pooled one alone otherwise; ColBERT is a 400 on one-vector routes", async (t) => {
  const col = await post("/embeddings", { model: "colbert", content: ["hello world", "a b c d"] });
  t.is(col.status, 200);
  t.deepEqual(
    col.json.map((e: { index: number }) => e.index),
    [0, 1],
  );
  const ids = (await post("/tokenize", { model: "colbert", content: "hello world", add_special: true })).json.tokens as number[];
  t.is(col.json[0].embedding.length, ids.length);
  t.is(col.json[0].embedding[0].length, 32);
  const pooled = await post("/embeddings", { model: "embed", content: "hello world" });
  t.is(pooled.json.length, 1);
  t.is(pooled.json[0].embedding.length, 1);
  t.is(pooled.json[0].embedding[0].length, 64);
  // /v1/embeddings with llama-server's `content` answers its non-OAI way too.
  t.deepEqual((await post("/v1/embeddings", { model: "embed", content: "hello world" })).json, pooled.json);

  const oai = await t.throwsAsync(s.client.embeddings.create({ model: "colbert", input: "hello" }), { instanceOf: OpenAI.BadRequestError });
  t.regex(oai.message, /one vector per token/);
  const ollama = await post("/api/embed", { model: "colbert", input: "hello" });
  t.is(ollama.status, 400);
  t.regex(ollama.json.error, /one vector per token/);
});

const DOCS = ["Paris is the capital of France.", "Bananas are yellow.", "The Eiffel Tower is in Paris.", "Rust is a programming language."];

async function rerankChecks(t: ExecutionContext, model: string) {
  const all = await post("/v1/rerank", { model, query: "What is the capital of France?", documents: DOCS });
  t.is(all.status, 200, all.text);
  t.is(all.json.object, "list");
  t.is(all.json.model, model);
  t.true(all.json.usage.prompt_tokens > 0);
  const results = all.json.results as { index: number; relevance_score: number; document?: unknown }[];
  t.deepEqual(results.map((r) => r.index).sort(), [0, 1, 2, 3]);
  for (let i = 1; i < results.length; i++) t.true(results[i - 1].relevance_score >= results[i].relevance_score, "highest score first");
  t.true(results.every((r) => r.document === undefined && Number.isFinite(r.relevance_score)));

  // top_n, return_documents, `{text}` documents and the aliases agree.
  const top = await post("/rerank", { model, query: "What is the capital of France?", documents: DOCS.map((text) => ({ text })), top_n: 2, return_documents: true });
  t.deepEqual(
    top.json.results,
    results.slice(0, 2).map((r) => ({ ...r, document: { text: DOCS[r.index] } })),
  );
  const alias = await post("/v1/reranking", { model, query: "What is the capital of France?", documents: DOCS });
  t.deepEqual(alias.json.results, results);
  // TEI's shape: `texts` → a bare array with `score`.
  const tei = await post("/reranking", { model, query: "What is the capital of France?", texts: DOCS, return_text: true });
  t.deepEqual(
    tei.json,
    results.map((r) => ({ index: r.index, score: r.relevance_score, text: DOCS[r.index] })),
  );
  // vLLM's /v1/score: the same scores in the documents' order.
  const score = await post("/v1/score", { model, text_1: "What is the capital of France?", text_2: DOCS });
  t.is(score.status, 200, score.text);
  t.deepEqual(
    score.json.data.map((d: { score: number }) => d.score),
    DOCS.map((_, i) => results.find((r) => r.index === i)!.relevance_score),
  );
  return results;
}

serial("rerank with a cross-encoder (Qwen3-Reranker template, rank pooling): Jina/Cohere, TEI and vLLM shapes", async (t) => {
  const results = await rerankChecks(t, "rerank");
  // Each score is the classifier's first output for the prompt the GGUF's rerank template writes
  // (llama-server's format_prompt_rerank): the template read back from /api/show, tokenized
  // without added specials, embedded with the model's rank pooling through /embeddings.
  const shown = await post("/api/show", { model: "rerank" });
  const template = shown.json.model_info["tokenizer.chat_template.rerank"] as string;
  t.true(template.includes("{query}") && template.includes("{document}"));
  const query = "What is the capital of France?";
  for (const r of results) {
    const content = template.replaceAll("{query}", query).replaceAll("{document}", DOCS[r.index]);
    const ids = (await post("/tokenize", { model: "rerank", content, add_special: false, parse_special: true })).json.tokens as number[];
    const emb = await post("/embeddings", { model: "rerank", content: ids });
    t.is(emb.json[0].embedding[0][0], r.relevance_score);
  }
  t.log(results.map((r) => `${r.index}:${r.relevance_score.toExponential(3)}`).join(" "));
});

serial("rerank with ColBERT: MaxSim over L2-normalised token vectors, as computed from /embeddings", async (t) => {
  const results = await rerankChecks(t, "colbert");
  const query = "What is the capital of France?";
  const vecs = (await post("/embeddings", { model: "colbert", content: [query, ...DOCS] })).json as { embedding: number[][] }[];
  const unit = (v: number[]) => v.map((x) => x / norm(v));
  const [q, ...docs] = vecs.map((e) => e.embedding.map(unit));
  const maxSim = (d: number[][]) => q.reduce((sum, qv) => sum + Math.max(...d.map((dv) => dv.reduce((a, x, i) => a + x * qv[i], 0))), 0);
  for (const r of results) t.true(Math.abs(r.relevance_score - maxSim(docs[r.index])) < 1e-4);
});

serial("a model that cannot rank, and bad rerank bodies, are 400s", async (t) => {
  const embed = await post("/v1/rerank", { model: "embed", query: "q", documents: ["a"] });
  t.is(embed.status, 400);
  t.regex(embed.json.error.message, /cannot rank/);
  t.is((await post("/v1/rerank", { model: "rerank", query: "q", documents: [] })).status, 400);
  t.is((await post("/v1/rerank", { model: "rerank", query: "q" })).status, 400);
  t.is((await post("/v1/rerank", { model: "rerank", documents: ["a"] })).status, 400);
});

serial("bad input: empty, mixed types, wrong encoding → 400 in OpenAI's shape and Ollama's", async (t) => {
  for (const input of ["", [], [""], ["a", ""], [[]]]) {
    const r = await post("/v1/embeddings", { model: "embed", input });
    t.is(r.status, 400, JSON.stringify(input));
    t.is(r.json.error.type, "invalid_request_error");
  }
  const mixed = await post("/v1/embeddings", { model: "embed", input: ["a", 1] });
  t.is(mixed.status, 400);
  t.regex(mixed.json.error.message, /input/);
  t.is((await post("/v1/embeddings", { model: "embed", input: [[1, 2], "a"] })).status, 400);
  t.is((await post("/v1/embeddings", { model: "embed", input: "a", encoding_format: "hex" })).status, 400);
  t.is((await post("/v1/embeddings", { model: "embed", input: [999999999] })).status, 400);
  const empty = await post("/api/embed", { model: "embed", input: [""] });
  t.is(empty.status, 400);
  t.deepEqual(Object.keys(empty.json), ["error"]);
  t.is((await post("/api/embed", { model: "embed", input: ["a", 2] })).status, 400);
});

serial("a vector model asked to generate: 400 in each API's shape, and the server serves on", async (t) => {
  const messages = [{ role: "user", content: "hi" }];
  const chat = await post("/v1/chat/completions", { model: "embed", messages, max_tokens: 4 });
  t.is(chat.status, 400);
  t.regex(chat.json.error.message, /makes embeddings and does not generate text/);
  const completion = await post("/v1/completions", { model: "embed", prompt: "hi", max_tokens: 4 });
  t.is(completion.status, 400);
  t.regex(completion.json.error.message, /does not generate text/);
  for (const [route, body] of [
    ["/api/chat", { model: "embed", messages, stream: false }],
    ["/api/generate", { model: "embed", prompt: "hi", stream: false }],
    ["/api/chat", { model: "rerank", messages }],
  ] as const) {
    const r = await post(route, body);
    t.is(r.status, 400, route);
    t.regex(r.json.error, /does not generate text/, route);
  }
  const anthropic = await post("/v1/messages", { model: "embed", messages, max_tokens: 4 });
  t.is(anthropic.status, 400);
  t.is(anthropic.json.type, "error");
  const still = await s.client.embeddings.create({ model: "embed", input: "still here", encoding_format: "float" });
  t.is(still.data[0].embedding.length, 64);
  const gen = await s.client.chat.completions.create({ model: "lfm2", messages: [{ role: "user", content: "hi" }], max_tokens: 2 });
  t.truthy(gen.choices[0]);
});

serial("/api/show: capabilities ['embedding'] for embedding-only models, 'completion' for a generative one", async (t) => {
  for (const model of ["embed", "colbert", "rerank"]) {
    const r = await s.ollama.show({ model });
    t.deepEqual(r.capabilities, ["embedding"], model);
  }
  const gen = await s.ollama.show({ model: "lfm2" });
  t.true(gen.capabilities.includes("completion"));
  t.false(gen.capabilities.includes("embedding"));
  const listed = (await s.client.models.list()).data.map((m) => m.id).sort();
  t.deepEqual(listed, ["colbert", "embed", "lfm2", "rerank"]);
});

serial("wick run on an embedding model prints its vector as a JSON array, as ollama run does", async (t) => {
  const h = await cliHome();
  try {
    const r = await h.wick(["run", path(embedAsset), "The cat sat on the mat."]);
    t.is(r.status, 0, r.stderr);
    const lines = r.stdout.trim().split("\n");
    t.is(lines.length, 1);
    t.regex(lines[0], /^\[-?\d/);
    const v = JSON.parse(lines[0]) as number[];
    t.is(v.length, 64);
    const served = (await s.client.embeddings.create({ model: "embed", input: "The cat sat on the mat.", encoding_format: "float" })).data[0].embedding;
    v.forEach((x, i) => t.is(Math.fround(x), served[i]));
    const none = await h.wick(["run", path(embedAsset)]);
    t.is(none.status, 1);
    t.regex(none.stderr, /embedding models require input text/);
  } finally {
    await h.close();
  }
});

serial("library: embed(engine, …) and rerank(engine, …) answer what the routes answer", async (t) => {
  const embedEngine = await Engine.load({ modelPath: path(embedAsset), contextSize: CTX, maxSequences: 4 });
  const rerankEngine = await Engine.load({ modelPath: path(rerankAsset), contextSize: CTX, maxSequences: 4 });
  const colbertEngine = await Engine.load({ modelPath: path(colbertAsset), contextSize: CTX, maxSequences: 4 });
  try {
    const lib = await embed(embedEngine, { input: TEXTS, dimensions: 16 });
    const http = await s.client.embeddings.create({ model: "embed", input: TEXTS, encoding_format: "float", dimensions: 16 });
    t.deepEqual(
      lib.embeddings.map((v) => Array.from(v)),
      http.data.map((d) => d.embedding),
    );
    t.is(lib.promptTokens, http.usage.prompt_tokens);
    const perToken = await embed(colbertEngine, { input: "hello world" });
    t.deepEqual(perToken.embeddings, []);
    t.is(perToken.tokenEmbeddings![0][0].length, 32);

    const query = "What is the capital of France?";
    const ranked = await rerank(rerankEngine, { query, documents: DOCS, topN: 3 });
    const served = (await post("/v1/rerank", { model: "rerank", query, documents: DOCS, top_n: 3 })).json.results as { index: number; relevance_score: number }[];
    t.deepEqual(
      ranked.results.map((r) => [r.index, r.score, r.document]),
      served.map((r) => [r.index, r.relevance_score, DOCS[r.index]]),
    );
    await t.throwsAsync(rerank(embedEngine, { query, documents: DOCS }), { message: /cannot rank/ });
  } finally {
    await Promise.all([embedEngine.unload(), rerankEngine.unload(), colbertEngine.unload()]);
  }
});

serial("a request with many inputs never fills the engine's queue; order kept", async (t) => {
  const input = Array.from({ length: 600 }, (_, i) => `text number ${i}`);
  const res = await s.client.embeddings.create({ model: "embed", input, encoding_format: "float" });
  t.is(res.data.length, 600);
  t.deepEqual(
    res.data.map((d) => d.index),
    input.map((_, i) => i),
  );
  const one = await s.client.embeddings.create({ model: "embed", input: input[417], encoding_format: "float" });
  t.deepEqual(res.data[417].embedding, one.data[0].embedding);
});

serial("/api/show before the model loads: the file's keys give the same capabilities", async (t) => {
  for (const [asset, want] of [
    [embedAsset, ["embedding"]],
    [colbertAsset, ["embedding"]],
    [rerankAsset, ["embedding"]],
    [lfm2Asset, ["completion"]],
  ] as const) {
    const models = new ModelManager({});
    models.setDefault({ path: path(asset) }, { id: "m" });
    const shown = await showModel(models, { model: "m" });
    t.deepEqual(
      shown.capabilities.filter((c) => c !== "tools"),
      [...want],
      path(asset),
    );
    t.deepEqual(models.loaded(), [], "show loads nothing");
  }
});
