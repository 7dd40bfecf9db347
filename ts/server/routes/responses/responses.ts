/**
 * POST /v1/responses (OpenAI Responses, stateless): the body becomes a chat plan (input.ts),
 * runs as one choice through the shared answer pipeline, and answers as one `response` object
 * or as the API's named SSE events (output.ts). Nothing is stored, so `previous_response_id`
 * is a 400 that says to send the whole conversation; errors are OpenAI's shape, in a stream
 * the API's `error` event.
 */
import type Router from "@koa/router";
import { responsesRequest, type ResponsesRequest } from "../../../schemas/responses.ts";
import { startAnswer } from "../../../service/answer.ts";
import { planChat } from "../../../service/chat.ts";
import { RequestError } from "../../../service/errors.ts";
import { effortThink } from "../../../service/reasoning-plan.ts";
import { withOpenAIDefaults } from "../../../service/profile.ts";
import { samplingOptions } from "../../../service/sampling.ts";
import { requestLog } from "../../request-log.ts";
import { namedSSE, sendStream } from "../../stream.ts";
import { parseBody } from "../../validate.ts";
import { clientGoneSignal, useModel, type RouteDeps } from "../common.ts";
import { chatRequest, inputNamesAsync } from "./input.ts";
import { ResponseBuilder, type ResponseEcho } from "./output.ts";

export function responsesRoutes(router: Router, { models, log, images }: RouteDeps): void {
  router.post("/v1/responses", async (ctx) => {
    const req = parseBody(responsesRequest, ctx.request.body);
    if (req.previous_response_id) {
      const message = "Wick keeps no responses (it is stateless), so there is none to continue: send the whole conversation in `input` instead.";
      throw new RequestError("INVALID_REQUEST", message, "previous_response_id", "unsupported_parameter");
    }
    const chat = chatRequest(req);
    const model = await useModel(ctx, models, req.model);
    const effective = withOpenAIDefaults(model.profile, { ...req, max_tokens: req.max_output_tokens });
    const sampling = samplingOptions(effective, model.info.nVocab, undefined, model.info.speculative);
    const names = { maxTokens: "max_output_tokens", format: "text.format" };
    const { jobs, tools, params } = await inputNamesAsync(chat.origins, () => planChat(model, { ...chat, sampling, n: 1, images, think: effortThink(req.reasoning?.effort) }, names));
    const answer = startAnswer(model, jobs, clientGoneSignal(ctx), params, tools, req.stream ? "stream" : "whole");
    const builder = new ResponseBuilder(echo(req, effective, model.id));
    if (req.stream) {
      sendStream(
        ctx,
        builder.frames(answer.events),
        namedSSE((err) => builder.error(err)),
        requestLog(ctx, log),
      );
      return;
    }
    ctx.body = await builder.whole(answer.events);
  });
}

/** The request settings a response repeats, as OpenAI's does (sampling as it was applied). */
function echo(req: ResponsesRequest, effective: ResponsesRequest, model: string): ResponseEcho {
  return {
    model,
    instructions: req.instructions ?? null,
    max_output_tokens: req.max_output_tokens ?? null,
    metadata: req.metadata ?? {},
    parallel_tool_calls: req.parallel_tool_calls ?? true,
    previous_response_id: null,
    reasoning: { effort: req.reasoning?.effort ?? null, summary: null },
    store: false,
    temperature: effective.temperature ?? 1,
    top_p: effective.top_p ?? 1,
    text: { format: req.text?.format ?? { type: "text" } },
    tool_choice: req.tool_choice ?? "auto",
    tools: req.tools ?? [],
    truncation: "disabled",
    user: req.user ?? null,
  };
}
