/**
 * Engine logprobs (token ids) → OpenAI's two logprobs shapes: chat's
 * `{content:[{token, logprob, bytes, top_logprobs}]}` and completions'
 * `{tokens, token_logprobs, top_logprobs, text_offset}`, token text from the service's
 * TokenText (the end-of-generation token left out). Chat entries also carry the token `id`,
 * as llama-server's do (clients ignore the extra field; parity tests compare ids).
 */
import type { TokenLogprobs } from "../../../engine/index.ts";
import { TokenText } from "../../../service/logprobs.ts";
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
  private readonly text: TokenText;

  constructor(model: ServedModel) {
    this.text = new TokenText(model);
  }

  chat(lps: TokenLogprobs[]): { content: ChatTokenLogprob[]; refusal: null } {
    const entry = (id: number, logprob: number) => ({ id, token: this.text.piece(id), logprob, bytes: this.text.bytes(id) });
    return {
      content: this.text.visible(lps).map((lp) => ({ ...entry(lp.id, lp.logprob), top_logprobs: lp.top.map((t) => entry(t.id, t.logprob)) })),
      refusal: null,
    };
  }

  /** `offset` is the text length of the choice before these tokens (text_offset is absolute). */
  completion(lps: TokenLogprobs[], offset: number): CompletionLogprobs {
    const out: CompletionLogprobs = { tokens: [], token_logprobs: [], top_logprobs: [], text_offset: [] };
    for (const lp of this.text.visible(lps)) {
      const token = this.text.piece(lp.id);
      out.tokens.push(token);
      out.token_logprobs.push(lp.logprob);
      out.top_logprobs.push(Object.fromEntries(lp.top.map((t) => [this.text.piece(t.id), t.logprob])));
      out.text_offset.push(offset);
      offset += token.length;
    }
    return out;
  }
}
