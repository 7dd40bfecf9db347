/**
 * Bodies of Ollama's native routes (`/api/chat`, `/api/generate`). Field names and types as
 * Ollama documents them (its API docs for /api/chat and /api/generate): `options` with Ollama's keys, tool
 * call `arguments` as objects, `format` "json" or a schema, images as base64. Unknown keys are
 * stripped, as Ollama ignores them.
 */
import { z } from "zod";
import { keepAliveMs } from "../service/keep-alive.ts";

const int = z.number().int();

/** Ollama's `options`; every key typed, so `"temperature": "hot"` is a 400 naming it. */
export const ollamaOptions = z.looseObject({
  num_keep: int.nullish(),
  seed: int.nullish(),
  num_predict: int.min(-2).nullish(),
  top_k: int.nullish(),
  top_p: z.number().min(0).max(1).nullish(),
  min_p: z.number().min(0).max(1).nullish(),
  typical_p: z.number().nullish(),
  repeat_last_n: int.min(-1).nullish(),
  temperature: z.number().min(0).nullish(),
  repeat_penalty: z.number().gt(0).nullish(),
  presence_penalty: z.number().nullish(),
  frequency_penalty: z.number().nullish(),
  penalize_newline: z.boolean().nullish(),
  stop: z.array(z.string()).nullish(),
  numa: z.boolean().nullish(),
  num_ctx: int.min(1).nullish(),
  num_batch: int.nullish(),
  num_gpu: int.nullish(),
  main_gpu: int.nullish(),
  use_mmap: z.boolean().nullish(),
  num_thread: int.nullish(),
});
export type OllamaOptions = z.infer<typeof ollamaOptions>;

/** `"json"`, a JSON schema, or `""` / absent for free text. */
const format = z.union([z.literal("json"), z.literal(""), z.record(z.string(), z.unknown())]);
export type OllamaFormat = z.infer<typeof format>;

/**
 * A duration ("5m", "1h30m", "300ms"), seconds as a number, negative = forever, 0 = unload now;
 * converted here, once, to milliseconds (Infinity = forever).
 */
const keepAlive = z.union([z.string(), z.number()]).transform((value, ctx) => {
  try {
    return keepAliveMs(value);
  } catch (err) {
    // Its own sentence, as the service writes it (validate.ts reports a verbatim issue as is).
    ctx.issues.push({ code: "custom", message: (err as Error).message, input: value, params: { verbatim: true } });
    return z.NEVER;
  }
});

const toolCall = z.looseObject({
  id: z.string().nullish(),
  function: z.looseObject({ index: int.nullish(), name: z.string().min(1), arguments: z.record(z.string(), z.unknown()).nullish() }),
});

const message = z.looseObject({
  role: z.enum(["system", "user", "assistant", "tool"]),
  content: z.string().nullish(),
  images: z.array(z.string()).nullish(),
  tool_calls: z.array(toolCall).nullish(),
  /** The tool a `tool` message answers (Ollama pairs results by name). */
  tool_name: z.string().nullish(),
  tool_call_id: z.string().nullish(),
  thinking: z.string().nullish(),
});
export type OllamaMessage = z.infer<typeof message>;

const tool = z.looseObject({
  type: z.literal("function"),
  function: z.looseObject({ name: z.string().min(1), description: z.string().nullish(), parameters: z.record(z.string(), z.unknown()).nullish() }),
});

const common = {
  model: z.string().min(1),
  format: format.nullish(),
  options: ollamaOptions.nullish(),
  stream: z.boolean().nullish(),
  keep_alive: keepAlive.nullish(),
  /** Thinking on or off, or an effort (which thinks); the thinking comes back in `thinking`. */
  think: z.union([z.boolean(), z.enum(["low", "medium", "high", "max"])]).nullish(),
  /** Log probabilities of the generated tokens, and of the N most likely at each position (0–20, as Ollama). */
  logprobs: z.boolean().nullish(),
  top_logprobs: int.min(0).max(20).nullish(),
};

export const ollamaChatRequest = z.object({
  ...common,
  messages: z.array(message).nullish(),
  tools: z.array(tool).nullish(),
});
export type OllamaChatRequest = z.infer<typeof ollamaChatRequest>;

export const ollamaGenerateRequest = z.object({
  ...common,
  prompt: z.string().nullish(),
  suffix: z.string().nullish(),
  images: z.array(z.string()).nullish(),
  system: z.string().nullish(),
  template: z.string().nullish(),
  raw: z.boolean().nullish(),
  /** Token ids of an earlier exchange (deprecated by Ollama, still sent by old clients). */
  context: z.array(int.min(0)).nullish(),
});
export type OllamaGenerateRequest = z.infer<typeof ollamaGenerateRequest>;
