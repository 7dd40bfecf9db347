/**
 * POST /api/chat (Ollama): NDJSON chunks `{model, created_at, message, done}` by default, one
 * object with `"stream": false`; the last has `done: true`, `done_reason` and the metrics.
 * Tool calls come out whole, `arguments` as an object, in a chunk of their own. No messages
 * at all only loads the model (`done_reason: "load"`), or with `keep_alive: 0` unloads it
 * (`done_reason: "unload"`).
 */
import type Router from "@koa/router";
import { ollamaChatRequest } from "../../../schemas/ollama.ts";
import { collectAnswer, startAnswer, type AnswerEvent } from "../../../service/answer.ts";
import { planChat } from "../../../service/chat.ts";
import { formatGrammar, ollamaSampling, toChatMessages } from "../../../service/native.ts";
import type { OutputCall } from "../../../service/tools/output.ts";
import { NDJSON, sendStream } from "../../stream.ts";
import { requestLog } from "../../request-log.ts";
import { parseBody } from "../../validate.ts";
import { clientGoneSignal, useModel, type RouteDeps } from "../common.ts";
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
    const sampling = ollamaSampling(req.options, model.info.nVocab, model.profile?.params);
    const input = { messages: toChatMessages(req.messages), tools: req.tools, sampling, n: 1, format: formatGrammar(req.format), images };
    const { jobs, tools, params } = await planChat(model, input, { maxTokens: "options.num_predict", format: "format" });
    const answer = startAnswer(model, jobs, clientGoneSignal(ctx), params, tools);

    if (req.stream === false) {
      const [c] = (await collectAnswer(answer)).choices;
      ctx.body = { ...head(), message: message(c.content, c.calls), done_reason: doneReason(c.done), done: true, ...doneMetrics(c.done, started) };
      return;
    }
    sendStream(ctx, chunks(answer.events, head, started), NDJSON, requestLog(ctx, log));
  });
}

function message(content: string, calls: OutputCall[]) {
  const toolCalls = calls.map((c) => ({ id: c.id, function: { index: c.index, name: c.name, arguments: c.args } }));
  return { role: "assistant", content, ...(toolCalls.length ? { tool_calls: toolCalls } : {}) };
}

async function* chunks(events: AsyncIterable<AnswerEvent>, head: () => object, started: number): AsyncGenerator<unknown> {
  for await (const ev of events) {
    if (ev.type === "done") {
      yield { ...head(), message: message("", []), done_reason: doneReason(ev), done: true, ...doneMetrics(ev, started) };
      continue;
    }
    if (ev.content) yield { ...head(), message: message(ev.content, []), done: false };
    if (ev.calls.length) yield { ...head(), message: message("", ev.calls), done: false };
  }
}
