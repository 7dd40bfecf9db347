/**
 * Runs the sequences of one request (n choices, or several prompts) in the engine at once and
 * merges their events into one stream tagged with the choice index. Submission is all or
 * nothing: if one submit fails (context too long, queue full), the ones already queued are
 * cancelled and the error is thrown before any response is written.
 */
import { WickError, type EngineEvent, type GenerateOptions } from "../engine/index.ts";
import { RequestError } from "./errors.ts";
import type { ChoiceReasoning } from "./reasoning-plan.ts";
import type { ServedModel } from "./registry.ts";

export interface ChoiceEvent {
  index: number;
  event: EngineEvent;
}

export type DoneEvent = Extract<EngineEvent, { type: "done" }>;

export interface Job {
  options: GenerateOptions;
  /** Which prompt of the request this choice continues (usage counts each prompt once). */
  promptIndex: number;
  /** Where its thinking is split from its answer; absent: all text is the answer. */
  reasoning?: ChoiceReasoning;
}

/** Request fields to blame when the engine says the request does not fit the context. */
export interface ContextParams {
  prompt: string;
  maxTokens: string;
  /** The field whose grammar (tools, response_format) the engine could not compile. */
  grammar?: string;
}

export function startChoices(model: ServedModel, jobs: Job[], signal: AbortSignal, params: ContextParams): AsyncGenerator<ChoiceEvent> {
  const stop = new AbortController();
  const onAbort = () => stop.abort();
  signal.addEventListener("abort", onAbort, { once: true });
  const gens: AsyncGenerator<EngineEvent>[] = [];
  try {
    for (const job of jobs) gens.push(model.generate(job.options, stop.signal));
  } catch (err) {
    signal.removeEventListener("abort", onAbort);
    stop.abort();
    // A generator's body (which wires the abort to the sequence) only runs once it is pulled.
    for (const g of gens) void g.next().catch(() => {});
    throw blameField(err, model, jobs[gens.length], params);
  }
  if (signal.aborted) stop.abort();
  return merge(gens, stop, () => signal.removeEventListener("abort", onAbort));
}

type Pulled = { index: number; result: IteratorResult<EngineEvent> };

/**
 * Names the request field behind a submit error: CONTEXT_LENGTH_EXCEEDED the prompt when it
 * alone is too long, else the length limit; INVALID_GRAMMAR the field the grammar came from.
 */
function blameField(err: unknown, model: ServedModel, job: Job, params: ContextParams): unknown {
  if (!(err instanceof WickError)) return err;
  if (err.code === "INVALID_GRAMMAR") return new RequestError("INVALID_REQUEST", err.message, params.grammar ?? null, "invalid_grammar");
  if (err.code !== "CONTEXT_LENGTH_EXCEEDED") return err;
  // The engine counts the prompt as laid out (images add positions), so its numbers decide.
  const promptTokens = err.promptTokens ?? job.options.promptTokens.length;
  const promptTooLong = promptTokens >= (err.contextSize ?? model.info.contextSize);
  return new RequestError("CONTEXT_LENGTH_EXCEEDED", err.message, promptTooLong ? params.prompt : params.maxTokens);
}

/**
 * Pulls every choice at once, before the merged stream is iterated: a generator's body (which
 * wires the abort signal to its sequence) only runs once pulled, and a client that leaves
 * before the response body is ever read must still cancel its sequences.
 */
function merge(gens: AsyncGenerator<EngineEvent>[], stop: AbortController, cleanup: () => void): AsyncGenerator<ChoiceEvent> {
  const pending = new Map<number, Promise<Pulled>>();
  const pull = (index: number) => {
    const p = gens[index].next().then((result) => ({ index, result }));
    p.catch(() => {}); // observed by the consumer if there is one; never an unhandled rejection
    pending.set(index, p);
  };
  gens.forEach((_, i) => pull(i));
  return drain(gens, pending, pull, stop, cleanup);
}

async function* drain(
  gens: AsyncGenerator<EngineEvent>[],
  pending: Map<number, Promise<Pulled>>,
  pull: (index: number) => void,
  stop: AbortController,
  cleanup: () => void,
): AsyncGenerator<ChoiceEvent> {
  const finished = new Set<number>();
  try {
    while (pending.size > 0) {
      const { index, result } = await Promise.race(pending.values());
      pending.delete(index);
      if (result.done) {
        finished.add(index);
        continue;
      }
      yield { index, event: result.value };
      pull(index);
    }
  } finally {
    cleanup();
    // The consumer left early or one choice failed: stop the others in the engine now, and
    // close their streams (queued behind the pull in flight) so that what wraps them — the
    // serving metrics' count of cancelled requests — sees them end.
    if (finished.size < gens.length) stop.abort();
    gens.forEach((gen, index) => {
      if (!finished.has(index)) gen.return(undefined).catch(() => {});
    });
  }
}

/**
 * OpenAI usage for a multi-sequence request: each prompt's tokens count once (n choices of
 * one prompt share it), completion tokens add up over every choice.
 */
export class UsageTotals {
  private readonly prompts = new Map<number, { promptTokens: number; cachedTokens: number }>();
  private completion = 0;
  /** Of the completion tokens, those that were thinking (answer events count them). */
  reasoning = 0;

  constructor(private readonly jobs: Job[]) {}

  add(index: number, done: Pick<DoneEvent, "usage"> & { reasoningTokens?: number }): void {
    const p = this.jobs[index].promptIndex;
    if (!this.prompts.has(p)) this.prompts.set(p, { promptTokens: done.usage.promptTokens, cachedTokens: done.usage.cachedTokens });
    this.completion += done.usage.completionTokens;
    this.reasoning += done.reasoningTokens ?? 0;
  }

  toOpenAI() {
    let prompt = 0;
    let cached = 0;
    for (const u of this.prompts.values()) {
      prompt += u.promptTokens;
      cached += u.cachedTokens;
    }
    return {
      prompt_tokens: prompt,
      completion_tokens: this.completion,
      total_tokens: prompt + this.completion,
      prompt_tokens_details: { cached_tokens: cached },
      // OpenAI's field; sent when the model thought, so other answers keep their usual shape.
      ...(this.reasoning ? { completion_tokens_details: { reasoning_tokens: this.reasoning } } : {}),
    };
  }
}
