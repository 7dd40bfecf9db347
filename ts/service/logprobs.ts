/**
 * The text of generated tokens, for every API's logprobs shape (OpenAI chat and completions,
 * Ollama chat and generate): each token id rendered once per response, and the
 * end-of-generation token left out, as it is not text and no API lists it.
 */
import type { TokenLogprobs } from "../engine/index.ts";
import type { ServedModel } from "./registry.ts";

export class TokenText {
  private readonly pieces = new Map<number, string>();

  constructor(private readonly model: ServedModel) {}

  /** The tokens an API lists: all but the end-of-generation token. */
  visible(lps: TokenLogprobs[]): TokenLogprobs[] {
    const eos = this.model.info.eosToken;
    return lps.filter((lp) => lp.id !== eos);
  }

  /** A token's text on its own (control tokens included, as OpenAI and Ollama list them). */
  piece(id: number): string {
    let s = this.pieces.get(id);
    if (s === undefined) {
      s = this.model.engine.detokenize([id]);
      this.pieces.set(id, s);
    }
    return s;
  }

  /** A token's UTF-8 bytes, OpenAI's and Ollama's `bytes`. */
  bytes(id: number): number[] {
    return [...Buffer.from(this.piece(id), "utf8")];
  }
}
