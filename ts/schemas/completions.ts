/** POST /v1/completions body (the legacy raw-prompt endpoint; no chat template). */
import { z } from "zod";
import { samplingFields } from "./sampling.ts";

const tokenIds = z.array(z.number().int().min(0)).min(1);

/** A string, several strings, token ids, or several token-id arrays — as OpenAI accepts. */
const promptSchema = z.union([z.string(), z.array(z.string()).min(1), tokenIds, z.array(tokenIds).min(1)]);

export const completionRequest = z.object({
  ...samplingFields,
  prompt: promptSchema,
  /** OpenAI's completions logprobs is the number of alternatives, 0..5. */
  logprobs: z.number().int().min(0).max(5).nullish(),
});
