/**
 * A Responses request → the chat request every wing plans with (`planChat`): `instructions` and
 * the input items become chat messages, flat function tools the `{type, function}` shape,
 * `text.format` the output grammar. Errors the chat planner raises name chat fields
 * (`messages[2].content[0]`, `tools[0].function.parameters`); `inputNames` turns them back into
 * the fields this request has (`input[3].content[0]`, `tools[0].parameters`).
 */
import type { ChatMessage, ContentPart } from "../../../schemas/chat.ts";
import type { ResponsesContentPart, ResponsesInputItem, ResponsesRequest } from "../../../schemas/responses.ts";
import { RequestError } from "../../../service/errors.ts";
import { responseFormatGrammar } from "../../../service/response-format.ts";
import type { Grammar, ToolRequest } from "../../../service/tools/request.ts";

/** Where chat message i came from in the request. */
interface Origin {
  /** The item: `input[3]`, `input` or `instructions`. */
  item: string;
  /** Its content parts: `input[3].content`, or `input[3].output` for a call's output. */
  content: string;
  /** Each of its tool calls' item (consecutive function_call items make one assistant turn). */
  calls: string[];
}

export interface ChatRequest extends ToolRequest {
  messages: ChatMessage[];
  format?: Grammar;
  origins: Origin[];
}

type ToolCall = NonNullable<Extract<ChatMessage, { role: "assistant" }>["tool_calls"]>[number];

export function chatRequest(req: ResponsesRequest): ChatRequest {
  const messages: ChatMessage[] = [];
  const origins: Origin[] = [];
  const add = (m: ChatMessage, item: string, content = `${item}.content`) => {
    messages.push(m);
    origins.push({ item, content, calls: [] });
  };
  if (req.instructions) add({ role: "system", content: req.instructions }, "instructions", "instructions");
  if (typeof req.input === "string") add({ role: "user", content: req.input }, "input");
  else {
    const callIds = new Set<string>();
    req.input.forEach((it, k) => addItem(it, `input[${k}]`, messages, origins, add, callIds));
  }
  return {
    messages,
    origins,
    tools: req.tools?.map((t) => ({ type: "function" as const, function: { name: t.name, description: t.description, parameters: t.parameters } })),
    tool_choice: typeof req.tool_choice === "object" && req.tool_choice ? { type: "function", function: { name: req.tool_choice.name } } : req.tool_choice,
    parallel_tool_calls: req.parallel_tool_calls,
    format: inputNames([], () => formatGrammar(req.text?.format)),
  };
}

function addItem(it: ResponsesInputItem, item: string, messages: ChatMessage[], origins: Origin[], add: (m: ChatMessage, item: string, content?: string) => void, callIds: Set<string>): void {
  switch (it.type) {
    case "message":
      add({ role: it.role, content: typeof it.content === "string" ? it.content : it.content.map((p, j) => chatPart(p, `${item}.content[${j}]`)) }, item);
      return;
    case "function_call": {
      callIds.add(it.call_id);
      const call: ToolCall = { id: it.call_id, type: "function", function: { name: it.name, arguments: it.arguments } };
      // Calls after an assistant turn belong to it: templates render one turn with all its calls.
      const last = messages.at(-1);
      if (last?.role === "assistant") (last.tool_calls ??= []).push(call);
      else add({ role: "assistant", content: null, tool_calls: [call] }, item);
      origins.at(-1)!.calls.push(item);
      return;
    }
    case "function_call_output":
      if (!callIds.has(it.call_id)) {
        throw new RequestError("INVALID_REQUEST", `No function_call item with call_id '${it.call_id}' comes before this output.`, `${item}.call_id`);
      }
      add({ role: "tool", tool_call_id: it.call_id, content: typeof it.output === "string" ? it.output : it.output.map((p, j) => chatPart(p, `${item}.output[${j}]`)) }, item, `${item}.output`);
      return;
    case "reasoning":
      return;
  }
}

function chatPart(p: ResponsesContentPart, param: string): ContentPart {
  switch (p.type) {
    case "input_text":
    case "output_text":
      return { type: "text", text: p.text };
    case "refusal":
      return { type: "text", text: p.refusal };
    case "input_image":
      if (!p.image_url) {
        throw new RequestError("INVALID_REQUEST", "Wick has no Files API: send the image as image_url (a data: URL or an http(s) URL).", `${param}.image_url`, "missing_required_parameter");
      }
      return { type: "image_url", image_url: { url: p.image_url, detail: p.detail } };
    case "input_file":
      throw new RequestError("INVALID_REQUEST", "File inputs are not supported: send text or images.", param, "unsupported_value");
  }
}

function formatGrammar(format: NonNullable<ResponsesRequest["text"]>["format"]): Grammar | undefined {
  if (format?.type !== "json_schema") return responseFormatGrammar(format);
  const { name, description, schema, strict } = format;
  return responseFormatGrammar({ type: "json_schema", json_schema: { name, description, schema, strict } });
}

/** Runs `f` (the chat planner, or a part of it) and renames the chat fields its errors blame. */
export function inputNames<T>(origins: Origin[], f: () => T): T {
  try {
    return f();
  } catch (err) {
    throw renamed(err, origins);
  }
}

/** The async twin of `inputNames`. */
export async function inputNamesAsync<T>(origins: Origin[], f: () => Promise<T>): Promise<T> {
  try {
    return await f();
  } catch (err) {
    throw renamed(err, origins);
  }
}

const CHAT_FIELDS = /messages\[(\d+)\]\.tool_calls\[(\d+)\]\.function|messages\[(\d+)\]\.content|messages\[(\d+)\]|tools\[(\d+)\]\.function\.|response_format\.json_schema\./g;

function renamed(err: unknown, origins: Origin[]): unknown {
  if (!(err instanceof RequestError) || !err.param) return err;
  const rename = (s: string) =>
    s.replace(CHAT_FIELDS, (whole, call: string, j: string, content: string, msg: string, tool: string) => {
      if (call !== undefined) return origins[+call]?.calls[+j] ?? whole;
      if (content !== undefined) return origins[+content]?.content ?? whole;
      if (msg !== undefined) return origins[+msg]?.item ?? whole;
      if (tool !== undefined) return `tools[${tool}].`;
      return "text.format.";
    });
  return new RequestError(err.code, rename(err.message), rename(err.param), err.detail);
}
