/**
 * POST /v1/responses body (OpenAI Responses, stateless). Unknown keys are stripped, as on the
 * other /v1 routes; unknown input item types, content part types and tool types are 400s that
 * name the field, since dropping an item would silently change the conversation.
 */
import { z } from "zod";
import { samplingFields } from "./sampling.ts";

const inputText = z.looseObject({ type: z.literal("input_text"), text: z.string() });
/** Past assistant output sent back as input. */
const outputText = z.looseObject({ type: z.literal("output_text"), text: z.string() });
const refusal = z.looseObject({ type: z.literal("refusal"), refusal: z.string() });
const inputImage = z.looseObject({
  type: z.literal("input_image"),
  image_url: z.string().nullish(),
  file_id: z.string().nullish(),
  detail: z.string().nullish(),
});
const inputFile = z.looseObject({ type: z.literal("input_file") });

const contentPart = z.discriminatedUnion("type", [inputText, outputText, refusal, inputImage, inputFile]);
export type ResponsesContentPart = z.infer<typeof contentPart>;

const message = z.looseObject({
  type: z.literal("message"),
  role: z.enum(["user", "assistant", "system", "developer"]),
  content: z.union([z.string(), z.array(contentPart)]),
});

const functionCall = z.looseObject({
  type: z.literal("function_call"),
  call_id: z.string().min(1),
  name: z.string().min(1),
  arguments: z.string(),
});

const functionCallOutput = z.looseObject({
  type: z.literal("function_call_output"),
  call_id: z.string().min(1),
  output: z.union([z.string(), z.array(z.discriminatedUnion("type", [inputText, inputImage, inputFile]))]),
});

/** Clients resend their past reasoning items; a stateless server reads nothing from them. */
const reasoning = z.looseObject({ type: z.literal("reasoning") });

/** EasyInputMessage may leave `type` out: a role alone makes it a message. */
const inputItem = z.preprocess(
  (item) => (item && typeof item === "object" && !("type" in item) && "role" in item ? { ...item, type: "message" } : item),
  z.discriminatedUnion("type", [message, functionCall, functionCallOutput, reasoning]),
);
export type ResponsesInputItem = z.infer<typeof inputItem>;

/** Responses' function tools are flat: `{type, name, parameters, strict}`, no `function` wrapper. */
const functionTool = z.looseObject({
  type: z.literal("function"),
  name: z.string().min(1),
  description: z.string().nullish(),
  parameters: z.record(z.string(), z.unknown()).nullish(),
  strict: z.boolean().nullish(),
});
export type ResponsesTool = z.infer<typeof functionTool>;

const toolChoice = z.union([z.enum(["none", "auto", "required"]), z.looseObject({ type: z.literal("function"), name: z.string().min(1) })]);
export type ResponsesToolChoice = z.infer<typeof toolChoice>;

const textFormat = z.discriminatedUnion("type", [
  z.looseObject({ type: z.literal("text") }),
  z.looseObject({ type: z.literal("json_object") }),
  z.looseObject({
    type: z.literal("json_schema"),
    name: z.string().nullish(),
    description: z.string().nullish(),
    schema: z.record(z.string(), z.unknown()),
    strict: z.boolean().nullish(),
  }),
]);
export type ResponsesTextFormat = z.infer<typeof textFormat>;

// The Responses API has its own names for the length (max_output_tokens) and no n or
// stream_options; the other sampling fields are the ones Wick takes everywhere.
const { max_tokens: _maxTokens, n: _n, stream_options: _streamOptions, ...sampling } = samplingFields;

export const responsesRequest = z.object({
  ...sampling,
  input: z.union([z.string(), z.array(inputItem).min(1)]),
  instructions: z.string().nullish(),
  max_output_tokens: z.number().int().min(1).nullish(),
  tools: z.array(functionTool).nullish(),
  tool_choice: toolChoice.nullish(),
  parallel_tool_calls: z.boolean().nullish(),
  text: z.looseObject({ format: textFormat.nullish() }).nullish(),
  reasoning: z.looseObject({ effort: z.enum(["none", "minimal", "low", "medium", "high", "xhigh"]).nullish() }).nullish(),
  /** Accepted either way; nothing is kept (the route says so by answering `store: false`). */
  store: z.boolean().nullish(),
  /** Always a 400: a stateless server has no earlier response to continue. */
  previous_response_id: z.string().nullish(),
  metadata: z.record(z.string(), z.string()).nullish(),
  user: z.string().nullish(),
});
export type ResponsesRequest = z.infer<typeof responsesRequest>;
