/**
 * POST /v1/completions: the raw prompt (no template), one or several prompts × n choices,
 * answered as one `text_completion` or as SSE chunks of the same object type.
 * Choice index = prompt index × n + choice, as OpenAI numbers them.
 */
import type Router from "@koa/router";
import type { TokenLogprobs } from "../../../engine/index.ts";
import { completionRequest } from "../../../schemas/completions.ts";
import { collectChoices, startChoices, UsageTotals, type ChoiceEvent, type Job } from "../../../service/generation.ts";
import { completionPromptTokens } from "../../../service/prompt.ts";
import { withOpenAIDefaults } from "../../../service/profile.ts";
import { perChoice, samplingOptions } from "../../../service/sampling.ts";
import { clientGoneSignal, sendSse } from "../../sse.ts";
import { parseBody } from "../../validate.ts";
import { finishReason, responseId, unixNow, useModel, type ResponseMeta, type RouteDeps } from "./common.ts";
import { LogprobFormatter } from "./logprobs.ts";

export function completionsRoutes(router: Router, { models, log }: RouteDeps): void {
  router.post("/v1/completions", async (ctx) => {
    const req = parseBody(completionRequest, ctx.request.body);
    const model = await useModel(ctx, models, req.model);
    const prompts = completionPromptTokens(model, req.prompt);
    const sampling = samplingOptions(withOpenAIDefaults(model.profile, req), model.info.nVocab, req.logprobs ?? undefined);
    const choices = perChoice(sampling, req.n ?? 1);
    const jobs: Job[] = prompts.flatMap((promptTokens, promptIndex) =>
      choices.map((o) => ({ options: { ...o, promptTokens }, promptIndex })),
    );
    const events = startChoices(model, jobs, clientGoneSignal(ctx), { prompt: "prompt", maxTokens: "max_tokens" });
    const meta: ResponseMeta = { id: responseId("cmpl"), created: unixNow(), model: model.id };
    const logprobs = req.logprobs != null ? new LogprobFormatter(model) : null;

    if (req.stream) {
      const includeUsage = req.stream_options?.include_usage === true;
      sendSse(ctx, completionChunks(meta, events, jobs, logprobs, includeUsage), ctx.state.log ?? log);
      return;
    }
    const result = await collectChoices(events, jobs);
    ctx.body = {
      ...meta,
      object: "text_completion",
      choices: result.choices.map((c, index) => ({
        index,
        text: c.text,
        logprobs: logprobs ? logprobs.completion(c.logprobs, 0) : null,
        finish_reason: finishReason(c.finishReason),
      })),
      usage: result.usage.toOpenAI(),
    };
  });
}

async function* completionChunks(
  meta: ResponseMeta,
  events: AsyncIterable<ChoiceEvent>,
  jobs: Job[],
  logprobs: LogprobFormatter | null,
  includeUsage: boolean,
): AsyncGenerator<unknown> {
  const chunk = (choices: unknown[], usage: unknown = null) => ({
    ...meta,
    object: "text_completion",
    choices,
    ...(includeUsage ? { usage } : {}),
  });
  const usage = new UsageTotals(jobs);
  const held: TokenLogprobs[][] = jobs.map(() => []);
  const offsets = jobs.map(() => 0);
  const takeLogprobs = (index: number) => {
    if (!logprobs) return null;
    return logprobs.completion(held[index]!.splice(0), offsets[index]!);
  };
  for await (const { index, event } of events) {
    if (event.type === "token") {
      if (event.logprobs) held[index]!.push(...event.logprobs);
      if (event.text) {
        yield chunk([{ index, text: event.text, logprobs: takeLogprobs(index), finish_reason: null }]);
        offsets[index]! += event.text.length;
      }
    } else {
      usage.add(index, event);
      yield chunk([{ index, text: "", logprobs: takeLogprobs(index), finish_reason: finishReason(event.finishReason) }]);
    }
  }
  if (includeUsage) yield chunk([], usage.toOpenAI());
}
