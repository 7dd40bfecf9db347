/**
 * The one response pipeline: a request's running choices → typed answer events, whatever API
 * asked. Each choice's text is split into thinking and answer first (reasoning.ts, when its job
 * says where), then the answer goes through its ToolOutput (calls parsed out when tools were
 * offered, plain text otherwise); logprobs of text held back (stop strings, partial markers,
 * possible calls) ride on the next delta, and the finish reason is decided here once. Every API wing (OpenAI
 * chat and completions, Ollama chat and generate, the library) is a mapper from these events
 * to its own frames, and a whole answer is `collectAnswer`, a fold over the same stream.
 */
import type { TokenLogprobs } from "../engine/index.ts";
import { startChoices, UsageTotals, type ChoiceEvent, type ContextParams, type DoneEvent, type Job } from "./generation.ts";
import { ReasoningSplit, type SplitDelta } from "./reasoning.ts";
import type { ServedModel } from "./registry.ts";
import { ToolOutput, type OutputCall, type OutputDelta } from "./tools/output.ts";
import { NO_TOOLS, type ToolPlan } from "./tools/request.ts";

/** Why a choice ended, as every API reads it ("cancelled" is never read: its client left). */
export type FinishReason = "stop" | "length" | "tool_calls";

export type AnswerEvent =
  /**
   * Something to show: settled text, reasoning (the model's thinking, split from the answer) and/or whole
   * calls; `logprobs` of every token since the last delta.
   */
  | { type: "delta"; index: number; content: string; reasoning: string; calls: OutputCall[]; logprobs: TokenLogprobs[] }
  /** The choice's end; `logprobs` of tokens whose text never settled, `tokens` every id it generated. */
  | {
      type: "done";
      index: number;
      finishReason: FinishReason;
      usage: DoneEvent["usage"];
      timings: DoneEvent["timings"];
      logprobs: TokenLogprobs[];
      tokens: number[];
      /** Generated tokens that were thinking: those the think block opened, held or closed with. */
      reasoningTokens: number;
      /** The stop string that ended the choice, if one did (the engine's stop matcher says which). */
      stopSequence: string | null;
    };

export type DeltaEvent = Extract<AnswerEvent, { type: "delta" }>;
export type AnswerDone = Extract<AnswerEvent, { type: "done" }>;

/** A started request: its events, and what a mapper needs to sum usage over its choices. */
export interface Answer {
  events: AsyncGenerator<AnswerEvent>;
  jobs: Job[];
}

/**
 * How the answer is read: event by event (a streamed response), or whole (one body at the
 * end), in which case the engine holds each choice's tokens until its end instead of waking
 * the JS thread per token.
 */
export type Delivery = "stream" | "whole";

/**
 * Submits every job at once and returns the answer stream. Submission errors (context too
 * long, queue full, a bad grammar) throw here, before any response is written.
 */
export function startAnswer(model: ServedModel, jobs: Job[], signal: AbortSignal, params: ContextParams, tools: ToolPlan = NO_TOOLS, delivery: Delivery = "stream"): Answer {
  const submitted = delivery === "whole" ? jobs.map((j) => ({ ...j, options: { ...j.options, holdEvents: true } })) : jobs;
  const choices = startChoices(model, submitted, signal, params);
  return { events: answerEvents(choices, jobs, tools), jobs };
}

/** The finish rule: a choice that stopped after a call finishes with "tool_calls". */
function finishOf(reason: DoneEvent["finishReason"], called: boolean): FinishReason {
  if (reason === "length") return "length";
  return called ? "tool_calls" : "stop";
}

/** What one choice's text settled into: thinking, then the answer's content and calls. */
type ChoiceDelta = OutputDelta & { reasoning: string };

/** One choice's text → its thinking (when its job says where it is), then its answer's content and calls. */
class ChoiceOutput {
  private readonly split: ReasoningSplit | null;
  readonly tools: ToolOutput;

  constructor(job: Job, tools: ToolPlan) {
    this.split = job.reasoning ? new ReasoningSplit(job.reasoning.markers, job.reasoning.inside) : null;
    this.tools = new ToolOutput(tools);
  }

  /** Tokens counted as thinking so far. */
  reasoningTokens = 0;

  /** `tokens`: how many generated tokens wrote `text`. */
  push(text: string, tokens: number): ChoiceDelta {
    const before = this.split?.thinking ?? false;
    const s: SplitDelta = this.split ? this.split.push(text) : { reasoning: "", content: text };
    if (before || this.split?.thinking) this.reasoningTokens += tokens;
    return { reasoning: s.reasoning, ...this.tools.push(s.content) };
  }

  /** `cut`: generation hit its token limit. */
  finish(cut: boolean): ChoiceDelta {
    const s = this.split?.finish() ?? { reasoning: "", content: "" };
    const head = this.tools.push(s.content);
    const tail = this.tools.finish(cut);
    return { reasoning: s.reasoning, content: head.content + tail.content, calls: [...head.calls, ...tail.calls] };
  }
}

async function* answerEvents(choices: AsyncIterable<ChoiceEvent>, jobs: Job[], tools: ToolPlan): AsyncGenerator<AnswerEvent> {
  const outputs = jobs.map((job) => new ChoiceOutput(job, tools));
  const held: TokenLogprobs[][] = jobs.map(() => []);
  const tokens: number[][] = jobs.map(() => []);
  // What settled since the last delta, with the logprobs of every token held until then.
  const delta = (index: number, d: ChoiceDelta): AnswerEvent[] =>
    d.content || d.reasoning || d.calls.length ? [{ type: "delta", index, content: d.content, reasoning: d.reasoning, calls: d.calls, logprobs: held[index].splice(0) }] : [];
  for await (const { index, event } of choices) {
    const out = outputs[index];
    if (event.type === "token") {
      tokens[index].push(...event.ids);
      if (event.logprobs) held[index].push(...event.logprobs);
      if (event.text) yield* delta(index, out.push(event.text, event.ids.length));
      continue;
    }
    yield* delta(index, out.finish(event.finishReason === "length"));
    const { usage, timings } = event;
    const finishReason = finishOf(event.finishReason, out.tools.called);
    const stopSequence = event.stopSequence ?? null;
    yield { type: "done", index, finishReason, usage, timings, logprobs: held[index].splice(0), tokens: tokens[index], reasoningTokens: out.reasoningTokens, stopSequence };
  }
}

/** One choice, whole. */
export interface AnswerChoice {
  content: string;
  reasoning: string;
  calls: OutputCall[];
  logprobs: TokenLogprobs[];
  done: AnswerDone;
}

export interface WholeAnswer {
  choices: AnswerChoice[];
  usage: UsageTotals;
}

/** The stream folded into whole choices (non-streaming responses). */
export async function collectAnswer({ events, jobs }: Answer): Promise<WholeAnswer> {
  const parts = jobs.map(() => ({ content: "", reasoning: "", calls: [] as OutputCall[], logprobs: [] as TokenLogprobs[], done: undefined as AnswerDone | undefined }));
  const usage = new UsageTotals(jobs);
  for await (const ev of events) {
    const c = parts[ev.index];
    c.logprobs.push(...ev.logprobs);
    if (ev.type === "delta") {
      c.content += ev.content;
      c.reasoning += ev.reasoning;
      c.calls.push(...ev.calls);
    } else {
      c.done = ev;
      usage.add(ev.index, ev);
    }
  }
  // Every choice ends with done unless the stream threw, and then this line is never reached.
  return { choices: parts.map((c) => ({ ...c, done: c.done! })), usage };
}
