/**
 * POST /api/generate (Ollama): a prompt through the model's chat template (`system` as the
 * system message), or as-is with `raw`; `context` (token ids of an earlier exchange) goes
 * before it, and the final chunk gives back prompt + answer ids as the next `context`. NDJSON
 * `{model, created_at, response, done}` chunks by default, one object with `"stream": false`.
 * `template` renders this request with a Go template instead of the model's. An empty prompt
 * only loads the model (`done_reason: "load"`), or with `keep_alive: 0` unloads it.
 */
import type Router from "@koa/router";
import type { ChatMessage } from "../../../schemas/chat.ts";
import { ollamaGenerateRequest, type OllamaGenerateRequest } from "../../../schemas/ollama.ts";
import { RequestError } from "../../../service/errors.ts";
import { startChoices, type ChoiceEvent, type Job } from "../../../service/generation.ts";
import { formatGrammar, ollamaSampling } from "../../../service/native.ts";
import { requestTemplate, type RequestTemplate } from "../../../service/profile.ts";
import { chatPromptTokens, completionPromptTokens } from "../../../service/prompt.ts";
import type { ServedModel } from "../../../service/registry.ts";
import { sendNdjson } from "../../ndjson.ts";
import { clientGoneSignal } from "../../sse.ts";
import { parseBody } from "../../validate.ts";
import { useModel, type RouteDeps } from "../openai/common.ts";
import { createdAt, doneMetrics, doneReason, loadOrUnload } from "./common.ts";

export function nativeGenerateRoutes(router: Router, { models, log }: RouteDeps): void {
  router.post("/api/generate", async (ctx) => {
    const started = performance.now();
    const req = parseBody(ollamaGenerateRequest, ctx.request.body);
    const head = () => ({ model: req.model, created_at: createdAt() });
    if (!req.prompt && !req.context?.length) {
      const doneReason = await loadOrUnload(ctx, models, req.model, req.keep_alive);
      ctx.body = { ...head(), response: "", done_reason: doneReason, done: true };
      return;
    }
    unsupported(req);
    const template = req.raw ? undefined : requestTemplate(req.template);
    const model = await useModel(ctx, models, req.model, req.keep_alive);
    const promptTokens = generatePrompt(model, req, template);
    const options = { ...ollamaSampling(req.options, model.info.nVocab, model.profile?.params), promptTokens };
    const grammar = formatGrammar(req.format);
    if (grammar) options.grammar = grammar;
    const jobs: Job[] = [{ options, promptIndex: 0 }];
    const events = startChoices(model, jobs, clientGoneSignal(ctx), { prompt: "prompt", maxTokens: "options.num_predict", grammar: "format" });

    if (req.stream === false) {
      let response = "";
      const context = [...promptTokens];
      for await (const { event } of events) {
        if (event.type === "token") {
          response += event.text;
          context.push(...event.ids);
        } else {
          ctx.body = { ...head(), response, done: true, done_reason: doneReason(event.finishReason), ...(req.raw ? {} : { context }), ...doneMetrics(event, started) };
        }
      }
      return;
    }
    sendNdjson(ctx, chunks(events, promptTokens, !req.raw, head, started), ctx.state.log ?? log);
  });
}

/** Fields this server does not act on yet: refused clearly rather than silently ignored. */
function unsupported(req: OllamaGenerateRequest): void {
  if (req.images?.length) throw new RequestError("INVALID_REQUEST", "This model does not accept image input (it has no vision projector).", "images", "image_input_not_supported");
  if (req.suffix) throw new RequestError("INVALID_REQUEST", "This model does not support insert (fill-in-the-middle) with suffix.", "suffix");
}

function generatePrompt(model: ServedModel, req: OllamaGenerateRequest, goTemplate: RequestTemplate | undefined): number[] {
  const prompt = req.prompt ?? "";
  let ids: number[];
  if (req.raw) {
    ids = prompt ? completionPromptTokens(model, prompt)[0]! : [];
  } else {
    const messages: ChatMessage[] = [...(req.system ? [{ role: "system" as const, content: req.system }] : []), { role: "user", content: prompt }];
    // A continued exchange (`context`) already had the Modelfile's MESSAGEs.
    ids = chatPromptTokens(model, messages, { goTemplate, profileMessages: !req.context?.length });
  }
  const context = req.context ?? [];
  if (context.length === 0) return ids;
  const bad = context.findIndex((id) => id >= model.info.nVocab);
  if (bad >= 0) throw new RequestError("INVALID_REQUEST", `context[${bad}] is not a token id of this model.`, `context[${bad}]`);
  // The earlier exchange already began with BOS: a second one mid-sequence would be wrong.
  return [...context, ...(ids[0] === model.info.bosToken ? ids.slice(1) : ids)];
}

async function* chunks(events: AsyncIterable<ChoiceEvent>, promptTokens: number[], withContext: boolean, head: () => object, started: number): AsyncGenerator<unknown> {
  const context = [...promptTokens];
  for await (const { event } of events) {
    if (event.type === "token") {
      context.push(...event.ids);
      if (event.text) yield { ...head(), response: event.text, done: false };
    } else {
      yield { ...head(), response: "", done: true, done_reason: doneReason(event.finishReason), ...(withContext ? { context } : {}), ...doneMetrics(event, started) };
    }
  }
}
