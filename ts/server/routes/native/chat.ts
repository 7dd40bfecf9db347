/**
 * POST /api/chat (Ollama): NDJSON chunks `{model, created_at, message, done}` by default, one
 * object with `"stream": false`; the last has `done: true`, `done_reason` and the metrics.
 * Tool calls come out whole, `arguments` as an object, in a chunk of their own. No messages
 * at all only loads the model (`done_reason: "load"`), or with `keep_alive: 0` unloads it
 * (`done_reason: "unload"`).
 */
import type Router from "@koa/router";
import { ollamaChatRequest } from "../../../schemas/ollama.ts";
import { planChat } from "../../../service/chat.ts";
import { startChoices, type ChoiceEvent, type DoneEvent } from "../../../service/generation.ts";
import { formatGrammar, ollamaSampling, toChatMessages } from "../../../service/native.ts";
import { ToolOutput, type OutputCall } from "../../../service/tools/output.ts";
import { sendNdjson } from "../../ndjson.ts";
import { clientGoneSignal } from "../../sse.ts";
import { parseBody } from "../../validate.ts";
import { useModel, type RouteDeps } from "../openai/common.ts";
import { createdAt, doneMetrics, doneReason, loadOrUnload } from "./common.ts";

export function nativeChatRoutes(router: Router, { models, log, images }: RouteDeps): void {
  router.post("/api/chat", async (ctx) => {
    const started = performance.now();
    const req = parseBody(ollamaChatRequest, ctx.request.body);
    const head = () => ({ model: req.model, created_at: createdAt() });
    if (!req.messages?.length) {
      const doneReason = await loadOrUnload(ctx, models, req.model, req.keep_alive);
      ctx.body = { ...head(), message: { role: "assistant", content: "" }, done_reason: doneReason, done: true };
      return;
    }
    const model = await useModel(ctx, models, req.model, req.keep_alive);
    const sampling = ollamaSampling(req.options, model.info.nVocab, model.profile?.params);
    const input = { messages: toChatMessages(req.messages), tools: req.tools, sampling, n: 1, format: formatGrammar(req.format), images };
    const { jobs, tools, params } = await planChat(model, input, { maxTokens: "options.num_predict", format: "format" });
    const events = startChoices(model, jobs, clientGoneSignal(ctx), params);
    const out = new ToolOutput(tools);

    if (req.stream === false) {
      let content = "";
      const calls: OutputCall[] = [];
      let done: DoneEvent | undefined;
      for await (const { event } of events) {
        const d = event.type === "token" ? out.push(event.text) : out.finish();
        content += d.content;
        calls.push(...d.calls);
        if (event.type === "done") done = event;
      }
      ctx.body = { ...head(), message: message(content, calls), done_reason: doneReason(done!.finishReason), done: true, ...doneMetrics(done!, started) };
      return;
    }
    sendNdjson(ctx, chunks(events, out, head, started), ctx.state.log ?? log);
  });
}

function message(content: string, calls: OutputCall[]) {
  const toolCalls = calls.map((c) => ({ id: c.id, function: { index: c.index, name: c.name, arguments: c.args } }));
  return { role: "assistant", content, ...(toolCalls.length ? { tool_calls: toolCalls } : {}) };
}

async function* chunks(events: AsyncIterable<ChoiceEvent>, out: ToolOutput, head: () => object, started: number): AsyncGenerator<unknown> {
  for await (const { event } of events) {
    const d = event.type === "token" ? out.push(event.text) : out.finish();
    if (d.content) yield { ...head(), message: message(d.content, []), done: false };
    if (d.calls.length) yield { ...head(), message: message("", d.calls), done: false };
    if (event.type === "done") yield { ...head(), message: message("", []), done_reason: doneReason(event.finishReason), done: true, ...doneMetrics(event, started) };
  }
}
