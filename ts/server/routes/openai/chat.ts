/**
 * POST /v1/chat/completions: validate, render the chat template, run n choices, answer as one
 * `chat.completion` or as `chat.completion.chunk` SSE frames.
 */
import type Router from "@koa/router";
import { chatCompletionRequest } from "../../../schemas/chat.ts";
import { collectChoices, startChoices, UsageTotals, type ChoiceEvent, type Job } from "../../../service/generation.ts";
import { chatPromptTokens } from "../../../service/prompt.ts";
import { perChoice, samplingOptions } from "../../../service/sampling.ts";
import { clientGoneSignal, sendSse } from "../../sse.ts";
import { parseBody } from "../../validate.ts";
import { finishReason, responseId, unixNow, type ResponseMeta, type RouteDeps } from "./common.ts";
import { LogprobFormatter } from "./logprobs.ts";
import type { TokenLogprobs } from "../../../engine/index.ts";

export function chatRoutes(router: Router, { registry, log }: RouteDeps): void {
  router.post("/v1/chat/completions", async (ctx) => {
    const req = parseBody(chatCompletionRequest, ctx.request.body);
    const model = registry.resolve(req.model);
    const promptTokens = chatPromptTokens(model, req.messages, req.tools);
    const sampling = samplingOptions(req, req.logprobs ? (req.top_logprobs ?? 0) : undefined);
    const jobs: Job[] = perChoice(sampling, req.n ?? 1).map((o) => ({ options: { ...o, promptTokens }, promptIndex: 0 }));
    const maxParam = req.max_completion_tokens != null ? "max_completion_tokens" : "max_tokens";
    const events = startChoices(model, jobs, clientGoneSignal(ctx), { prompt: "messages", maxTokens: maxParam });
    const meta: ResponseMeta = { id: responseId("chatcmpl"), created: unixNow(), model: model.id };
    const logprobs = req.logprobs ? new LogprobFormatter(model) : null;

    if (req.stream) {
      const includeUsage = req.stream_options?.include_usage === true;
      sendSse(ctx, chatChunks(meta, events, jobs, logprobs, includeUsage), ctx.state.log ?? log);
      return;
    }
    const result = await collectChoices(events, jobs);
    ctx.body = {
      ...meta,
      object: "chat.completion",
      choices: result.choices.map((c, index) => ({
        index,
        message: { role: "assistant", content: c.text, refusal: null },
        logprobs: logprobs ? logprobs.chat(c.logprobs) : null,
        finish_reason: finishReason(c.finishReason),
      })),
      usage: result.usage.toOpenAI(),
    };
  });
}

/**
 * The chunk sequence: a role delta per choice first (sent at once, before prefill ends),
 * content deltas, a finish chunk per choice, then — only with include_usage — a usage chunk
 * with `choices: []`. With include_usage every other chunk carries `usage: null`, as OpenAI.
 */
async function* chatChunks(
  meta: ResponseMeta,
  events: AsyncIterable<ChoiceEvent>,
  jobs: Job[],
  logprobs: LogprobFormatter | null,
  includeUsage: boolean,
): AsyncGenerator<unknown> {
  const chunk = (choices: unknown[], usage: unknown = null) => ({
    ...meta,
    object: "chat.completion.chunk",
    choices,
    ...(includeUsage ? { usage } : {}),
  });
  for (let index = 0; index < jobs.length; index++) {
    yield chunk([{ index, delta: { role: "assistant", content: "" }, logprobs: null, finish_reason: null }]);
  }
  const usage = new UsageTotals(jobs);
  // Logprobs of tokens whose text is held back (stop-string candidates) ride on the next text.
  const held: TokenLogprobs[][] = jobs.map(() => []);
  const takeLogprobs = (index: number) => {
    if (!logprobs) return null;
    const lps = held[index]!.splice(0);
    return lps.length ? logprobs.chat(lps) : null;
  };
  for await (const { index, event } of events) {
    if (event.type === "token") {
      if (event.logprobs) held[index]!.push(...event.logprobs);
      if (event.text) yield chunk([{ index, delta: { content: event.text }, logprobs: takeLogprobs(index), finish_reason: null }]);
    } else {
      usage.add(index, event);
      yield chunk([{ index, delta: {}, logprobs: takeLogprobs(index), finish_reason: finishReason(event.finishReason) }]);
    }
  }
  if (includeUsage) yield chunk([], usage.toOpenAI());
}
