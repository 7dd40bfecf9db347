/**
 * POST /v1/chat/completions body. Unknown keys (OpenAI clients send many) are stripped, not
 * rejected. Messages are discriminated by role so that each role's required fields are
 * checked with a path the error names (e.g. `messages[2].content`).
 */
import { z } from "zod";
import { samplingFields } from "./sampling.ts";

const textPart = z.looseObject({ type: z.literal("text"), text: z.string() });
const imagePart = z.looseObject({
  type: z.literal("image_url"),
  image_url: z.union([z.string(), z.looseObject({ url: z.string(), detail: z.string().nullish() })]),
});
const contentPart = z.discriminatedUnion("type", [textPart, imagePart]);
export type ContentPart = z.infer<typeof contentPart>;

const content = z.union([z.string(), z.array(contentPart)]);

const toolCall = z.looseObject({
  id: z.string().nullish(),
  type: z.literal("function").nullish(),
  function: z.looseObject({ name: z.string(), arguments: z.string() }),
});

const chatMessage = z.discriminatedUnion("role", [
  z.looseObject({ role: z.literal("system"), content, name: z.string().nullish() }),
  // OpenAI's newer name for system; templates only know "system".
  z.looseObject({ role: z.literal("developer"), content, name: z.string().nullish() }),
  z.looseObject({ role: z.literal("user"), content, name: z.string().nullish() }),
  z.looseObject({
    role: z.literal("assistant"),
    content: content.nullish(),
    name: z.string().nullish(),
    tool_calls: z.array(toolCall).nullish(),
  }),
  z.looseObject({ role: z.literal("tool"), content, tool_call_id: z.string().nullish() }),
]);
export type ChatMessage = z.infer<typeof chatMessage>;

const tool = z.looseObject({
  type: z.literal("function"),
  function: z.looseObject({
    name: z.string().min(1),
    description: z.string().nullish(),
    parameters: z.record(z.string(), z.unknown()).nullish(),
  }),
});

export const chatCompletionRequest = z.object({
  ...samplingFields,
  messages: z.array(chatMessage).min(1),
  /** The newer OpenAI name; wins over max_tokens when both are set. */
  max_completion_tokens: z.number().int().min(1).nullish(),
  logprobs: z.boolean().nullish(),
  top_logprobs: z.number().int().min(0).max(20).nullish(),
  /** Passed to the chat template so tool-aware templates render them; parsing calls is separate. */
  tools: z.array(tool).nullish(),
});
