/**
 * POST /v1/messages (Anthropic Messages: one `message`, or its named SSE events with
 * `stream: true`) and POST /v1/messages/count_tokens (`{input_tokens}`: the prompt the same
 * body renders to, through the same plan). Errors on both answer in Anthropic's shape
 * (errors.ts), in-band as an `error` event once a stream began.
 */
import type Router from "@koa/router";
import { countTokensRequest, messagesRequest, type CountTokensRequest, type MessagesRequest } from "../../../schemas/anthropic.ts";
import { collectAnswer, startAnswer } from "../../../service/answer.ts";
import { planChat, type ChatPlan } from "../../../service/chat.ts";
import type { ImageOptions } from "../../../service/images/index.ts";
import { withOpenAIDefaults } from "../../../service/profile.ts";
import type { ServedModel } from "../../../service/registry.ts";
import { responseFormatGrammar } from "../../../service/response-format.ts";
import { samplingOptions, type SamplingOptions } from "../../../service/sampling.ts";
import { toAnthropicError } from "../../errors.ts";
import { requestLog } from "../../request-log.ts";
import { namedSSE, sendStream } from "../../stream.ts";
import { parseBody } from "../../validate.ts";
import { clientGoneSignal, useModel, type RouteDeps } from "../common.ts";
import { messageBody, messageFrames, messageId, type MessageMeta } from "./message.ts";
import { anthropicParams, thinkOf, toChatRequest } from "./request.ts";

/** The in-band error: `event: error` with the same body a non-streamed error has. */
const ANTHROPIC_SSE = namedSSE((err) => {
  const api = toAnthropicError(err);
  return { frame: { event: "error", data: api.body }, internal: api.internal, summary: { type: api.body.error.type, message: api.body.error.message } };
});

export function anthropicRoutes(router: Router, { models, log, images }: RouteDeps): void {
  router.post("/v1/messages", async (ctx) => {
    const req = parseBody(messagesRequest, ctx.request.body);
    const model = await useModel(ctx, models, req.model);
    const { jobs, tools, params } = await planMessages(model, req, sampling(model, req), images);
    const answer = startAnswer(model, jobs, clientGoneSignal(ctx), params, tools, req.stream ? "stream" : "whole");
    const meta: MessageMeta = { id: messageId(), model: model.id };
    if (req.stream) {
      sendStream(ctx, messageFrames(meta, answer, jobs[0].options.promptTokens.length), ANTHROPIC_SSE, requestLog(ctx, log));
      return;
    }
    ctx.body = messageBody(meta, await collectAnswer(answer));
  });

  router.post("/v1/messages/count_tokens", async (ctx) => {
    const req = parseBody(countTokensRequest, ctx.request.body);
    const model = await useModel(ctx, models, req.model);
    const { jobs } = await planMessages(model, req, { temperature: 1 }, images);
    ctx.body = { input_tokens: jobs[0].options.promptTokens.length };
  });
}

function sampling(model: ServedModel, req: MessagesRequest): SamplingOptions {
  const { temperature, top_p, top_k, max_tokens, stop_sequences } = req;
  return samplingOptions(withOpenAIDefaults(model.profile, { temperature, top_p, top_k, max_tokens, stop: stop_sequences }), model.info.nVocab);
}

/** Both routes plan the same way, so count_tokens counts the prompt /v1/messages runs. */
async function planMessages(model: ServedModel, req: CountTokensRequest, sampling: SamplingOptions, images: ImageOptions): Promise<ChatPlan> {
  const { origins, ...chat } = toChatRequest(req);
  try {
    const schema = req.output_config?.format?.schema;
    const format = schema ? responseFormatGrammar({ type: "json_schema", json_schema: { schema, strict: true } }) : undefined;
    return await planChat(model, { ...chat, sampling, n: 1, format, images, think: thinkOf(req) }, { maxTokens: "max_tokens", format: "output_config.format" });
  } catch (err) {
    throw anthropicParams(err, origins);
  }
}
