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

/** "none" | "auto" | "required", or one named function. */
const toolChoice = z.union([z.enum(["none", "auto", "required"]), z.looseObject({ type: z.literal("function"), function: z.looseObject({ name: z.string().min(1) }) })]);
export type ToolChoice = z.infer<typeof toolChoice>;

/** OpenAI's structured output: free text, any JSON object, or JSON valid against a schema. */
const responseFormat = z.discriminatedUnion("type", [
  z.looseObject({ type: z.literal("text") }),
  z.looseObject({ type: z.literal("json_object") }),
  z.looseObject({
    type: z.literal("json_schema"),
    json_schema: z.looseObject({
      name: z.string().nullish(),
      description: z.string().nullish(),
      schema: z.record(z.string(), z.unknown()).nullish(),
      strict: z.boolean().nullish(),
    }),
  }),
]);
export type ResponseFormat = z.infer<typeof responseFormat>;

export const chatCompletionRequest = z.object({
  ...samplingFields,
  messages: z.array(chatMessage).min(1),
  /** The newer OpenAI name; wins over max_tokens when both are set. */
  max_completion_tokens: z.number().int().min(1).nullish(),
  logprobs: z.boolean().nullish(),
  top_logprobs: z.number().int().min(0).max(20).nullish(),
  /** Rendered by the chat template; calls in the output are parsed back (ts/service/tools). */
  tools: z.array(tool).nullish(),
  tool_choice: toolChoice.nullish(),
  parallel_tool_calls: z.boolean().nullish(),
  response_format: responseFormat.nullish(),
  /** "none" renders the template with thinking off; the others reach templates that read `reasoning_effort`. */
  reasoning_effort: z.enum(["none", "minimal", "low", "medium", "high", "xhigh"]).nullish(),
  /** vLLM's and llama-server's way to turn thinking off (`{"enable_thinking": false}`); only that key is read. */
  chat_template_kwargs: z.looseObject({ enable_thinking: z.boolean().nullish() }).nullish(),
});
