/**
 * Bodies of the tokenizer routes, llama-server's and vLLM's on the same paths (which shape a
 * body is in decides the answer's shape, in ts/server/routes/openai/tokenize.ts):
 *
 * - POST /tokenize: llama-server `{content, add_special, parse_special, with_pieces}`; vLLM
 *   `{model, prompt, add_special_tokens, return_token_strs}` or `{model, messages, tools,
 *   add_special_tokens, return_token_strs}`.
 * - POST /detokenize: `{tokens}` (both), `model` optional.
 * - POST /apply-template: llama-server's, a chat completion body (`messages`, `tools`).
 */
import { z } from "zod";
import { chatCompletionRequest } from "./chat.ts";

const tokenIds = z.array(z.number().int().min(0));
const chat = {
  messages: chatCompletionRequest.shape.messages,
  tools: chatCompletionRequest.shape.tools,
  // Thinking on or off renders a different prompt: the same fields as chat completions.
  reasoning_effort: chatCompletionRequest.shape.reasoning_effort,
  chat_template_kwargs: chatCompletionRequest.shape.chat_template_kwargs,
};

export const tokenizeRequest = z.object({
  model: z.string().nullish(),
  /** llama-server's text to tokenize. */
  content: z.string().nullish(),
  add_special: z.boolean().nullish(),
  parse_special: z.boolean().nullish(),
  with_pieces: z.boolean().nullish(),
  /** vLLM's text to tokenize. */
  prompt: z.string().nullish(),
  /** vLLM's chat to render with the model's template, then tokenize. */
  messages: chat.messages.nullish(),
  tools: chat.tools,
  reasoning_effort: chat.reasoning_effort,
  chat_template_kwargs: chat.chat_template_kwargs,
  add_special_tokens: z.boolean().nullish(),
  return_token_strs: z.boolean().nullish(),
});
export type TokenizeRequest = z.infer<typeof tokenizeRequest>;

export const detokenizeRequest = z.object({ model: z.string().nullish(), tokens: tokenIds });

export const applyTemplateRequest = z.object({ model: z.string().nullish(), ...chat });
