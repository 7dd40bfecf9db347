/**
 * Speculative decoding's settings, from the serve flags (llama-server's `--spec-type
 * ngram-simple|draft-simple`, `--model-draft`, `--draft-max`, `--draft-min`, `--draft-p-min`,
 * `--spec-ngram-simple-size-n`; vLLM's `--speculative-config` with the `ngram` method or a draft
 * `model`) and from a request (llama-server's `speculative.*` fields). The engine drafts by
 * n-gram lookup or by the draft model and checks the drafts in one step; its tokens are the
 * same as without.
 */
import type { Speculation } from "../engine/index.ts";
import type { SamplingRequest } from "../schemas/sampling.ts";

/** `--spec-type` / `speculative.type` values: n-gram lookup, the draft model, or off. */
export const SPEC_TYPES = ["ngram-simple", "draft-simple", "none"] as const;
export type SpecType = (typeof SPEC_TYPES)[number];

/** Tokens drafted per step at most when nothing says (the pace starts at half and doubles while whole drafts are taken). */
export const DEFAULT_DRAFT_MAX = 16;
/** A draft model's least probability for a guess when nothing says (the engine's; benches/RESULTS.md). */
export const DEFAULT_DRAFT_P_MIN = 0.1;
/** The n-gram lengths looked up when nothing says, longest first. */
const DEFAULT_NGRAM = { ngramMin: 2, ngramMax: 4 };

/** vLLM's `--speculative-config` (the keys Wick reads; others are refused by the flag's parser). */
export type SpeculativeConfig =
  { method: "ngram"; num_speculative_tokens?: number; prompt_lookup_min?: number; prompt_lookup_max?: number } | { method: "draft_model"; model: string; num_speculative_tokens?: number };

export interface SpecFlags {
  specType?: SpecType;
  draftMax?: number;
  draftMin?: number;
  specNgramSize?: number;
  speculativeConfig?: SpeculativeConfig;
  modelDraft?: string;
  draftPMin?: number;
}

/** The draft model the flags name (`--model-draft`, or vLLM's config's `model`). */
export function draftModelFromFlags(f: SpecFlags): string | undefined {
  return f.modelDraft ?? (f.speculativeConfig?.method === "draft_model" ? f.speculativeConfig.model : undefined);
}

/** The engine default the serve flags ask for; undefined: off. */
export function speculationFromFlags(f: SpecFlags): Speculation | undefined {
  const vllm = f.speculativeConfig;
  const draftModel = draftModelFromFlags(f);
  // A draft model turns drafting by it on, unless --spec-type says otherwise.
  const type = f.specType ?? (draftModel ? "draft-simple" : vllm ? "ngram-simple" : "none");
  if (type === "none") return undefined;
  const draftMax = f.draftMax ?? vllm?.num_speculative_tokens ?? DEFAULT_DRAFT_MAX;
  if (draftMax === 0) return undefined;
  const draftMin = Math.min(f.draftMin ?? 1, draftMax);
  if (type === "draft-simple") return { method: "draft", draftMax, draftMin, pMin: f.draftPMin ?? DEFAULT_DRAFT_P_MIN };
  const ngram = f.specNgramSize !== undefined ? { ngramMin: f.specNgramSize, ngramMax: f.specNgramSize } : DEFAULT_NGRAM;
  const lookup = vllm?.method === "ngram" ? vllm : undefined;
  const ngramMin = lookup?.prompt_lookup_min ?? ngram.ngramMin;
  const ngramMax = lookup?.prompt_lookup_max ?? Math.max(ngram.ngramMax, ngramMin);
  return { method: "ngram", draftMax, draftMin, ngramMin: Math.min(ngramMin, ngramMax), ngramMax };
}

/**
 * A request's own settings (llama-server's per-request `speculative.type`, `.n_max` or
 * `.ngram_size_m`, `.n_min`, `.p_min`, `.ngram_size_n`) over the engine's; undefined when the
 * request says nothing (the engine's apply).
 */
export function requestSpeculation(req: SamplingRequest, engine: Speculation | undefined): Speculation | undefined {
  const type = req["speculative.type"];
  const nMax = req["speculative.n_max"] ?? req["speculative.ngram_size_m"];
  const nMin = req["speculative.n_min"];
  const pMin = req["speculative.p_min"];
  const size = req["speculative.ngram_size_n"];
  if (type == null && nMax == null && nMin == null && pMin == null && size == null) return undefined;
  if (type === "none" || nMax === 0) return { draftMax: 0 };
  // Without type or engine default, a field alone does not turn it on (llama-server's rule).
  if (!engine && type !== "ngram-simple" && type !== "draft-simple") return undefined;
  const method = type === "draft-simple" ? "draft" : type === "ngram-simple" ? "ngram" : (engine?.method ?? "ngram");
  const base: Speculation =
    engine?.method === method
      ? engine
      : method === "draft"
        ? { method, draftMax: DEFAULT_DRAFT_MAX, draftMin: 1, pMin: DEFAULT_DRAFT_P_MIN }
        : { method, draftMax: DEFAULT_DRAFT_MAX, draftMin: 1, ...DEFAULT_NGRAM };
  return {
    ...base,
    ...(nMax != null ? { draftMax: nMax } : {}),
    ...(nMin != null ? { draftMin: nMin } : {}),
    ...(pMin != null && method === "draft" ? { pMin } : {}),
    ...(size != null && method === "ngram" ? { ngramMin: size, ngramMax: size } : {}),
  };
}
