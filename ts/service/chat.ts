/**
 * A chat request, whichever API it came from, → the engine jobs that answer it: the tool
 * messages checked, the prompt rendered with the tools, the tool plan (parser, markers, call
 * grammar) and the output format combined into each choice's options.
 */
import type { ChatMessage } from "../schemas/chat.ts";
import type { ContextParams, Job } from "./generation.ts";
import type { ImageOptions } from "./images/index.ts";
import { chatPrompt } from "./prompt.ts";
import type { ServedModel } from "./registry.ts";
import { perChoice, type SamplingOptions } from "./sampling.ts";
import { checkToolMessages, planTools, type Grammar, type ToolPlan, type ToolRequest } from "./tools/request.ts";

export interface ChatInput extends ToolRequest {
  messages: ChatMessage[];
  sampling: SamplingOptions;
  n: number;
  /** The grammar of the requested output format (response_format / format), if any. */
  format?: Grammar;
  /** How images are fetched and decoded (the server's limits). */
  images?: ImageOptions;
}

/** The request fields errors are blamed on, as the API spells them. */
export interface ChatParams {
  maxTokens: string;
  format: string;
}

export interface ChatPlan {
  jobs: Job[];
  tools: ToolPlan;
  params: ContextParams;
}

export async function planChat(model: ServedModel, input: ChatInput, names: ChatParams): Promise<ChatPlan> {
  checkToolMessages(input.messages);
  const tools = planTools(model, input);
  const { tokens: promptTokens, images } = await chatPrompt(model, input.messages, { tools: input.tools, images: input.images });
  // A forced call outranks the output format; a lazy call grammar yields to it.
  const forced = tools.grammar && tools.grammar.triggerToken === undefined;
  const grammar = forced ? tools.grammar : (input.format ?? tools.grammar);
  const options: SamplingOptions = { ...input.sampling };
  if (grammar) options.grammar = grammar;
  if (tools.markerTokens.length) options.markerTokens = tools.markerTokens;
  const jobs = perChoice(options, input.n).map((o) => ({ options: { ...o, promptTokens, ...(images.length ? { images } : {}) }, promptIndex: 0 }));
  const params = { prompt: "messages", maxTokens: names.maxTokens, grammar: grammar === input.format ? names.format : "tools" };
  return { jobs, tools, params };
}
