/**
 * POST /v1/chat/completions: validate, render the chat template, run n choices, answer as one
 * `chat.completion` or as `chat.completion.chunk` SSE frames. With tools offered, each choice's
 * text goes through a ToolOutput, so calls come back as `tool_calls` (whole, in both modes) and
 * the choice finishes with "tool_calls".
 */
import type Router from "@koa/router";
import type { TokenLogprobs } from "../../../engine/index.ts";
import { chatCompletionRequest } from "../../../schemas/chat.ts";
import { collectChoices, startChoices, UsageTotals, type ChoiceEvent, type DoneEvent, type Job } from "../../../service/generation.ts";
import { planChat } from "../../../service/chat.ts";
import { responseFormatGrammar } from "../../../service/response-format.ts";
import { withOpenAIDefaults } from "../../../service/profile.ts";
import { samplingOptions } from "../../../service/sampling.ts";
import { ToolOutput, type OutputCall } from "../../../service/tools/output.ts";
import type { ToolPlan } from "../../../service/tools/request.ts";
import { clientGoneSignal, sendSse } from "../../sse.ts";
import { parseBody } from "../../validate.ts";
import { finishReason, responseId, unixNow, useModel, type ResponseMeta, type RouteDeps } from "./common.ts";
import { LogprobFormatter } from "./logprobs.ts";

export function chatRoutes(router: Router, { models, log, images }: RouteDeps): void {
  router.post("/v1/chat/completions", async (ctx) => {
    const req = parseBody(chatCompletionRequest, ctx.request.body);
    const model = await useModel(ctx, models, req.model);
    const sampling = samplingOptions(withOpenAIDefaults(model.profile, req), model.info.nVocab, req.logprobs ? (req.top_logprobs ?? 0) : undefined);
    const format = responseFormatGrammar(req.response_format);
    const maxTokens = req.max_completion_tokens != null ? "max_completion_tokens" : "max_tokens";
    const { jobs, tools, params } = await planChat(model, { ...req, sampling, n: req.n ?? 1, format, images }, { maxTokens, format: "response_format" });
    const events = startChoices(model, jobs, clientGoneSignal(ctx), params);
    const meta: ResponseMeta = { id: responseId("chatcmpl"), created: unixNow(), model: model.id };
    const logprobs = req.logprobs ? new LogprobFormatter(model) : null;

    if (req.stream) {
      const includeUsage = req.stream_options?.include_usage === true;
      sendSse(ctx, chatChunks(meta, events, jobs, tools, logprobs, includeUsage), ctx.state.log ?? log);
      return;
    }
    const result = await collectChoices(events, jobs);
    ctx.body = {
      ...meta,
      object: "chat.completion",
      choices: result.choices.map((c, index) => {
        const out = new ToolOutput(tools);
        const head = out.push(c.text);
        const tail = out.finish();
        const calls = [...head.calls, ...tail.calls];
        const content = head.content + tail.content;
        return {
          index,
          // OpenAI: content is null when the answer is only calls.
          message: { role: "assistant", content: calls.length && !content.trim() ? null : content, refusal: null, ...(calls.length ? { tool_calls: calls.map(openaiCall) } : {}) },
          logprobs: logprobs ? logprobs.chat(c.logprobs) : null,
          finish_reason: chatFinish(c.finishReason, out),
        };
      }),
      usage: result.usage.toOpenAI(),
    };
  });
}

function chatFinish(reason: DoneEvent["finishReason"], out: ToolOutput): "stop" | "length" | "tool_calls" {
  const r = finishReason(reason);
  return r === "stop" && out.called ? "tool_calls" : r;
}

function openaiCall(c: OutputCall) {
  return { id: c.id, type: "function" as const, function: { name: c.name, arguments: c.arguments } };
}

/**
 * The chunk sequence: a role delta per choice first (sent at once, before prefill ends),
 * content deltas, a finish chunk per choice, then — only with include_usage — a usage chunk
 * with `choices: []`. With include_usage every other chunk carries `usage: null`, as OpenAI.
 * A call goes out as two deltas, as OpenAI streams them: its index, id, type and name with
 * empty arguments, then its arguments.
 */
async function* chatChunks(
  meta: ResponseMeta,
  events: AsyncIterable<ChoiceEvent>,
  jobs: Job[],
  tools: ToolPlan,
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
  const outputs = jobs.map(() => new ToolOutput(tools));
  // Logprobs of tokens whose text is held back (stop strings, possible calls) ride on the next text.
  const held: TokenLogprobs[][] = jobs.map(() => []);
  const takeLogprobs = (index: number) => {
    if (!logprobs) return null;
    const lps = held[index]!.splice(0);
    return lps.length ? logprobs.chat(lps) : null;
  };
  function* deltas(index: number, { content, calls }: { content: string; calls: OutputCall[] }) {
    if (content) yield chunk([{ index, delta: { content }, logprobs: takeLogprobs(index), finish_reason: null }]);
    for (const c of calls) {
      const head = { index: c.index, id: c.id, type: "function", function: { name: c.name, arguments: "" } };
      yield chunk([{ index, delta: { tool_calls: [head] }, logprobs: takeLogprobs(index), finish_reason: null }]);
      yield chunk([{ index, delta: { tool_calls: [{ index: c.index, function: { arguments: c.arguments } }] }, logprobs: null, finish_reason: null }]);
    }
  }
  for await (const { index, event } of events) {
    const out = outputs[index]!;
    if (event.type === "token") {
      if (event.logprobs) held[index]!.push(...event.logprobs);
      if (event.text) yield* deltas(index, out.push(event.text));
    } else {
      yield* deltas(index, out.finish());
      usage.add(index, event);
      yield chunk([{ index, delta: {}, logprobs: takeLogprobs(index), finish_reason: chatFinish(event.finishReason, out) }]);
    }
  }
  if (includeUsage) yield chunk([], usage.toOpenAI());
}
