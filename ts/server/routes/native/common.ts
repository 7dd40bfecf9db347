/** Pieces the native (Ollama) routes share: timestamps and the final chunk's metrics. */
import type { DoneEvent } from "../../../service/generation.ts";

/** Ollama's `created_at` (RFC 3339). */
export function createdAt(): string {
  return new Date().toISOString();
}

const NS_PER_MS = 1e6;

/**
 * The final chunk's counters, durations in nanoseconds. Ollama omits fields that are zero
 * (`omitempty`), so a model already loaded has no `load_duration`.
 */
export function doneMetrics(done: DoneEvent, startedMs: number) {
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

/** Ollama says "stop" or "length"; a departed client never reads "cancelled". */
export function doneReason(r: DoneEvent["finishReason"]): "stop" | "length" {
  return r === "length" ? "length" : "stop";
}
