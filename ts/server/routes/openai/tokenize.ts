/**
 * POST /tokenize, /detokenize and /apply-template: llama-server's tokenizer routes and vLLM's,
 * one route per path. /tokenize answers in the shape of the body it got: `content` is
 * llama-server's (`{tokens}`, with `{id, piece}` entries when `with_pieces`), `prompt` or
 * `messages` vLLM's (`{count, max_model_len, tokens}`). /detokenize bodies are the same in both,
 * so it answers both ways at once: `{content, prompt}`.
 */
import type Router from "@koa/router";
import { applyTemplateRequest, detokenizeRequest, tokenizeRequest, type TokenizeRequest } from "../../../schemas/tokenize.ts";
import { RequestError } from "../../../service/errors.ts";
import type { ServedModel } from "../../../service/registry.ts";
import { chatPromptOf, chatTokensOf, detokenizeIds, tokenizeText, tokenPieces, vocabularyStrings } from "../../../service/tokenize.ts";
import { parseBody } from "../../validate.ts";
import { useModel, type RouteDeps } from "../common.ts";

export function tokenizeRoutes(router: Router, { models }: RouteDeps): void {
  router.post("/tokenize", async (ctx) => {
    const req = parseBody(tokenizeRequest, ctx.request.body);
    const model = await useModel(ctx, models, req.model);
    ctx.body = req.content != null ? llamaTokenize(model, req, req.content) : await vllmTokenize(model, req);
  });

  router.post("/detokenize", async (ctx) => {
    const req = parseBody(detokenizeRequest, ctx.request.body);
    const text = detokenizeIds(await useModel(ctx, models, req.model), req.tokens);
    ctx.body = { content: text, prompt: text };
  });

  router.post("/apply-template", async (ctx) => {
    const req = parseBody(applyTemplateRequest, ctx.request.body);
    ctx.body = { prompt: chatPromptOf(await useModel(ctx, models, req.model), req) };
  });
}

/** llama-server: no BOS unless asked (`add_special`), special-token text parsed unless told not to. */
function llamaTokenize(model: ServedModel, req: TokenizeRequest, content: string) {
  const tokens = tokenizeText(model, content, { addSpecial: req.add_special ?? false, parseSpecial: req.parse_special ?? true });
  return { tokens: req.with_pieces ? tokenPieces(model, tokens) : tokens };
}

/** vLLM: a prompt gets the tokenizer's specials by default; a chat is the prompt chat would send. */
async function vllmTokenize(model: ServedModel, req: TokenizeRequest) {
  let tokens: number[];
  if (req.messages) tokens = chatTokensOf(model, { ...req, messages: req.messages });
  else if (req.prompt != null) tokens = tokenizeText(model, req.prompt, { addSpecial: req.add_special_tokens ?? true, parseSpecial: true });
  else throw new RequestError("INVALID_REQUEST", "Say what to tokenize: 'content' (llama-server), 'prompt' or 'messages' (vLLM).", "content", "missing_required_parameter");
  const out = { count: tokens.length, max_model_len: model.info.contextSize, tokens };
  return req.return_token_strs ? { ...out, token_strs: await vocabularyStrings(model, tokens) } : out;
}
