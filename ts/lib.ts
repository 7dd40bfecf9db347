/**
 * The `wick` package as a library (`import { Engine, createServer } from "wick"`): the engine
 * in-process, plus what the server does around it — the model's chat template, tool-call
 * parsing, and the whole HTTP server on a port of your choice. Everything here reuses the
 * server's own modules, so a library chat and an HTTP chat render, sample and parse the same.
 *
 * The caller owns each Engine: `createServer(...).close()` stops listening but leaves the
 * engines loaded (unload them with `engine.unload()`).
 */
import type { Server } from "node:http";
import type { AddressInfo } from "node:net";
import type { Logger } from "pino";
import { Engine, type GenerateOptions, type Pooling } from "./engine/index.ts";
import type { ChatMessage } from "./schemas/chat.ts";
import { createApp } from "./server/app.ts";
import { planChat } from "./service/chat.ts";
import { startAnswer, type FinishReason } from "./service/answer.ts";
import { chatPromptText } from "./service/prompt.ts";
import { embedInputs, inputList, rankDocuments, rankOrder } from "./service/embeddings.ts";
import { ModelRegistry, type ServedModel } from "./service/registry.ts";
import type { ToolRequest } from "./service/tools/request.ts";
import type { ParseResult, ToolParserName } from "./service/tools/index.ts";

export { Engine, WickError, inspectModel, cpuIsa, gpuBackends, selectAddon, addonChoice } from "./engine/index.ts";
export type * from "./engine/index.ts";
export { RequestError } from "./service/errors.ts";
export { ToolStream, parserFor, TOOL_PARSER_NAMES } from "./service/tools/index.ts";
export type { ToolCall, ToolParser, ToolParserName, ParseResult } from "./service/tools/index.ts";
export type { ChatMessage, ContentPart, ToolChoice } from "./schemas/chat.ts";

/** A tool offered to the model, as OpenAI spells it. */
export interface ChatTool {
  type: "function";
  function: { name: string; description?: string; parameters?: Record<string, unknown> };
}

/** A call the model made: `arguments` is the parsed JSON object. */
export interface ChatToolCall {
  id: string;
  name: string;
  arguments: Record<string, unknown>;
}

export interface ChatOptions extends Omit<GenerateOptions, "promptTokens" | "grammar" | "markerTokens" | "images"> {
  messages: ChatMessage[];
  tools?: ChatTool[];
  /** "auto" (default), "none", "required", or one named function (forced by a grammar). */
  toolChoice?: ToolRequest["tool_choice"];
  /** false: at most one call. */
  parallelToolCalls?: boolean;
  /** false: the template renders with thinking off (where it reads `enable_thinking`); default: the template's own. */
  think?: boolean;
  /** Aborting cancels the sequence in the engine. */
  signal?: AbortSignal;
}

/** What `chatStream` yields: thinking and text as they settle, each call once complete, then the end. */
export type ChatEvent =
  | { type: "reasoning"; text: string }
  | { type: "content"; text: string }
  | { type: "tool_call"; call: ChatToolCall }
  | { type: "done"; finishReason: FinishReason; usage: { promptTokens: number; completionTokens: number; cachedTokens: number } };

export interface ChatResult {
  content: string;
  /** The model's thinking (its `<think>` block), split from `content`; "" when it did not think. */
  reasoning: string;
  toolCalls: ChatToolCall[];
  finishReason: FinishReason;
  usage: { promptTokens: number; completionTokens: number; cachedTokens: number };
}

/** Each engine's template, tool parser and facts, built once (as the server builds them at load). */
const served = new WeakMap<Engine, ServedModel>();

function model(engine: Engine): ServedModel {
  let m = served.get(engine);
  if (!m) {
    const info = engine.info();
    m = new ModelRegistry().add(engine, { path: engine.modelPath ?? info.name ?? "model", id: info.name ?? "model" });
    served.set(engine, m);
  }
  return m;
}

/**
 * The prompt the model sees for these messages: its GGUF chat template (ChatML when it has
 * none) with the generation prompt appended, the tools rendered as the template writes them.
 */
export function applyChatTemplate(engine: Engine, messages: ChatMessage[], opts: { tools?: ChatTool[] } = {}): string {
  return chatPromptText(model(engine), messages, { tools: opts.tools });
}

/** Which tool-call format this model writes (from its template): "lfm2" or "hermes". */
export function toolParserOf(engine: Engine): ToolParserName {
  return model(engine).toolParser.name;
}

/** Reads tool calls out of finished output text with this model's parser (text outside calls is `content`). */
export function parseToolCalls(engine: Engine, text: string): ParseResult {
  return model(engine).toolParser.parse(text);
}

/** A chat turn, streamed: the template applied, tools offered and their calls parsed out. */
export async function* chatStream(engine: Engine, opts: ChatOptions): AsyncGenerator<ChatEvent> {
  const { messages, tools, toolChoice, parallelToolCalls, think, signal, ...sampling } = opts;
  const m = model(engine);
  const {
    jobs,
    tools: plan,
    params,
  } = await planChat(
    m,
    { messages, tools, tool_choice: toolChoice, parallel_tool_calls: parallelToolCalls, sampling, n: 1, ...(think === undefined ? {} : { think: { enabled: think } }) },
    { maxTokens: "maxTokens", format: "format" },
  );
  const { events } = startAnswer(m, jobs, signal ?? new AbortController().signal, params, plan);
  for await (const ev of events) {
    if (ev.type === "delta") {
      if (ev.reasoning) yield { type: "reasoning", text: ev.reasoning };
      if (ev.content) yield { type: "content", text: ev.content };
      for (const c of ev.calls) yield { type: "tool_call", call: { id: c.id, name: c.name, arguments: c.args } };
      continue;
    }
    const { promptTokens, completionTokens, cachedTokens } = ev.usage;
    yield { type: "done", finishReason: ev.finishReason, usage: { promptTokens, completionTokens, cachedTokens } };
  }
}

/** `chatStream` collected into one answer. */
export async function chat(engine: Engine, opts: ChatOptions): Promise<ChatResult> {
  const result: ChatResult = { content: "", reasoning: "", toolCalls: [], finishReason: "stop", usage: { promptTokens: 0, completionTokens: 0, cachedTokens: 0 } };
  for await (const ev of chatStream(engine, opts)) {
    if (ev.type === "content") result.content += ev.text;
    else if (ev.type === "reasoning") result.reasoning += ev.text;
    else if (ev.type === "tool_call") result.toolCalls.push(ev.call);
    else {
      result.finishReason = ev.finishReason;
      result.usage = ev.usage;
    }
  }
  return result;
}

export interface EmbedOptions {
  /** A text, texts, one input's token ids, or several inputs' token ids. */
  input: string | string[] | number[] | number[][];
  /** Default: the model's (`engine.info().embedding.defaultPooling`). */
  pooling?: Pooling;
  /** llama.cpp's `embd_normalize`: -1 none, 0 max-abs int16, 2 euclidean (default), p p-norm. */
  normalize?: number;
  /** Keep the first N dimensions and L2-normalise them again (Matryoshka). */
  dimensions?: number;
  /** Cut an input longer than the context to fit; default: such an input throws. */
  truncate?: boolean;
  signal?: AbortSignal;
}

export interface EmbedResult {
  /** One pooled vector per input, in input order (empty with pooling "none": see `tokenEmbeddings`). */
  embeddings: Float32Array[];
  /** With pooling "none" (ColBERT): per input, one vector per token. */
  tokenEmbeddings?: Float32Array[][];
  promptTokens: number;
}

/**
 * Embeds texts (or token ids) as the server's embedding routes do: the vocabulary's BOS/EOS
 * added, special-token text parsed, every input submitted at once (the engine batches them).
 */
export async function embed(engine: Engine, opts: EmbedOptions): Promise<EmbedResult> {
  const { input, signal, ...rest } = opts;
  const m = model(engine);
  const outs = await embedInputs(m, inputList(input), { ...rest, signal });
  const promptTokens = outs.reduce((n, o) => n + o.promptTokens, 0);
  const perToken = (opts.pooling ?? m.info.embedding?.defaultPooling) === "none";
  return perToken ? { embeddings: [], tokenEmbeddings: outs.map((o) => o.vectors), promptTokens } : { embeddings: outs.map((o) => o.vectors[0]), promptTokens };
}

export interface RerankOptions {
  query: string;
  documents: string[];
  /** Keep the N best (default: all). */
  topN?: number;
  signal?: AbortSignal;
}

export interface RerankResult {
  /** Highest score first: each document's index in `documents`, its score and text. */
  results: { index: number; score: number; document: string }[];
  promptTokens: number;
}

/**
 * Ranks documents against a query as /v1/rerank does: a cross-encoder's classifier score (the
 * GGUF's rerank template) or ColBERT's MaxSim; any other model throws.
 */
export async function rerank(engine: Engine, opts: RerankOptions): Promise<RerankResult> {
  const ranked = await rankDocuments(model(engine), opts.query, opts.documents, opts.signal);
  return { results: rankOrder(ranked.scores, opts.topN).map(({ index, score }) => ({ index, score, document: opts.documents[index] })), promptTokens: ranked.promptTokens };
}

export interface ServerOptions {
  /** The models to serve, by the name requests use (`{ "smollm": engine }`), or one engine (named after its GGUF). */
  models: Record<string, Engine> | Engine;
  /** Default 127.0.0.1. */
  host?: string;
  /** Default 0: a free port (read it back from `port` / `url`). */
  port?: number;
  /** Require `Authorization: Bearer <key>` on every route but /health. */
  apiKey?: string;
  /** A pino logger for request logs; default silent. */
  logger?: Logger;
}

export interface WickServer {
  /** `http://host:port`; the OpenAI API is under `/v1`, Ollama's under `/api`. */
  url: string;
  port: number;
  server: Server;
  /** Stops listening and drops open connections; the engines stay loaded. */
  close(): Promise<void>;
}

/** Starts the OpenAI/Ollama-compatible HTTP server in this process, serving engines you loaded. */
export async function createServer(opts: ServerOptions): Promise<WickServer> {
  const registry = new ModelRegistry();
  const entries = opts.models instanceof Engine ? [[opts.models.info().name ?? "model", opts.models] as const] : Object.entries(opts.models);
  for (const [id, engine] of entries) registry.add(engine, { id, path: id });
  const app = createApp({ registry, apiKey: opts.apiKey, logger: opts.logger });
  const host = opts.host ?? "127.0.0.1";
  const server = app.listen({ host, port: opts.port ?? 0 });
  await new Promise<void>((resolve, reject) => {
    server.once("listening", resolve);
    server.once("error", reject);
  });
  const addr = server.address() as AddressInfo;
  const url = `http://${addr.family === "IPv6" ? `[${addr.address}]` : addr.address}:${addr.port}`;
  return {
    url,
    port: addr.port,
    server,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
