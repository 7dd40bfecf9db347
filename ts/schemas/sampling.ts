/**
 * Sampling and length fields shared by /v1/chat/completions and /v1/completions. Every field
 * is optional and nullable: OpenAI clients send `null` for "not set". The ranges are the
 * engine's (crates/wick-core/src/sampling) or OpenAI's, whichever is narrower for users.
 */
import { z } from "zod";

const positiveInt = z.number().int().min(1);

/** One stop string or up to 16; empty strings are dropped by the request mapper. */
const stopSchema = z.union([z.string(), z.array(z.string()).max(16)]);

export const samplingFields = {
  /** Any name is accepted when one model is served (llama-server's rule). */
  model: z.string().nullish(),
  temperature: z.number().min(0).nullish(),
  /** 0 is accepted (OpenAI does) and means greedy. */
  top_p: z.number().min(0).max(1).nullish(),
  /** -1 (SGLang) and 0 (mlx-lm, llama.cpp) both mean off. */
  top_k: z.number().int().min(-1).nullish(),
  min_p: z.number().min(0).max(1).nullish(),
  repetition_penalty: z.number().gt(0).nullish(),
  /** llama.cpp / Ollama spelling of repetition_penalty. */
  repeat_penalty: z.number().gt(0).nullish(),
  repeat_last_n: z.number().int().min(-1).nullish(),
  presence_penalty: z.number().min(-2).max(2).nullish(),
  frequency_penalty: z.number().min(-2).max(2).nullish(),
  /** Negative seeds mean "random", as llama.cpp's -1. */
  seed: z.number().int().nullish(),
  max_tokens: positiveInt.nullish(),
  stop: stopSchema.nullish(),
  n: z.number().int().min(1).max(64).nullish(),
  ignore_eos: z.boolean().nullish(),
  /** Token id (as a string key, OpenAI's shape) → bias added to its logit, -100 bans, 100 forces. */
  logit_bias: z.record(z.string().regex(/^\d+$/, "keys must be token ids"), z.number().min(-100).max(100)).nullish(),
  /** llama-server's per-request LoRA adapters: `[{ id, scale }]` (ids from GET /lora-adapters); adapters left out are off. */
  lora: z
    .array(z.object({ id: z.number().int().min(0), scale: z.number() }))
    .max(256)
    .nullish(),
  /** llama-server's per-request speculative decoding, dotted keys as it spells them (ts/service/speculation.ts). */
  "speculative.type": z.enum(["ngram-simple", "draft-simple", "none"]).nullish(),
  "speculative.n_max": z.number().int().min(0).max(64).nullish(),
  "speculative.n_min": z.number().int().min(0).max(64).nullish(),
  "speculative.ngram_size_n": z.number().int().min(1).max(64).nullish(),
  /** The draft model's least probability for a guess (llama-server's `speculative.p_min`). */
  "speculative.p_min": z.number().min(0).max(1).nullish(),
  /** ngram-simple's own name for the draft length (`speculative.n_max` is the draft model's). */
  "speculative.ngram_size_m": z.number().int().min(0).max(64).nullish(),
  stream: z.boolean().nullish(),
  stream_options: z.looseObject({ include_usage: z.boolean().nullish() }).nullish(),
};

/** The sampling part of a parsed request, as the request mapper reads it. */
export type SamplingRequest = {
  [K in keyof typeof samplingFields]?: z.infer<(typeof samplingFields)[K]>;
};
