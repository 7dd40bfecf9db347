/**
 * POST /v1/chat/completions: validate, render the chat template, run n choices, answer as one
 * `chat.completion` or as `chat.completion.chunk` SSE frames. With tools offered, each choice's
 * text goes through a ToolOutput, so calls come back as `tool_calls` (whole, in both modes) and
 * the choice finishes with "tool_calls". The model's thinking comes in `reasoning_content`
 * (llama-server's and DeepSeek's name), in the message and in deltas.
 */
import type Router from "@koa/router";
import { chatCompletionRequest } from "../../../schemas/chat.ts";
import { collectAnswer, startAnswer, type AnswerEvent, type Answer } from "../../../service/answer.ts";
import { UsageTotals } from "../../../service/generation.ts";
import { planChat } from "../../../service/chat.ts";
import { responseFormatGrammar } from "../../../service/response-format.ts";
import { withOpenAIDefaults } from "../../../service/profile.ts";
import { chatThink } from "../../../service/reasoning-plan.ts";
import { samplingOptions } from "../../../service/sampling.ts";
import type { OutputCall } from "../../../service/tools/output.ts";
import { SSE, sendStream } from "../../stream.ts";
import { requestLog } from "../../request-log.ts";
import { parseBody } from "../../validate.ts";
import { clientGoneSignal, useModel, type RouteDeps } from "../common.ts";
import { responseId, unixNow, type ResponseMeta } from "./common.ts";
import { LogprobFormatter } from "./logprobs.ts";

export function chatRoutes(router: Router, { models, log, images }: RouteDeps): void {
  router.post("/v1/chat/completions", async (ctx) => {
    const req = parseBody(chatCompletionRequest, ctx.request.body);
    const model = await useModel(ctx, models, req.model);
    const sampling = samplingOptions(withOpenAIDefaults(model.profile, req), model.info.nVocab, req.logprobs ? (req.top_logprobs ?? 0) : undefined, model.info.speculative);
    const format = responseFormatGrammar(req.response_format);
    const maxTokens = req.max_completion_tokens != null ? "max_completion_tokens" : "max_tokens";
    const think = chatThink(req.chat_template_kwargs?.enable_thinking, req.reasoning_effort);
    const { jobs, tools, params } = await planChat(model, { ...req, sampling, n: req.n ?? 1, format, images, think }, { maxTokens, format: "response_format" });
    const answer = startAnswer(model, jobs, clientGoneSignal(ctx), params, tools, req.stream ? "stream" : "whole");
    const meta: ResponseMeta = { id: responseId("chatcmpl"), created: unixNow(), model: model.id };
    const logprobs = req.logprobs ? new LogprobFormatter(model) : null;

    if (req.stream) {
      const includeUsage = req.stream_options?.include_usage === true;
      sendStream(ctx, chatChunks(meta, answer, logprobs, includeUsage), SSE, requestLog(ctx, log));
      return;
    }
    const whole = await collectAnswer(answer);
    ctx.body = {
      ...meta,
      object: "chat.completion",
      choices: whole.choices.map((c, index) => ({
        index,
        // OpenAI: content is null when the answer is only calls.
        message: {
          role: "assistant",
          content: c.calls.length && !c.content.trim() ? null : c.content,
          ...(c.reasoning ? { reasoning_content: c.reasoning } : {}),
          refusal: null,
          ...(c.calls.length ? { tool_calls: c.calls.map(openaiCall) } : {}),
        },
        logprobs: logprobs ? logprobs.chat(c.logprobs) : null,
        finish_reason: c.done.finishReason,
      })),
      usage: whole.usage.toOpenAI(),
    };
  });
}

/** `chat_template_kwargs.enable_thinking` wins over `reasoning_effort` (it names the template's own switch). */
function openaiCall(c: OutputCall) {
  return { id: c.id, type: "function" as const, function: { name: c.name, arguments: c.arguments } };
}

/**
 * The chunk sequence: a role delta per choice first (sent at once, before prefill ends),
 * content deltas, a finish chunk per choice, then — only with include_usage — a usage chunk
 * with `choices: []`. With include_usage every other chunk carries `usage: null`, as OpenAI.
 * A call goes out as two deltas, as OpenAI streams them: its index, id, type and name with
 * empty arguments, then its arguments. A delta's logprobs ride on its first chunk.
 */
async function* chatChunks(meta: ResponseMeta, { events, jobs }: Answer, logprobs: LogprobFormatter | null, includeUsage: boolean): AsyncGenerator<unknown> {
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
  for await (const ev of events) {
    const { index } = ev;
    let lps = logprobs && ev.logprobs.length ? logprobs.chat(ev.logprobs) : null;
    const take = () => {
      const l = lps;
      lps = null;
      return l;
    };
    if (ev.type === "done") {
      usage.add(index, ev);
      yield chunk([{ index, delta: {}, logprobs: take(), finish_reason: ev.finishReason }]);
      continue;
    }
    yield* deltaChunks(ev, take, chunk);
  }
  if (includeUsage) yield chunk([], usage.toOpenAI());
}

function* deltaChunks(ev: Extract<AnswerEvent, { type: "delta" }>, take: () => unknown, chunk: (choices: unknown[]) => unknown) {
  const { index } = ev;
  if (ev.reasoning) yield chunk([{ index, delta: { reasoning_content: ev.reasoning }, logprobs: take(), finish_reason: null }]);
  if (ev.content) yield chunk([{ index, delta: { content: ev.content }, logprobs: take(), finish_reason: null }]);
  for (const c of ev.calls) {
    const head = { index: c.index, id: c.id, type: "function", function: { name: c.name, arguments: "" } };
    yield chunk([{ index, delta: { tool_calls: [head] }, logprobs: take(), finish_reason: null }]);
    yield chunk([{ index, delta: { tool_calls: [{ index: c.index, function: { arguments: c.arguments } }] }, logprobs: null, finish_reason: null }]);
  }
}
