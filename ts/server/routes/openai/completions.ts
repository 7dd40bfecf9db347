/**
 * POST /v1/completions: the raw prompt (no template), one or several prompts × n choices,
 * answered as one `text_completion` or as SSE chunks of the same object type.
 * Choice index = prompt index × n + choice, as OpenAI numbers them.
 */
import type Router from "@koa/router";
import { completionRequest } from "../../../schemas/completions.ts";
import { collectAnswer, startAnswer, type Answer } from "../../../service/answer.ts";
import { UsageTotals, type Job } from "../../../service/generation.ts";
import { completionPromptTokens } from "../../../service/prompt.ts";
import { withOpenAIDefaults } from "../../../service/profile.ts";
import { perChoice, samplingOptions } from "../../../service/sampling.ts";
import { SSE, sendStream } from "../../stream.ts";
import { requestLog } from "../../request-log.ts";
import { parseBody } from "../../validate.ts";
import { clientGoneSignal, useModel, type RouteDeps } from "../common.ts";
import { responseId, unixNow, type ResponseMeta } from "./common.ts";
import { LogprobFormatter } from "./logprobs.ts";

export function completionsRoutes(router: Router, { models, log }: RouteDeps): void {
  router.post("/v1/completions", async (ctx) => {
    const req = parseBody(completionRequest, ctx.request.body);
    const model = await useModel(ctx, models, req.model);
    const prompts = completionPromptTokens(model, req.prompt);
    const sampling = samplingOptions(withOpenAIDefaults(model.profile, req), model.info.nVocab, req.logprobs ?? undefined, model.info.speculative);
    const choices = perChoice(sampling, req.n ?? 1);
    const jobs: Job[] = prompts.flatMap((promptTokens, promptIndex) => choices.map((o) => ({ options: { ...o, promptTokens }, promptIndex })));
    const answer = startAnswer(model, jobs, clientGoneSignal(ctx), { prompt: "prompt", maxTokens: "max_tokens" }, undefined, req.stream ? "stream" : "whole");
    const meta: ResponseMeta = { id: responseId("cmpl"), created: unixNow(), model: model.id };
    const logprobs = req.logprobs != null ? new LogprobFormatter(model) : null;

    if (req.stream) {
      const includeUsage = req.stream_options?.include_usage === true;
      sendStream(ctx, completionChunks(meta, answer, logprobs, includeUsage), SSE, requestLog(ctx, log));
      return;
    }
    const whole = await collectAnswer(answer);
    ctx.body = {
      ...meta,
      object: "text_completion",
      choices: whole.choices.map((c, index) => ({
        index,
        text: c.content,
        logprobs: logprobs ? logprobs.completion(c.logprobs, 0) : null,
        finish_reason: c.done.finishReason,
      })),
      usage: whole.usage.toOpenAI(),
    };
  });
}

async function* completionChunks(meta: ResponseMeta, { events, jobs }: Answer, logprobs: LogprobFormatter | null, includeUsage: boolean): AsyncGenerator<unknown> {
  const chunk = (choices: unknown[], usage: unknown = null) => ({
    ...meta,
    object: "text_completion",
    choices,
    ...(includeUsage ? { usage } : {}),
  });
  const usage = new UsageTotals(jobs);
  // Text offsets of each choice's logprobs, as OpenAI counts them (`text_offset`).
  const offsets = jobs.map(() => 0);
  for await (const ev of events) {
    const { index } = ev;
    const lps = logprobs ? logprobs.completion(ev.logprobs, offsets[index]) : null;
    if (ev.type === "delta") {
      yield chunk([{ index, text: ev.content, logprobs: lps, finish_reason: null }]);
      offsets[index] += ev.content.length;
    } else {
      usage.add(index, ev);
      yield chunk([{ index, text: "", logprobs: lps, finish_reason: ev.finishReason }]);
    }
  }
  if (includeUsage) yield chunk([], usage.toOpenAI());
}
