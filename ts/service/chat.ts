/**
 * A chat request, whichever API it came from, → the engine jobs that answer it: the tool
 * messages checked, the prompt rendered with the tools (and thinking on or off), the tool plan
 * (parser, markers, call grammar) and the output format combined into each choice's options,
 * and where each choice's thinking is split from its answer.
 */
import type { ChatMessage } from "../schemas/chat.ts";
import type { ContextParams, Job } from "./generation.ts";
import type { ImageOptions } from "./images/index.ts";
import { chatPrompt } from "./prompt.ts";
import { budgetThink, choiceBudget, choiceReasoning, type ThinkRequest } from "./reasoning-plan.ts";
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
  /** Thinking on or off (`think`, `reasoning_effort`, Anthropic's `thinking`), as the API asked. */
  think?: ThinkRequest;
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
  const think = budgetThink(model.reasoning, input.think);
  const { text, tokens: promptTokens, images } = await chatPrompt(model, input.messages, { tools: input.tools, images: input.images, think });
  // A forced call outranks the output format; a lazy call grammar yields to it.
  const forced = tools.grammar && tools.grammar.triggerToken === undefined;
  const grammar = forced ? tools.grammar : (input.format ?? tools.grammar);
  const options: SamplingOptions = { ...input.sampling };
  if (grammar) options.grammar = grammar;
  const markerTokens = [...tools.markerTokens, ...model.reasoning.markerTokens];
  if (markerTokens.length) options.markerTokens = markerTokens;
  const reasoning = choiceReasoning(model.reasoning, text);
  const budget = choiceBudget(model.reasoning, think, reasoning, (t) => model.engine.tokenize(t, { addSpecial: false, parseSpecial: true }));
  if (budget) options.reasoningBudget = budget;
  const jobs = perChoice(options, input.n).map((o) => ({ options: { ...o, promptTokens, ...(images.length ? { images } : {}) }, promptIndex: 0, ...(reasoning ? { reasoning } : {}) }));
  const params = { prompt: "messages", maxTokens: names.maxTokens, grammar: grammar === input.format ? names.format : "tools" };
  return { jobs, tools, params };
}
