/**
 * Request → prompt token ids. Chat: messages are normalised for templates, rendered, then
 * tokenised with special-token parsing and no automatic specials, and BOS is prepended only
 * when the vocabulary wants one and the template did not already write it — exactly one BOS,
 * as llama.cpp does. Completions: the raw prompt, same BOS rule, no template.
 */
import type { ChatMessage, ContentPart } from "../schemas/chat.ts";
import type { TemplateMessage } from "./chat-template.ts";
import { RequestError } from "./errors.ts";
import type { ServedModel } from "./registry.ts";
import type { ToolParser } from "./tools/index.ts";

export function chatPromptTokens(model: ServedModel, messages: ChatMessage[], tools?: unknown[] | null): number[] {
  // A template that never reads `tool_calls` (LFM2's) would drop past calls; write them into the
  // content the way the model itself writes them, as LFM2.5's template does.
  const inlineCalls = model.template.source.includes("tool_calls") ? null : model.toolParser;
  const text = model.template.render(
    messages.map((m, i) => toTemplateMessage(m, i, inlineCalls)),
    { addGenerationPrompt: true, tools: tools ?? undefined },
  );
  return withSingleBos(model, model.engine.tokenize(text, { addSpecial: false, parseSpecial: true }));
}

/** One token array per prompt: a string, strings, token ids, or arrays of token ids. */
export function completionPromptTokens(model: ServedModel, prompt: string | string[] | number[] | number[][]): number[][] {
  const prompts: (string | number[])[] =
    typeof prompt === "string" ? [prompt] : typeof prompt[0] === "number" ? [prompt as number[]] : (prompt as (string | number[])[]);
  return prompts.map((p, i) => {
    // Token ids are taken as given: a client that sends ids has already decided about BOS.
    if (typeof p !== "string") return p;
    const ids = withSingleBos(model, model.engine.tokenize(p, { addSpecial: false, parseSpecial: true }));
    if (ids.length === 0) throw new RequestError("INVALID_REQUEST", "The prompt is empty.", prompts.length > 1 ? `prompt[${i}]` : "prompt", "empty_prompt");
    return ids;
  });
}

function withSingleBos(model: ServedModel, ids: number[]): number[] {
  const bos = model.info.bosToken;
  if (!model.info.addBos || bos === undefined || ids[0] === bos) return ids;
  return [bos, ...ids];
}

function toTemplateMessage(m: ChatMessage, i: number, inlineCalls: ToolParser | null): TemplateMessage {
  // Templates only know system/user/assistant/tool; OpenAI's "developer" is a system message.
  const role = m.role === "developer" ? "system" : m.role;
  const out: TemplateMessage = { role, content: contentText(m.content, i) };
  const name = (m as { name?: unknown }).name;
  if (typeof name === "string" && name) out.name = name;
  if (m.role === "tool" && m.tool_call_id) out.tool_call_id = m.tool_call_id;
  if (m.role === "assistant" && m.tool_calls?.length) {
    out.tool_calls = m.tool_calls.map((c) => ({
      ...(c.id ? { id: c.id } : {}),
      type: "function" as const,
      function: { name: c.function.name, arguments: parseArguments(c.function.arguments) },
    }));
    if (inlineCalls) out.content += inlineCalls.format(out.tool_calls.map((c, j) => ({ name: c.function.name, arguments: argumentObject(c.function.arguments, `messages[${i}].tool_calls[${j}].function.arguments`) })));
  }
  return out;
}

function argumentObject(args: unknown, param: string): Record<string, unknown> {
  if (typeof args === "object" && args !== null && !Array.isArray(args)) return args as Record<string, unknown>;
  throw new RequestError("INVALID_REQUEST", `${param} must be a JSON object in a string.`, param);
}

/** Text parts are joined with newlines (vLLM's rule for string-content templates). */
function contentText(content: string | ContentPart[] | null | undefined, i: number): string {
  if (content == null) return "";
  if (typeof content === "string") return content;
  const texts: string[] = [];
  content.forEach((part, j) => {
    if (part.type === "text") texts.push(part.text);
    else throw new RequestError("INVALID_REQUEST", "This model does not accept image input (it has no vision projector).", `messages[${i}].content[${j}]`, "image_input_not_supported");
  });
  return texts.join("\n");
}

/** Templates index into arguments (`arguments.city`); OpenAI sends them as a JSON string. */
function parseArguments(args: string): unknown {
  try {
    return JSON.parse(args);
  } catch {
    return args;
  }
}
