/**
 * POST /api/chat (Ollama): NDJSON chunks `{model, created_at, message, done}` by default, one
 * object with `"stream": false`; the last has `done: true`, `done_reason` and the metrics.
 * Tool calls come out whole, `arguments` as an object, in a chunk of their own; the model's
 * thinking comes in `message.thinking` (`think` turns it on or off in the template). No messages
 * at all only loads the model (`done_reason: "load"`), or with `keep_alive: 0` unloads it
 * (`done_reason: "unload"`).
 */
import type Router from "@koa/router";
import { ollamaChatRequest } from "../../../schemas/ollama.ts";
import { collectAnswer, startAnswer, type AnswerEvent } from "../../../service/answer.ts";
import { planChat } from "../../../service/chat.ts";
import { formatGrammar, ollamaSampling, toChatMessages } from "../../../service/native.ts";
import { ollamaThink } from "../../../service/reasoning-plan.ts";
import type { OutputCall } from "../../../service/tools/output.ts";
import { NDJSON, sendStream } from "../../stream.ts";
import { requestLog } from "../../request-log.ts";
import { parseBody } from "../../validate.ts";
import { clientGoneSignal, useModel, type RouteDeps } from "../common.ts";
import { logprobsField, OllamaLogprobs, withLogprobs } from "./logprobs.ts";
import { createdAt, doneMetrics, doneReason, loadOrUnload } from "./common.ts";

export function nativeChatRoutes(router: Router, { models, log, images }: RouteDeps): void {
  router.post("/api/chat", async (ctx) => {
    const started = performance.now();
    const req = parseBody(ollamaChatRequest, ctx.request.body);
    const head = () => ({ model: req.model, created_at: createdAt() });
    if (!req.messages?.length) {
      const loaded = await loadOrUnload(ctx, models, req.model, req.keep_alive);
      ctx.body = { ...head(), message: { role: "assistant", content: "" }, done_reason: loaded, done: true };
      return;
    }
    const model = await useModel(ctx, models, req.model, req.keep_alive ?? undefined);
    const sampling = withLogprobs(ollamaSampling(req.options, model.info.nVocab, model.profile?.params), req);
    const input = { messages: toChatMessages(req.messages), tools: req.tools, sampling, n: 1, format: formatGrammar(req.format), images, think: ollamaThink(req.think) };
    const { jobs, tools, params } = await planChat(model, input, { maxTokens: "options.num_predict", format: "format" });
    const answer = startAnswer(model, jobs, clientGoneSignal(ctx), params, tools, req.stream === false ? "whole" : "stream");
    const logprobs = req.logprobs ? new OllamaLogprobs(model) : null;

    if (req.stream === false) {
      const [c] = (await collectAnswer(answer)).choices;
      ctx.body = { ...head(), message: message(c.content, c.calls, c.reasoning), done_reason: doneReason(c.done), done: true, ...doneMetrics(c.done, started), ...logprobsField(logprobs, c.logprobs) };
      return;
    }
    sendStream(ctx, chunks(answer.events, head, started, logprobs), NDJSON, requestLog(ctx, log));
  });
}

function message(content: string, calls: OutputCall[], thinking = "") {
  const toolCalls = calls.map((c) => ({ id: c.id, function: { index: c.index, name: c.name, arguments: c.args } }));
  return { role: "assistant", content, ...(thinking ? { thinking } : {}), ...(toolCalls.length ? { tool_calls: toolCalls } : {}) };
}

/** A delta's logprobs ride on its first chunk; the final chunk has those of tokens whose text never settled. */
async function* chunks(events: AsyncIterable<AnswerEvent>, head: () => object, started: number, logprobs: OllamaLogprobs | null): AsyncGenerator<unknown> {
  for await (const ev of events) {
    let lps = logprobsField(logprobs, ev.logprobs);
    const take = () => {
      const out = lps;
      lps = {};
      return out;
    };
    if (ev.type === "done") {
      yield { ...head(), message: message("", []), done_reason: doneReason(ev), done: true, ...doneMetrics(ev, started), ...take() };
      continue;
    }
    if (ev.content || ev.reasoning) yield { ...head(), message: message(ev.content, [], ev.reasoning), done: false, ...take() };
    if (ev.calls.length) yield { ...head(), message: message("", ev.calls), done: false, ...take() };
    // Tokens that showed nothing in this delta keep their entries all the same.
    if (lps.logprobs) yield { ...head(), message: message("", []), done: false, ...take() };
  }
}
