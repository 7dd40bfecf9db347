/**
 * POST /v1/messages and /v1/messages/count_tokens bodies (Anthropic Messages), as the
 * `@anthropic-ai/sdk` types them. Content blocks are discriminated by `type` and by the role
 * that may send them, so a block Wick does not take (a document, a server tool's result, a
 * tool_result in an assistant turn) is a 400 naming `messages[i].content[j].type`. Unknown
 * keys (`cache_control`, `citations`, `metadata`, …) are stripped.
 */
import { z } from "zod";

const textBlock = z.looseObject({ type: z.literal("text"), text: z.string() });

const imageSource = z.discriminatedUnion("type", [
  z.looseObject({ type: z.literal("base64"), media_type: z.string().min(1), data: z.string().min(1) }),
  z.looseObject({ type: z.literal("url"), url: z.string().min(1) }),
]);
const imageBlock = z.looseObject({ type: z.literal("image"), source: imageSource });

const toolResultBlock = z.looseObject({
  type: z.literal("tool_result"),
  tool_use_id: z.string().min(1),
  content: z.union([z.string(), z.array(z.discriminatedUnion("type", [textBlock, imageBlock]))]).nullish(),
  is_error: z.boolean().nullish(),
});

const toolUseBlock = z.looseObject({ type: z.literal("tool_use"), id: z.string().min(1), name: z.string().min(1), input: z.record(z.string(), z.unknown()) });
// The model's earlier thinking: accepted, never rendered (templates drop past reasoning too).
const thinkingBlock = z.looseObject({ type: z.literal("thinking"), thinking: z.string() });
const redactedThinkingBlock = z.looseObject({ type: z.literal("redacted_thinking") });

const userBlock = z.discriminatedUnion("type", [textBlock, imageBlock, toolResultBlock]);
const assistantBlock = z.discriminatedUnion("type", [textBlock, toolUseBlock, thinkingBlock, redactedThinkingBlock]);
export type UserBlock = z.infer<typeof userBlock>;
export type AssistantBlock = z.infer<typeof assistantBlock>;
export type ImageBlock = z.infer<typeof imageBlock>;

const systemContent = z.union([z.string(), z.array(textBlock)]);

const message = z.discriminatedUnion("role", [
  z.looseObject({ role: z.literal("user"), content: z.union([z.string(), z.array(userBlock)]) }),
  z.looseObject({ role: z.literal("assistant"), content: z.union([z.string(), z.array(assistantBlock)]) }),
  // Newer SDKs let a system turn sit among the messages.
  z.looseObject({ role: z.literal("system"), content: systemContent }),
]);
export type AnthropicMessage = z.infer<typeof message>;

/**
 * A custom tool. Anthropic's server tools (`web_search_20250305`, `bash_20250124`, …) run on
 * Anthropic's side and have no `input_schema`: named as such rather than as a missing field.
 */
const tool = z
  .looseObject({
    type: z.string().nullish(),
    name: z.string().min(1),
    description: z.string().nullish(),
    input_schema: z.record(z.string(), z.unknown()).nullish(),
  })
  .superRefine((t, ctx) => {
    if (t.type != null && t.type !== "custom") {
      const message = `Tool '${t.name}' is an Anthropic server tool (type '${t.type}'); Wick runs only custom tools, described by an input_schema.`;
      ctx.addIssue({ code: "custom", path: ["type"], message, input: t.type, params: { verbatim: true } });
    } else if (t.input_schema == null) {
      ctx.addIssue({ code: "invalid_type", expected: "object", path: ["input_schema"], input: undefined, message: "required" });
    }
  });
export type AnthropicTool = z.infer<typeof tool>;

const parallel = { disable_parallel_tool_use: z.boolean().nullish() };
const toolChoice = z.discriminatedUnion("type", [
  z.looseObject({ type: z.literal("auto"), ...parallel }),
  z.looseObject({ type: z.literal("any"), ...parallel }),
  z.looseObject({ type: z.literal("tool"), name: z.string().min(1), ...parallel }),
  z.looseObject({ type: z.literal("none") }),
]);
export type AnthropicToolChoice = z.infer<typeof toolChoice>;

const thinking = z.discriminatedUnion("type", [
  z.looseObject({ type: z.literal("enabled"), budget_tokens: z.number().int().min(1) }),
  z.looseObject({ type: z.literal("disabled") }),
  z.looseObject({ type: z.literal("adaptive") }),
]);
export type AnthropicThinking = z.infer<typeof thinking>;

/** `format` holds the text to a JSON schema; `effort` reaches templates that read one (with thinking on). */
const outputConfig = z.looseObject({
  effort: z.string().nullish(),
  format: z.looseObject({ type: z.literal("json_schema"), schema: z.record(z.string(), z.unknown()) }).nullish(),
});

/** What the prompt is made of: the whole of a count_tokens body. */
const promptFields = {
  /** Any name is accepted when one model is served (llama-server's rule). */
  model: z.string().nullish(),
  system: systemContent.nullish(),
  messages: z.array(message).min(1),
  tools: z.array(tool).nullish(),
  tool_choice: toolChoice.nullish(),
  thinking: thinking.nullish(),
  output_config: outputConfig.nullish(),
};

export const countTokensRequest = z.object(promptFields);
export type CountTokensRequest = z.infer<typeof countTokensRequest>;

export const messagesRequest = z.object({
  ...promptFields,
  /** Required, as Anthropic requires it. */
  max_tokens: z.number().int().min(1),
  stop_sequences: z.array(z.string()).nullish(),
  temperature: z.number().min(0).nullish(),
  top_p: z.number().min(0).max(1).nullish(),
  /** 0 and -1 mean off, as on the OpenAI routes. */
  top_k: z.number().int().min(-1).nullish(),
  stream: z.boolean().nullish(),
});
export type MessagesRequest = z.infer<typeof messagesRequest>;
