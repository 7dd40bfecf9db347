/**
 * Request → prompt token ids. Chat: messages are normalised for templates, rendered, then
 * tokenised with special-token parsing and no automatic specials, and BOS is prepended only
 * when the vocabulary wants one and the template did not already write it — exactly one BOS,
 * as llama.cpp does. Completions: the raw prompt, same BOS rule, no template.
 *
 * Images (`image_url` parts) become a marker in the rendered text, as llama-server's media
 * markers: text parts are joined with newlines, except next to an image. The text between
 * markers is tokenised piece by piece (as llama.cpp's mtmd does) and each image goes to the
 * engine with the token index it stands before; the engine lays it out.
 */
import { randomBytes } from "node:crypto";
import type { ImageInput } from "../engine/index.ts";
import type { ChatMessage, ContentPart } from "../schemas/chat.ts";
import { renderOllamaPrompt, type GoTemplate, type PromptMessage } from "../store/index.ts";
import type { TemplateMessage } from "./chat-template.ts";
import { withProfileMessages } from "./profile.ts";
import { thinkTemplateVars, type ThinkRequest } from "./reasoning-plan.ts";
import { RequestError } from "./errors.ts";
import { loadImages, type ImageOptions, type ImageRef } from "./images/index.ts";
import type { ServedModel } from "./registry.ts";
import { templateRendersTools, withToolPrompt } from "./tools/generic-prompt.ts";
import type { ToolParser } from "./tools/index.ts";

export interface ChatPromptOptions {
  tools?: unknown[] | null;
  /** A Go template for this request only (/api/generate's `template`). */
  goTemplate?: GoTemplate;
  /** Prepend the Modelfile's MESSAGEs (not when /api/generate continues a `context`); default true. */
  profileMessages?: boolean;
  /** Thinking on or off, effort: what the template reads of it (`enable_thinking`, Go's `.Think`). */
  think?: ThinkRequest;
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

/** Stands for an image in rendered prompt text; random per process so no client text can forge it. */
export const IMAGE_MARKER = `<__wick_image_${randomBytes(8).toString("hex")}__>`;

export interface ChatPrompt {
  /** The rendered text (with `IMAGE_MARKER`s), which says e.g. whether it opened a think block. */
  text: string;
  tokens: number[];
  /** Decoded images, each before token `at` of `tokens`. */
  images: ImageInput[];
}

/** `chatPromptTokens` for messages that may hold images: fetched, decoded and placed. */
export async function chatPrompt(model: ServedModel, messages: ChatMessage[], opts: ChatPromptOptions & { images?: ImageOptions } = {}): Promise<ChatPrompt> {
  const refs: ImageRef[] = [];
  const text = chatPromptText(model, messages, { ...opts, imageRefs: refs });
  if (refs.length === 0) return { text, tokens: withSingleBos(model, model.engine.tokenize(text, { addSpecial: false, parseSpecial: true })), images: [] };
  if (!model.info.vision) throw noVision(refs[0].param.replace(/\.image_url$/, ""));
  const pieces = text.split(IMAGE_MARKER);
  if (pieces.length - 1 !== refs.length) {
    throw new RequestError("INVALID_REQUEST", `The chat template kept ${pieces.length - 1} of the ${refs.length} images.`, refs[0].param);
  }
  const decoded = await loadImages(refs, opts.images);
  const tokens: number[] = [];
  const images: ImageInput[] = [];
  pieces.forEach((piece, i) => {
    const ids = piece ? model.engine.tokenize(piece, { addSpecial: false, parseSpecial: true }) : [];
    tokens.push(...(i === 0 ? withSingleBos(model, ids) : ids));
    const img = decoded[i];
    if (img) images.push({ at: tokens.length, width: img.width, height: img.height, rgb: img.rgb });
  });
  return { text, tokens, images };
}

const noVision = (param: string) => new RequestError("INVALID_REQUEST", "This model does not accept image input (it has no vision projector).", param, "image_input_not_supported");

export function chatPromptText(model: ServedModel, messages: ChatMessage[], opts: ChatPromptOptions & { imageRefs?: ImageRef[] } = {}): string {
  const all = withProfileMessages(model.profile, messages, { withMessages: opts.profileMessages });
  const offset = all.length - messages.length; // errors name the request's own message index
  const go = opts.goTemplate ?? model.profile?.goTemplate;
  const tools = opts.tools?.length ? opts.tools : undefined;
  // A template that never reads `tool_calls` (LFM2's) would drop past calls; write them into the
  // content the way the model itself writes them, as LFM2.5's template does.
  const readsCalls = go ? go.identifiers().includes("toolcalls") : model.template.source.includes("tool_calls");
  const inlineCalls = readsCalls ? null : model.toolParser;
  let templated = all.map((m, i) => toTemplateMessage(m, i - offset, inlineCalls, opts.imageRefs));
  // A template that never writes the tools gets them in the system message (generic-prompt.ts).
  const rendersTools = go ? go.identifiers().includes("tools") : templateRendersTools(model.template);
  if (tools && !rendersTools && model.toolParser.name === "hermes") templated = withToolPrompt(templated, tools);
  if (go) return renderOllamaPrompt(go, { messages: templated.map(toPromptMessage), tools, think: opts.think?.enabled });
  return model.template.render(templated, { addGenerationPrompt: true, tools, vars: thinkTemplateVars(opts.think) });
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
  const prompts: (string | number[])[] = typeof prompt === "string" ? [prompt] : typeof prompt[0] === "number" ? [prompt as number[]] : (prompt as (string | number[])[]);
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

function toTemplateMessage(m: ChatMessage, i: number, inlineCalls: ToolParser | null, imageRefs?: ImageRef[]): TemplateMessage {
  // Templates only know system/user/assistant/tool; OpenAI's "developer" is a system message.
  const role = m.role === "developer" ? "system" : m.role;
  const out: TemplateMessage = { role, content: contentText(m.content, i, imageRefs) };
  const name = (m as { name?: unknown }).name;
  if (typeof name === "string" && name) out.name = name;
  if (m.role === "tool" && m.tool_call_id) out.tool_call_id = m.tool_call_id;
  if (m.role === "assistant" && m.tool_calls?.length) {
    out.tool_calls = m.tool_calls.map((c) => ({
      ...(c.id ? { id: c.id } : {}),
      type: "function" as const,
      function: { name: c.function.name, arguments: parseArguments(c.function.arguments) },
    }));
    if (inlineCalls)
      out.content += inlineCalls.format(
        out.tool_calls.map((c, j) => ({ name: c.function.name, arguments: argumentObject(c.function.arguments, `messages[${i}].tool_calls[${j}].function.arguments`) })),
      );
  }
  return out;
}

function argumentObject(args: unknown, param: string): Record<string, unknown> {
  if (typeof args === "object" && args !== null && !Array.isArray(args)) return args as Record<string, unknown>;
  throw new RequestError("INVALID_REQUEST", `${param} must be a JSON object in a string.`, param);
}

/**
 * Text parts are joined with newlines (vLLM's rule for string-content templates), except next
 * to an image, which becomes `IMAGE_MARKER` (llama.cpp's join of text and media parts). Images
 * are collected into `imageRefs`; without it (callers that take no images) one is an error.
 */
function contentText(content: string | ContentPart[] | null | undefined, i: number, imageRefs?: ImageRef[]): string {
  if (content == null) return "";
  if (typeof content === "string") return content;
  let text = "";
  let afterImage = false;
  content.forEach((part, j) => {
    if (part.type === "text") {
      if (!afterImage && text !== "") text += "\n";
      text += part.text;
      afterImage = false;
      return;
    }
    const param = `messages[${i}].content[${j}]`;
    if (!imageRefs) throw noVision(param);
    imageRefs.push({ url: typeof part.image_url === "string" ? part.image_url : part.image_url.url, param: `${param}.image_url` });
    text += IMAGE_MARKER;
    afterImage = true;
  });
  return text;
}

/** Templates index into arguments (`arguments.city`); OpenAI sends them as a JSON string. */
function parseArguments(args: string): unknown {
  try {
    return JSON.parse(args);
  } catch {
    return args;
  }
}
