/**
 * The tokenizer and chat template as services of their own: llama-server's /tokenize,
 * /detokenize and /apply-template and vLLM's /tokenize and /detokenize. A chat's prompt here is
 * the one /v1/chat/completions renders and counts (prompt.ts), so a client can size a request
 * before sending it.
 */
import { inspectModel } from "../engine/index.ts";
import type { ChatMessage } from "../schemas/chat.ts";
import { RequestError } from "./errors.ts";
import { chatPromptText, chatPromptTokens } from "./prompt.ts";
import { chatThink } from "./reasoning-plan.ts";
import type { ServedModel } from "./registry.ts";

export interface TokenizeOptions {
  /** BOS (and EOS) as the vocabulary wants them. */
  addSpecial: boolean;
  /** Special-token text such as "<|im_start|>" becomes that token. */
  parseSpecial: boolean;
}

export function tokenizeText(model: ServedModel, text: string, opts: TokenizeOptions): number[] {
  return model.engine.tokenize(text, opts);
}

const utf8 = new TextDecoder("utf-8", { fatal: true });

/** Each id with its text, or its bytes when they are not whole UTF-8 on their own (llama-server's `with_pieces`). */
export function tokenPieces(model: ServedModel, ids: number[]): { id: number; piece: string | number[] }[] {
  return model.engine.tokenBytes(ids).map((bytes, i) => {
    try {
      return { id: ids[i], piece: utf8.decode(bytes) };
    } catch {
      return { id: ids[i], piece: [...bytes] };
    }
  });
}

const vocabularies = new WeakMap<ServedModel, Promise<unknown>>();

/**
 * vLLM's `token_strs`: each token as the vocabulary spells it (`ĠParis`, `▁Paris`, `<0xC2>`),
 * what Hugging Face's convert_ids_to_tokens gives; read once per loaded model from its GGUF.
 */
export async function vocabularyStrings(model: ServedModel, ids: number[]): Promise<string[]> {
  let vocab = vocabularies.get(model);
  if (!vocab) {
    vocab = inspectModel(model.path, { maxArrayLen: Number.MAX_SAFE_INTEGER }).then((info): unknown => info.metadata["tokenizer.ggml.tokens"]);
    vocabularies.set(model, vocab);
  }
  const tokens = await vocab;
  return ids.map((id) => (Array.isArray(tokens) && typeof tokens[id] === "string" ? tokens[id] : ""));
}

/** Token ids → text, control tokens included (as llama-server and vLLM render them). */
export function detokenizeIds(model: ServedModel, ids: number[], param = "tokens"): string {
  const bad = ids.findIndex((id) => id >= model.info.nVocab);
  if (bad >= 0) throw new RequestError("INVALID_REQUEST", `${param}[${bad}] = ${ids[bad]} is not a token id of this model (its vocabulary has ${model.info.nVocab} tokens).`, `${param}[${bad}]`);
  return model.engine.detokenize(ids);
}

export interface ChatInput {
  messages: ChatMessage[];
  tools?: unknown[] | null;
  reasoning_effort?: string | null;
  chat_template_kwargs?: { enable_thinking?: boolean | null } | null;
}

const promptOptions = (input: ChatInput) => ({ tools: input.tools, think: chatThink(input.chat_template_kwargs?.enable_thinking, input.reasoning_effort) });

/** The prompt text chat renders for these messages (the Modelfile's SYSTEM and MESSAGEs, tools, the generation prompt). */
export function chatPromptOf(model: ServedModel, input: ChatInput): string {
  return chatPromptText(model, input.messages, promptOptions(input));
}

/** The prompt tokens chat counts for these messages (exactly one BOS, as llama.cpp). */
export function chatTokensOf(model: ServedModel, input: ChatInput): number[] {
  return chatPromptTokens(model, input.messages, promptOptions(input));
}
