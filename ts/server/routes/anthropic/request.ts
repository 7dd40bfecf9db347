/**
 * An Anthropic Messages body → the chat request every wing plans with (`planChat`): `system`
 * first, each user turn's `tool_result` blocks as `tool` messages (before the rest of the turn,
 * as Anthropic orders them), `tool_use` blocks as the assistant's `tool_calls`, images as
 * `image_url` parts. Earlier thinking is dropped: templates do not render past reasoning.
 *
 * The service blames its errors on the chat request's fields (`messages[3].content[0]`,
 * `tools[0].function.parameters`); `anthropicParams` maps them back to the body's own.
 */
import type { ChatMessage, ContentPart, ToolChoice } from "../../../schemas/chat.ts";
import type { AnthropicMessage, AnthropicTool, AnthropicToolChoice, AssistantBlock, CountTokensRequest, ImageBlock, UserBlock } from "../../../schemas/anthropic.ts";
import { RequestError } from "../../../service/errors.ts";
import type { ThinkRequest } from "../../../service/reasoning-plan.ts";

/** The tool part of a chat request, as `planChat` reads it. */
export interface ChatTools {
  tools?: { type: "function"; function: { name: string; description?: string; parameters: Record<string, unknown> } }[];
  tool_choice?: ToolChoice;
  parallel_tool_calls?: boolean;
}

export interface ChatRequest extends ChatTools {
  messages: ChatMessage[];
  /** Chat path (`messages[3]`, `messages[3].content[0]`) → the body's path it came from. */
  origins: Map<string, string>;
}

export function toChatRequest(req: CountTokensRequest): ChatRequest {
  const out: ChatRequest = { messages: [], origins: new Map(), ...chatTools(req.tools, req.tool_choice) };
  const push = (m: ChatMessage, from: string, parts: string[] = []) => {
    const k = out.messages.push(m) - 1;
    out.origins.set(`messages[${k}]`, from);
    parts.forEach((p, j) => out.origins.set(`messages[${k}].content[${j}]`, p));
  };
  if (req.system != null) push({ role: "system", content: systemText(req.system) }, "system");
  checkToolResults(req.messages);
  req.messages.forEach((m, i) => {
    const from = `messages[${i}]`;
    if (m.role === "system") push({ role: "system", content: systemText(m.content) }, from);
    else if (typeof m.content === "string") push({ role: m.role, content: m.content }, from);
    else if (m.role === "assistant") push(assistantMessage(m.content), from);
    else userMessages(m.content, from, push);
  });
  return out;
}

const systemText = (s: string | { text: string }[]) => (typeof s === "string" ? s : s.map((b) => b.text).join("\n"));

function assistantMessage(blocks: AssistantBlock[]): ChatMessage {
  const text = blocks.flatMap((b) => (b.type === "text" ? [b.text] : [])).join("");
  const calls = blocks.flatMap((b) => (b.type === "tool_use" ? [{ id: b.id, type: "function" as const, function: { name: b.name, arguments: JSON.stringify(b.input) } }] : []));
  return { role: "assistant", content: text, ...(calls.length ? { tool_calls: calls } : {}) };
}

type Push = (m: ChatMessage, from: string, parts?: string[]) => void;

/** A user turn: its tool results first, one `tool` message each, then its text and images. */
function userMessages(blocks: UserBlock[], from: string, push: Push): void {
  const rest: ContentPart[] = [];
  const restFrom: string[] = [];
  blocks.forEach((b, j) => {
    const at = `${from}.content[${j}]`;
    if (b.type === "tool_result") {
      const content = b.content == null ? "" : typeof b.content === "string" ? b.content : b.content.map(contentPart);
      const parts = typeof content === "string" ? [] : content.map((_, n) => `${at}.content[${n}]`);
      // Templates have no notion of a failed call: the model reads it in the result's text.
      const marked = b.is_error ? errorResult(content) : content;
      push({ role: "tool", tool_call_id: b.tool_use_id, content: marked }, at, parts);
      return;
    }
    rest.push(contentPart(b));
    restFrom.push(at);
  });
  if (rest.length) push({ role: "user", content: rest }, from, restFrom);
}

function errorResult(content: string | ContentPart[]): string | ContentPart[] {
  if (typeof content === "string") return `Error: ${content}`;
  return [{ type: "text", text: "Error:" }, ...content];
}

function contentPart(b: { type: "text"; text: string } | ImageBlock): ContentPart {
  if (b.type === "text") return { type: "text", text: b.text };
  const url = b.source.type === "url" ? b.source.url : `data:${b.source.media_type};base64,${b.source.data}`;
  return { type: "image_url", image_url: { url } };
}

/** Each `tool_result` answers a `tool_use` of an earlier assistant turn (Anthropic's rule). */
function checkToolResults(messages: AnthropicMessage[]): void {
  const ids = new Set<string>();
  messages.forEach((m, i) => {
    if (typeof m.content === "string") return;
    m.content.forEach((b, j) => {
      if (b.type === "tool_use") ids.add(b.id);
      if (b.type !== "tool_result" || ids.has(b.tool_use_id)) return;
      const param = `messages[${i}].content[${j}].tool_use_id`;
      throw new RequestError("INVALID_REQUEST", `${param}: tool_result block answers '${b.tool_use_id}', but no earlier tool_use block has that id.`, param);
    });
  });
}

function chatTools(tools: AnthropicTool[] | null | undefined, choice: AnthropicToolChoice | null | undefined): ChatTools {
  const out: ChatTools = {};
  if (tools?.length) {
    // The schema checked that every tool is a custom one, with an input_schema.
    out.tools = tools.map((t) => ({ type: "function", function: { name: t.name, ...(t.description != null ? { description: t.description } : {}), parameters: t.input_schema! } }));
  }
  if (!choice) return out;
  if (choice.type === "none") out.tool_choice = "none";
  else {
    out.tool_choice = choice.type === "auto" ? "auto" : choice.type === "any" ? "required" : { type: "function", function: { name: choice.name } };
    if (choice.disable_parallel_tool_use) out.parallel_tool_calls = false;
  }
  return out;
}

/**
 * Anthropic models think only when asked: without `thinking` (or with it disabled) the template
 * renders with thinking off, where it has such a switch. `budget_tokens` ends the thinking block
 * after so many tokens (its closing marker is forced).
 */
export function thinkOf({ thinking, output_config }: CountTokensRequest): ThinkRequest {
  if (!thinking || thinking.type === "disabled") return { enabled: false };
  const effort = output_config?.effort;
  const budget = thinking.type === "enabled" ? thinking.budget_tokens : undefined;
  return { enabled: true, ...(effort ? { effort } : {}), ...(budget !== undefined ? { budget } : {}) };
}

/** A service error, its field and its sentence in the body's own paths. */
export function anthropicParams(err: unknown, origins: Map<string, string>): unknown {
  if (!(err instanceof RequestError) || err.param == null) return err;
  const rename = (s: string) =>
    s
      .replace(/messages\[\d+\](?:\.content\[\d+\])?/g, (p) => origins.get(p) ?? origins.get(p.replace(/\.content\[\d+\]$/, "")) ?? p)
      .replace(/tools\[(\d+)\]\.function\.parameters/g, "tools[$1].input_schema")
      .replace(/tools\[(\d+)\]\.function\.name/g, "tools[$1].name")
      .replace(/response_format\.json_schema\.schema/g, "output_config.format.schema");
  return new RequestError(err.code, rename(err.message), rename(err.param), err.detail);
}
