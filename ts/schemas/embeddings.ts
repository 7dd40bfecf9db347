/**
 * Bodies of the embedding and ranking routes:
 *
 * - POST /v1/embeddings (OpenAI): `input` a string, strings, token ids or arrays of token ids;
 *   `encoding_format` float/base64; `dimensions` (Matryoshka truncation); `user` ignored.
 *   llama-server's `content` (its non-OAI form) and `embd_normalize` are read too.
 * - POST /embeddings, /embedding (llama-server's non-OAI form): `content` (or `input`).
 * - POST /api/embed (Ollama): `input` a string or strings, `truncate` (default true),
 *   `dimensions`, `keep_alive`, `options`; the older /api/embeddings: `prompt`.
 * - POST /v1/rerank, /rerank, /v1/reranking, /reranking (Jina/Cohere, llama-server's aliases):
 *   `query`, `documents` (strings or `{text}` objects), `top_n`, `return_documents`; TEI's
 *   `texts` / `return_text`.
 * - POST /v1/score, /score (vLLM): `text_1`, `text_2`.
 */
import { z } from "zod";
import { ollamaGenerateRequest, ollamaOptions } from "./ollama.ts";

const int = z.number().int();
const tokenIds = z.array(int.min(0));

/** What one request may embed: text, texts, one input's token ids, or several inputs' token ids. */
export const embeddingInput = z.union([z.string(), z.array(z.string()), tokenIds, z.array(tokenIds)]);
export type EmbeddingInput = z.infer<typeof embeddingInput>;

export const openaiEmbeddingsRequest = z.object({
  model: z.string().nullish(),
  input: embeddingInput.nullish(),
  /** llama-server's name for the input of its non-OAI answer. */
  content: embeddingInput.nullish(),
  encoding_format: z.enum(["float", "base64"]).nullish(),
  dimensions: int.min(1).nullish(),
  /** llama.cpp's `embd_normalize`: -1 none, 0 max-abs int16, 2 euclidean (default), p p-norm. */
  embd_normalize: int.min(-1).nullish(),
  user: z.string().nullish(),
});
export type OpenAIEmbeddingsRequest = z.infer<typeof openaiEmbeddingsRequest>;

const keepAlive = ollamaGenerateRequest.shape.keep_alive;

export const ollamaEmbedRequest = z.object({
  model: z.string().min(1),
  input: z.union([z.string(), z.array(z.string())]).nullish(),
  /** Cut inputs longer than the context to fit it (default); false: such an input is a 400. */
  truncate: z.boolean().nullish(),
  dimensions: int.min(1).nullish(),
  keep_alive: keepAlive,
  options: ollamaOptions.nullish(),
});
export type OllamaEmbedRequest = z.infer<typeof ollamaEmbedRequest>;

export const ollamaEmbeddingsRequest = z.object({
  model: z.string().min(1),
  prompt: z.string().nullish(),
  keep_alive: keepAlive,
  options: ollamaOptions.nullish(),
});
export type OllamaEmbeddingsRequest = z.infer<typeof ollamaEmbeddingsRequest>;

/** A document to rank: its text, or an object carrying it as `text` (Jina and Cohere allow both). */
const rerankDocument = z.union([z.string(), z.looseObject({ text: z.string() })]);

export const rerankRequest = z.object({
  model: z.string().nullish(),
  query: z.string(),
  documents: z.array(rerankDocument).nullish(),
  /** TEI's name for the documents; its answer is a bare array with `score`. */
  texts: z.array(z.string()).nullish(),
  top_n: int.min(0).nullish(),
  return_documents: z.boolean().nullish(),
  /** TEI: each result carries its `text`. */
  return_text: z.boolean().nullish(),
});
export type RerankRequest = z.infer<typeof rerankRequest>;

const scoreText = z.union([z.string(), z.array(z.string())]);

export const scoreRequest = z.object({
  model: z.string().nullish(),
  text_1: scoreText,
  text_2: scoreText,
});
export type ScoreRequest = z.infer<typeof scoreRequest>;
