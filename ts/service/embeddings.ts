/**
 * Embeddings and ranking over a served model, for every API that asks (OpenAI /v1/embeddings,
 * llama-server's /embeddings, Ollama's /api/embed and /api/embeddings, /v1/rerank, vLLM's
 * /score, the library). As llama-server: a text input is tokenized with the vocabulary's
 * specials (BOS/EOS as it wants them) and special-token text parsed; token-id inputs go in as
 * they are. Every input is its own engine request, up to twice the model's sequences in flight
 * at once (the scheduler batches them beside generation; thousands of inputs never fill the
 * shared queue). An input over the context is a 400, or cut to fit when the request asks
 * (Ollama's `truncate`), never silently.
 *
 * Ranking: a cross-encoder (a classifier head, `rank` pooling) scores each (query, document)
 * prompt written as llama-server's `format_prompt_rerank` writes it, score = the classifier's
 * first output; a ColBERT model (per-token vectors) by MaxSim over L2-normalised token vectors.
 */
import { inspectModel, WickError, type EmbeddingInfo, type Pooling } from "../engine/index.ts";
import { RequestError } from "./errors.ts";
import type { ServedModel } from "./registry.ts";

/** One input: text, or token ids. */
export type EmbedItem = string | number[];

export interface EmbedOptions {
  /** Default: the model's. */
  pooling?: Pooling;
  /** llama.cpp's `embd_normalize` (-1 none, 0 max-abs int16, 2 euclidean = default, p p-norm). */
  normalize?: number;
  /** Cut an input over the context to fit (Ollama's `truncate`); default: such an input is a 400. */
  truncate?: boolean;
  /** Keep the first N dimensions of each pooled vector and L2-normalise them again (Matryoshka). */
  dimensions?: number;
  /** The request field named in errors (`input`, `prompt`, `content`). */
  param?: string;
  signal?: AbortSignal;
}

export interface EmbedOutput {
  /** One pooled vector, one per token (`none`), or the classifier's scores (`rank`). */
  vectors: Float32Array[];
  promptTokens: number;
}

/** The model's embedding facts; a model loaded without weights has none. */
export function embeddingInfo(model: ServedModel): EmbeddingInfo {
  const info = model.info.embedding;
  if (!info) throw new RequestError("INVALID_REQUEST", `The model '${model.id}' was loaded without its weights and cannot make embeddings.`, "model");
  return info;
}

/** True when the model is made for embeddings or ranking only (it does not generate text). */
export function embeddingOnly(model: ServedModel): boolean {
  return !!model.info.embedding?.only;
}

/**
 * The OpenAI and Ollama routes give one vector per input: a model whose vectors are per token
 * (ColBERT, pooling `none`) cannot answer them, as llama-server refuses it on /v1/embeddings.
 */
export function requirePooled(model: ServedModel, route: string): void {
  if (embeddingInfo(model).defaultPooling === "none") {
    throw new RequestError(
      "INVALID_REQUEST",
      `The model '${model.id}' gives one vector per token (pooling 'none', e.g. ColBERT), which ${route} cannot return: it answers one vector per input. Use /embeddings (llama-server's per-token form) or /v1/rerank.`,
      "model",
      "pooling_not_supported",
    );
  }
}

/** A request's inputs as a list (one string, or one token-id array, is one input). */
export function inputList(input: string | string[] | number[] | number[][]): EmbedItem[] {
  if (typeof input === "string") return [input];
  if (input.length > 0 && typeof input[0] === "number") return [input as number[]];
  return input as EmbedItem[];
}

/** One input's token ids: text tokenized as llama-server does for embeddings, ids checked. */
export function inputTokens(model: ServedModel, item: EmbedItem, param: string, truncate = false): number[] {
  let tokens: number[];
  if (typeof item === "string") {
    if (item === "") throw new RequestError("INVALID_REQUEST", `Invalid '${param}': the input must not be an empty string.`, param, "empty_input");
    tokens = model.engine.tokenize(item, { addSpecial: true, parseSpecial: true });
  } else {
    if (item.length === 0) throw new RequestError("INVALID_REQUEST", `Invalid '${param}': the input must not be an empty array of tokens.`, param, "empty_input");
    const bad = item.findIndex((id) => id >= model.info.nVocab);
    if (bad >= 0) throw new RequestError("INVALID_REQUEST", `${param}[${bad}] = ${item[bad]} is not a token id of this model (its vocabulary has ${model.info.nVocab} tokens).`, `${param}[${bad}]`);
    tokens = item;
  }
  if (tokens.length === 0) throw new RequestError("INVALID_REQUEST", `Invalid '${param}': the input has no tokens.`, param, "empty_input");
  const ctx = model.info.contextSize;
  if (tokens.length > ctx) {
    if (truncate) return tokens.slice(0, ctx);
    throw new RequestError("CONTEXT_LENGTH_EXCEEDED", `The input ${param} has ${tokens.length} tokens, more than this model's context of ${ctx} tokens.`, param);
  }
  return tokens;
}

/**
 * Embeds each input (all submitted together; the scheduler batches them); inputs are checked
 * and tokenized before any is submitted, so a bad one fails the request before work starts.
 */
export async function embedInputs(model: ServedModel, items: EmbedItem[], opts: EmbedOptions = {}): Promise<EmbedOutput[]> {
  const info = embeddingInfo(model);
  const param = opts.param ?? "input";
  if (items.length === 0) throw new RequestError("INVALID_REQUEST", `Invalid '${param}': there is nothing to embed (an empty list).`, param, "empty_input");
  const pooling = opts.pooling ?? info.defaultPooling;
  if (opts.dimensions != null) {
    if (pooling === "none" || pooling === "rank") throw new RequestError("INVALID_REQUEST", `'dimensions' applies to pooled embeddings, not to pooling '${pooling}'.`, "dimensions");
    if (opts.dimensions > info.nOut) {
      throw new RequestError("INVALID_REQUEST", `Invalid 'dimensions': ${opts.dimensions} is more than this model's ${info.nOut} dimensions.`, "dimensions", "value_above_maximum");
    }
  }
  const tokens = items.map((item, i) => inputTokens(model, item, items.length === 1 ? param : `${param}[${i}]`, opts.truncate));
  const ac = new AbortController();
  const stop = () => ac.abort();
  opts.signal?.addEventListener("abort", stop, { once: true });
  try {
    // A bounded number in flight (enough to fill the engine's batches): a request with thousands
    // of inputs must not fill the engine's queue, which other requests share.
    const embedOne = (promptTokens: number[]) => model.engine.embed({ promptTokens, pooling, ...(opts.normalize != null ? { normalize: opts.normalize } : {}) }, ac.signal);
    const out = new Array<Awaited<ReturnType<typeof embedOne>>>(tokens.length);
    let next = 0;
    const worker = async () => {
      while (next < tokens.length && !ac.signal.aborted) {
        const i = next++;
        out[i] = await embedOne(tokens[i]);
      }
    };
    const width = Math.min(tokens.length, Math.max(1, model.info.maxSequences) * 2);
    // One failure cancels the others: no work left running for an answer that is an error.
    await Promise.all(
      Array.from({ length: width }, () =>
        worker().catch((err: unknown) => {
          ac.abort();
          throw err;
        }),
      ),
    );
    if (ac.signal.aborted) throw new WickError("CANCELLED", "the embedding request was cancelled");
    return out.map((r) => ({
      vectors: opts.dimensions != null ? r.vectors.map((v) => shorten(v, opts.dimensions!, opts.normalize ?? 2)) : r.vectors,
      promptTokens: r.promptTokens,
    }));
  } finally {
    opts.signal?.removeEventListener("abort", stop);
  }
}

/** The first `n` dimensions, L2-normalised again when the vector was (Matryoshka truncation). */
export function shorten(v: Float32Array, n: number, normalize: number): Float32Array {
  const out = v.slice(0, n);
  if (normalize !== 2 || n === v.length) return out;
  return l2Normalize(out);
}

export function l2Normalize(v: Float32Array): Float32Array {
  let sum = 0;
  for (const x of v) sum += x * x;
  const norm = Math.sqrt(sum);
  const out = new Float32Array(v.length);
  const scale = norm > 0 ? 1 / norm : 0;
  for (let i = 0; i < v.length; i++) out[i] = v[i] * scale;
  return out;
}

/** OpenAI's base64 encoding: the float32 values' little-endian bytes. */
export function base64Floats(v: Float32Array): string {
  const bytes = Buffer.alloc(v.length * 4);
  for (let i = 0; i < v.length; i++) bytes.writeFloatLE(v[i], i * 4);
  return bytes.toString("base64");
}

/** How a model ranks: a classifier head (cross-encoder), or MaxSim over per-token vectors (ColBERT). */
export type RankMethod = "cross-encoder" | "maxsim";

export function rankMethod(model: ServedModel): RankMethod {
  const info = embeddingInfo(model);
  if (info.ranks) return "cross-encoder";
  if (info.defaultPooling === "none") return "maxsim";
  throw new RequestError(
    "INVALID_REQUEST",
    `The model '${model.id}' cannot rank documents: reranking needs a cross-encoder (a classifier head, rank pooling) or a ColBERT model (per-token vectors).`,
    "model",
    "model_cannot_rank",
  );
}

export interface RankOutput {
  /** Each document's relevance score, in the documents' order. */
  scores: number[];
  promptTokens: number;
}

/** Scores each document against the query (not sorted: the caller orders and cuts). */
export async function rankDocuments(model: ServedModel, query: string, documents: string[], signal?: AbortSignal): Promise<RankOutput> {
  const method = rankMethod(model);
  if (documents.length === 0) throw new RequestError("INVALID_REQUEST", "Invalid 'documents': there is nothing to rank (an empty list).", "documents", "empty_input");
  if (method === "cross-encoder") {
    const format = await rerankFormat(model);
    const prompts = documents.map((doc) => format(query, doc));
    const outs = await embedInputs(model, prompts, { pooling: "rank", param: "documents", signal });
    return { scores: outs.map((o) => o.vectors[0]?.[0] ?? 0), promptTokens: sum(outs.map((o) => o.promptTokens)) };
  }
  if (query === "") throw new RequestError("INVALID_REQUEST", "Invalid 'query': it must not be empty.", "query", "empty_input");
  const outs = await embedInputs(model, [query, ...documents], { pooling: "none", param: "documents", signal });
  const [q, ...docs] = outs.map((o) => o.vectors.map(l2Normalize));
  return { scores: docs.map((d) => maxSim(q, d)), promptTokens: sum(outs.map((o) => o.promptTokens)) };
}

/** ColBERT's late interaction: for each query token, its best dot product with a document token, summed. */
export function maxSim(query: Float32Array[], doc: Float32Array[]): number {
  let total = 0;
  for (const q of query) {
    let best = -Infinity;
    for (const d of doc) {
      let dot = 0;
      for (let i = 0; i < q.length; i++) dot += q[i] * d[i];
      if (dot > best) best = dot;
    }
    if (best > -Infinity) total += best;
  }
  return total;
}

function sum(xs: number[]): number {
  return xs.reduce((a, b) => a + b, 0);
}

/** Writes one (query, document) pair's prompt tokens. */
type RerankFormat = (query: string, doc: string) => number[];

const formats = new WeakMap<ServedModel, Promise<RerankFormat>>();

/**
 * llama-server's `format_prompt_rerank`: the GGUF's `rerank` template (`tokenizer.chat_template.rerank`)
 * with `{query}` and `{document}` replaced, tokenized without added specials, special text parsed;
 * else BOS (if the vocabulary adds it), the query, EOS (if it adds EOS; SEP when there is no EOS),
 * SEP (if it adds SEP), the document, EOS — query and document tokenized as plain text.
 */
function rerankFormat(model: ServedModel): Promise<RerankFormat> {
  let f = formats.get(model);
  if (!f) {
    f = readRerankFormat(model);
    formats.set(model, f);
  }
  return f;
}

async function readRerankFormat(model: ServedModel): Promise<RerankFormat> {
  const path = model.engine.modelPath ?? model.path;
  const meta: Record<string, unknown> = await inspectModel(path, { maxArrayLen: 0 }).then(
    (i): Record<string, unknown> => i.metadata,
    () => ({}),
  );
  const template = meta["tokenizer.chat_template.rerank"];
  if (typeof template === "string") {
    return (query, doc) => model.engine.tokenize(template.replaceAll("{query}", query).replaceAll("{document}", doc), { addSpecial: false, parseSpecial: true });
  }
  const num = (k: string): number | undefined => {
    const v = meta[k];
    return typeof v === "number" ? v : undefined;
  };
  const flag = (k: string) => meta[k] === true;
  const sep = num("tokenizer.ggml.seperator_token_id") ?? num("tokenizer.ggml.separator_token_id");
  const eos = model.info.eosToken ?? sep;
  const addEos = flag("tokenizer.ggml.add_eos_token") && eos !== undefined;
  const addSep = flag("tokenizer.ggml.add_sep_token") && sep !== undefined;
  const bos = model.info.addBos && model.info.bosToken !== undefined ? [model.info.bosToken] : [];
  const plain = (text: string) => model.engine.tokenize(text, { addSpecial: false, parseSpecial: false });
  const eosIds = addEos && eos !== undefined ? [eos] : [];
  const sepIds = addSep && sep !== undefined ? [sep] : [];
  return (query, doc) => [...bos, ...plain(query), ...eosIds, ...sepIds, ...plain(doc), ...eosIds];
}

/** Sorted by score (highest first), cut to `topN`. */
export function rankOrder(scores: number[], topN?: number | null): { index: number; score: number }[] {
  const ranked = scores.map((score, index) => ({ index, score })).sort((a, b) => b.score - a.score || a.index - b.index);
  return topN == null ? ranked : ranked.slice(0, topN);
}
