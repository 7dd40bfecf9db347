/** Pieces the native (Ollama) routes share: timestamps, the final chunk's fields, load/unload requests. */
import type { Context } from "koa";
import type { AnswerDone } from "../../../service/answer.ts";
import type { ModelManager } from "../../../service/models.ts";
import { useModel } from "../common.ts";

/**
 * A request with nothing to generate: with `keep_alive: 0` it unloads the model (once idle) and
 * answers "unload"; otherwise it loads the model (keeping it for `keep_alive`) and answers "load".
 */
export async function loadOrUnload(ctx: Context, models: ModelManager, name: string, keepAliveMs: number | null | undefined): Promise<"load" | "unload"> {
  if (keepAliveMs === 0) {
    await models.unload(name);
    return "unload";
  }
  await useModel(ctx, models, name, keepAliveMs ?? undefined);
  return "load";
}

/** Ollama's `created_at` (RFC 3339). */
export function createdAt(): string {
  return new Date().toISOString();
}

const NS_PER_MS = 1e6;

/**
 * The final chunk's counters, durations in nanoseconds. Ollama omits fields that are zero
 * (`omitempty`), so a model already loaded has no `load_duration`.
 */
export function doneMetrics(done: AnswerDone, startedMs: number) {
  const ns = (ms: number) => Math.round(ms * NS_PER_MS);
  const out: Record<string, number> = {
    total_duration: ns(performance.now() - startedMs),
    prompt_eval_count: done.usage.promptTokens,
    prompt_eval_duration: ns(done.timings.promptMs),
    eval_count: done.usage.completionTokens,
    eval_duration: ns(done.timings.decodeMs),
  };
  return Object.fromEntries(Object.entries(out).filter(([, v]) => v > 0));
}

/** Ollama's `done_reason`: "stop" after tool calls too. */
export function doneReason(done: AnswerDone): "stop" | "length" {
  return done.finishReason === "length" ? "length" : "stop";
}
