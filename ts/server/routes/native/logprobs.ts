/**
 * Ollama's `logprobs` (api.Logprob, Ollama 0.12 and later) on /api/chat and /api/generate:
 * `logprobs: true` asks for the log probability of each generated token, `top_logprobs: N` for
 * the N most likely tokens at each position too. Every chunk carries the entries of its own
 * tokens: `[{token, logprob, bytes, top_logprobs?}]`.
 */
import type { TokenLogprobs } from "../../../engine/index.ts";
import { TokenText } from "../../../service/logprobs.ts";
import type { ServedModel } from "../../../service/registry.ts";
import type { SamplingOptions } from "../../../service/sampling.ts";

interface TokenLogprob {
  token: string;
  logprob: number;
  bytes: number[];
}

export interface OllamaLogprob extends TokenLogprob {
  top_logprobs?: TokenLogprob[];
}

/** The engine's `topLogprobs` for a request: set only when it asks for logprobs. */
export function withLogprobs(sampling: SamplingOptions, req: { logprobs?: boolean | null; top_logprobs?: number | null }): SamplingOptions {
  return req.logprobs ? { ...sampling, topLogprobs: req.top_logprobs ?? 0 } : sampling;
}

export class OllamaLogprobs {
  private readonly text: TokenText;

  constructor(model: ServedModel) {
    this.text = new TokenText(model);
  }

  format(lps: TokenLogprobs[]): OllamaLogprob[] {
    const entry = (id: number, logprob: number): TokenLogprob => ({ token: this.text.piece(id), logprob, bytes: this.text.bytes(id) });
    // `top_logprobs` is omitted when not asked for (omitempty in Ollama's types).
    return this.text.visible(lps).map((lp) => ({ ...entry(lp.id, lp.logprob), ...(lp.top.length ? { top_logprobs: lp.top.map((t) => entry(t.id, t.logprob)) } : {}) }));
  }
}

/** `{logprobs}` for a chunk with entries, nothing for one without (Ollama omits the field). */
export function logprobsField(formatter: OllamaLogprobs | null, lps: TokenLogprobs[]): { logprobs?: OllamaLogprob[] } {
  if (!formatter) return {};
  const out = formatter.format(lps);
  return out.length ? { logprobs: out } : {};
}
