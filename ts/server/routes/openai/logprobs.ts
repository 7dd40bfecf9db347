/**
 * Engine logprobs (token ids) → OpenAI's two logprobs shapes: chat's
 * `{content:[{token, logprob, bytes, top_logprobs}]}` and completions'
 * `{tokens, token_logprobs, top_logprobs, text_offset}`. The end-of-generation token is not
 * text and OpenAI does not list it, so it is left out. Chat entries also carry the token `id`,
 * as llama-server's do (clients ignore the extra field; parity tests compare ids).
 */
import type { TokenLogprobs } from "../../../engine/index.ts";
import type { ServedModel } from "../../../service/registry.ts";

export interface ChatTokenLogprob {
  id: number;
  token: string;
  logprob: number;
  bytes: number[];
  top_logprobs: { id: number; token: string; logprob: number; bytes: number[] }[];
}

export interface CompletionLogprobs {
  tokens: string[];
  token_logprobs: number[];
  top_logprobs: Record<string, number>[];
  text_offset: number[];
}

export class LogprobFormatter {
  private readonly pieces = new Map<number, string>();

  constructor(private readonly model: ServedModel) {}

  chat(lps: TokenLogprobs[]): { content: ChatTokenLogprob[]; refusal: null } {
    const entry = (id: number, logprob: number) => {
      const token = this.piece(id);
      return { id, token, logprob, bytes: [...Buffer.from(token, "utf8")] };
    };
    return {
      content: this.visible(lps).map((lp) => ({ ...entry(lp.id, lp.logprob), top_logprobs: lp.top.map((t) => entry(t.id, t.logprob)) })),
      refusal: null,
    };
  }

  /** `offset` is the text length of the choice before these tokens (text_offset is absolute). */
  completion(lps: TokenLogprobs[], offset: number): CompletionLogprobs {
    const out: CompletionLogprobs = { tokens: [], token_logprobs: [], top_logprobs: [], text_offset: [] };
    for (const lp of this.visible(lps)) {
      const token = this.piece(lp.id);
      out.tokens.push(token);
      out.token_logprobs.push(lp.logprob);
      out.top_logprobs.push(Object.fromEntries(lp.top.map((t) => [this.piece(t.id), t.logprob])));
      out.text_offset.push(offset);
      offset += token.length;
    }
    return out;
  }

  private visible(lps: TokenLogprobs[]): TokenLogprobs[] {
    const eos = this.model.info.eosToken;
    return lps.filter((lp) => lp.id !== eos);
  }

  private piece(id: number): string {
    let s = this.pieces.get(id);
    if (s === undefined) {
      s = this.model.engine.detokenize([id]);
      this.pieces.set(id, s);
    }
    return s;
  }
}
