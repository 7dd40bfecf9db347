/**
 * Request → prompt token ids. Chat: messages are normalised for templates, rendered, then
 * tokenised with special-token parsing and no automatic specials, and BOS is prepended only
 * when the vocabulary wants one and the template did not already write it — exactly one BOS,
 * as llama.cpp does. Completions: the raw prompt, same BOS rule, no template.
 */
import type { ChatMessage, ContentPart } from "../schemas/chat.ts";
import { renderOllamaPrompt, type GoTemplate, type PromptMessage } from "../store/index.ts";
import type { TemplateMessage } from "./chat-template.ts";
import { withProfileMessages } from "./profile.ts";
import { RequestError } from "./errors.ts";
import type { ServedModel } from "./registry.ts";
import type { ToolParser } from "./tools/index.ts";

export interface ChatPromptOptions {
  tools?: unknown[] | null;
  /** A Go template for this request only (/api/generate's `template`). */
  goTemplate?: GoTemplate;
  /** Prepend the Modelfile's MESSAGEs (not when /api/generate continues a `context`); default true. */
  profileMessages?: boolean;
}

/**
 * The prompt of a chat: the Modelfile's SYSTEM and MESSAGEs around the request's messages, then
 * the model's Modelfile TEMPLATE (Go, rendered as Ollama does) when it has one or the request
 * gives one, else the GGUF's Jinja template.
 */
export function chatPromptTokens(model: ServedModel, messages: ChatMessage[], opts: ChatPromptOptions = {}): number[] {
  const text = chatPromptText(model, messages, opts);
  return withSingleBos(model, model.engine.tokenize(text, { addSpecial: false, parseSpecial: true }));
}

export function chatPromptText(model: ServedModel, messages: ChatMessage[], opts: ChatPromptOptions = {}): string {
  const all = withProfileMessages(model.profile, messages, { withMessages: opts.profileMessages });
  const offset = all.length - messages.length; // errors name the request's own message index
  const go = opts.goTemplate ?? model.profile?.goTemplate;
  const tools = opts.tools?.length ? opts.tools : undefined;
  // A template that never reads `tool_calls` (LFM2's) would drop past calls; write them into the
  // content the way the model itself writes them, as LFM2.5's template does.
  const readsCalls = go ? go.identifiers().includes("toolcalls") : model.template.source.includes("tool_calls");
  const inlineCalls = readsCalls ? null : model.toolParser;
  const templated = all.map((m, i) => toTemplateMessage(m, i - offset, inlineCalls));
  if (go) return renderOllamaPrompt(go, { messages: templated.map(toPromptMessage), tools });
  return model.template.render(templated, { addGenerationPrompt: true, tools });
}

/** A message as Ollama's templates see it: tool-call arguments as objects. */
function toPromptMessage(m: TemplateMessage): PromptMessage {
  const out: PromptMessage = { role: m.role, content: m.content };
  if (m.tool_call_id) out.tool_call_id = m.tool_call_id;
  if (m.tool_calls) {
    out.tool_calls = m.tool_calls.map((c, index) => ({
      ...(c.id ? { id: c.id } : {}),
      function: { index, name: c.function.name, arguments: isObject(c.function.arguments) ? c.function.arguments : {} },
    }));
  }
  return out;
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);

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
