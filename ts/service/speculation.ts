/**
 * Speculative decoding's settings, from the serve flags (llama-server's `--spec-type ngram-simple`,
 * `--draft-max`, `--draft-min`, `--spec-ngram-simple-size-n`; vLLM's `--speculative-config` with
 * the `ngram` method) and from a request (llama-server's `speculative.*` fields). The engine
 * drafts by n-gram lookup and checks the drafts in one step; its tokens are the same as without.
 */
import type { Speculation } from "../engine/index.ts";
import type { SamplingRequest } from "../schemas/sampling.ts";

/** `--spec-type` / `speculative.type` values: n-gram lookup, or off. */
export const SPEC_TYPES = ["ngram-simple", "none"] as const;
export type SpecType = (typeof SPEC_TYPES)[number];

/** Tokens drafted per step at most when nothing says (the pace starts at half and doubles while whole drafts are taken). */
export const DEFAULT_DRAFT_MAX = 16;
/** The n-gram lengths looked up when nothing says, longest first. */
const DEFAULT_NGRAM = { ngramMin: 2, ngramMax: 4 };

/** vLLM's `--speculative-config` (the keys Wick reads; others are refused by the flag's parser). */
export interface SpeculativeConfig {
  method: "ngram";
  num_speculative_tokens?: number;
  prompt_lookup_min?: number;
  prompt_lookup_max?: number;
}

export interface SpecFlags {
  specType?: SpecType;
  draftMax?: number;
  draftMin?: number;
  specNgramSize?: number;
  speculativeConfig?: SpeculativeConfig;
}

/** The engine default the serve flags ask for; undefined: off. */
export function speculationFromFlags(f: SpecFlags): Speculation | undefined {
  const vllm = f.speculativeConfig;
  if (f.specType === "none" || (!f.specType && !vllm)) return undefined;
  const draftMax = f.draftMax ?? vllm?.num_speculative_tokens ?? DEFAULT_DRAFT_MAX;
  if (draftMax === 0) return undefined;
  const ngram = f.specNgramSize !== undefined ? { ngramMin: f.specNgramSize, ngramMax: f.specNgramSize } : DEFAULT_NGRAM;
  const ngramMin = vllm?.prompt_lookup_min ?? ngram.ngramMin;
  const ngramMax = vllm?.prompt_lookup_max ?? Math.max(ngram.ngramMax, ngramMin);
  return { draftMax, draftMin: Math.min(f.draftMin ?? 1, draftMax), ngramMin: Math.min(ngramMin, ngramMax), ngramMax };
}

/**
 * A request's own settings (llama-server's per-request `speculative.type`, `.n_max` or
 * `.ngram_size_m`, `.n_min`, `.ngram_size_n`) over the engine's; undefined when the request says nothing (the engine's apply).
 */
export function requestSpeculation(req: SamplingRequest, engine: Speculation | undefined): Speculation | undefined {
  const type = req["speculative.type"];
  const nMax = req["speculative.n_max"] ?? req["speculative.ngram_size_m"];
  const nMin = req["speculative.n_min"];
  const size = req["speculative.ngram_size_n"];
  if (type == null && nMax == null && nMin == null && size == null) return undefined;
  if (type === "none" || nMax === 0) return { draftMax: 0 };
  // Without type or engine default, a field alone does not turn it on (llama-server's rule).
  if (!engine && type !== "ngram-simple") return undefined;
  const base = engine ?? { draftMax: DEFAULT_DRAFT_MAX, draftMin: 1, ...DEFAULT_NGRAM };
  return {
    ...base,
    ...(nMax != null ? { draftMax: nMax } : {}),
    ...(nMin != null ? { draftMin: nMin } : {}),
    ...(size != null ? { ngramMin: size, ngramMax: size } : {}),
  };
}
