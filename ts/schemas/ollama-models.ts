/**
 * Bodies of Ollama's model-management routes (`/api/create`, `/api/pull`, `/api/delete`,
 * `/api/copy`). Old clients send `name` where new ones send `model` (ollama-js still sends
 * `name` to pull and delete), so both are read. Unknown keys are stripped.
 */
import { z } from "zod";

const named = {
  model: z.string().nullish(),
  /** Ollama's older spelling of `model`. */
  name: z.string().nullish(),
};

const message = z.looseObject({ role: z.enum(["system", "user", "assistant"]), content: z.string() });

export const createRequest = z.object({
  ...named,
  /** A whole Modelfile (Ollama's older API); the JSON fields below override its parts. */
  modelfile: z.string().nullish(),
  from: z.string().nullish(),
  template: z.string().nullish(),
  system: z.string().nullish(),
  parameters: z.record(z.string(), z.unknown()).nullish(),
  messages: z.array(message).nullish(),
  license: z.union([z.string(), z.array(z.string())]).nullish(),
  /** {file name: digest} of blobs uploaded through /api/blobs (what `ollama create` sends for a local GGUF). */
  files: z.record(z.string(), z.string()).nullish(),
  /** LoRA adapters and re-quantization: refused with a reason. */
  adapters: z.record(z.string(), z.string()).nullish(),
  quantize: z.string().nullish(),
  stream: z.boolean().nullish(),
});
export type CreateRequest = z.infer<typeof createRequest>;

export const pullRequest = z.object({ ...named, insecure: z.boolean().nullish(), stream: z.boolean().nullish() });
export type PullRequest = z.infer<typeof pullRequest>;

export const deleteRequest = z.object(named);

export const copyRequest = z.object({ source: z.string().min(1), destination: z.string().min(1) });
