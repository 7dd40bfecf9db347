/**
 * OpenAI-style request fields → the engine's GenerateOptions. Defaults are CONTRACT §2's:
 * temperature 1.0, top_p 1.0, top_k off, min_p 0, repetition penalty 1.0, and max_tokens
 * until the context is full (the engine's default when maxTokens is absent).
 */
import type { GenerateOptions, Speculation } from "../engine/index.ts";
import type { SamplingRequest } from "../schemas/sampling.ts";
import { RequestError } from "./errors.ts";
import { requestSpeculation } from "./speculation.ts";

export type SamplingOptions = Omit<GenerateOptions, "promptTokens">;

/** `engineSpec`: the model's default speculative decoding, which the request's `speculative.*` fields adjust. */
export function samplingOptions(req: SamplingRequest & { max_completion_tokens?: number | null }, nVocab: number, topLogprobs?: number, engineSpec?: Speculation): SamplingOptions {
  const out: SamplingOptions = { temperature: req.temperature ?? 1.0 };
  const maxTokens = req.max_completion_tokens ?? req.max_tokens;
  if (maxTokens != null) out.maxTokens = maxTokens;
  // top_p 0 keeps only the most likely token: greedy, which the engine spells top_k 1.
  if (req.top_p === 0) out.topK = 1;
  else if (req.top_p != null && req.top_p < 1) out.topP = req.top_p;
  if (req.top_k != null && req.top_k > 0 && out.topK === undefined) out.topK = req.top_k;
  if (req.min_p != null) out.minP = req.min_p;
  const repetition = req.repetition_penalty ?? req.repeat_penalty;
  if (repetition != null) out.repetitionPenalty = repetition;
  if (req.repeat_last_n != null && req.repeat_last_n >= 0) out.repeatLastN = req.repeat_last_n;
  if (req.presence_penalty != null) out.presencePenalty = req.presence_penalty;
  if (req.frequency_penalty != null) out.frequencyPenalty = req.frequency_penalty;
  if (req.seed != null && req.seed >= 0) out.seed = req.seed;
  const stop = stopStrings(req.stop);
  if (stop.length) out.stop = stop;
  if (req.ignore_eos) out.ignoreEos = true;
  if (topLogprobs !== undefined) out.topLogprobs = topLogprobs;
  const bias = logitBias(req.logit_bias, nVocab);
  if (bias.length) out.logitBias = bias;
  if (req.lora) out.lora = req.lora.map(({ id, scale }) => ({ id, scale }));
  const speculative = requestSpeculation(req, engineSpec);
  if (speculative) out.speculative = speculative;
  return out;
}

/**
 * Ollama option name → the OpenAI-style request field it sets: the one table for `/api` requests'
 * `options` (native.ts) and for Modelfile PARAMETERs under `/v1` (profile.ts).
 */
const OLLAMA_OPTION_FIELDS = {
  temperature: "temperature",
  top_k: "top_k",
  top_p: "top_p",
  min_p: "min_p",
  repeat_penalty: "repeat_penalty",
  repeat_last_n: "repeat_last_n",
  presence_penalty: "presence_penalty",
  frequency_penalty: "frequency_penalty",
  seed: "seed",
  stop: "stop",
} as const satisfies Record<string, keyof SamplingRequest>;

/**
 * Ollama options (or PARAMETERs) as the request fields `samplingOptions` reads; unset (null or
 * undefined) options are left out. A positive `num_predict` is `max_tokens`; -1 (infinite) and
 * -2 (fill the context) both run until the context is full, the default.
 */
export function ollamaSamplingRequest(options: Record<string, unknown>): SamplingRequest {
  const out: Record<string, unknown> = {};
  for (const [name, field] of Object.entries(OLLAMA_OPTION_FIELDS)) if (options[name] != null) out[field] = options[name];
  const numPredict = options.num_predict;
  if (typeof numPredict === "number" && numPredict > 0) out.max_tokens = numPredict;
  return out;
}

/** OpenAI's `{"<token id>": bias}`; an id outside the vocabulary is the request's mistake. */
function logitBias(bias: Record<string, number> | null | undefined, nVocab: number): { id: number; bias: number }[] {
  return Object.entries(bias ?? {}).map(([key, value]) => {
    const id = Number(key);
    if (!(id < nVocab)) throw new RequestError("INVALID_REQUEST", `logit_bias names token ${key}, but the vocabulary has ${nVocab} tokens.`, "logit_bias");
    return { id, bias: value };
  });
}

function stopStrings(stop: string | string[] | null | undefined): string[] {
  if (stop == null) return [];
  return (typeof stop === "string" ? [stop] : stop).filter((s) => s.length > 0);
}

/**
 * The options of each of n choices. With a seed, choice i uses seed + i so the choices differ
 * but the whole response is reproducible, and choice 0 equals the n = 1 answer.
 */
export function perChoice(opts: SamplingOptions, n: number): SamplingOptions[] {
  return Array.from({ length: n }, (_, i) => (opts.seed !== undefined && i > 0 ? { ...opts, seed: opts.seed + i } : opts));
}
