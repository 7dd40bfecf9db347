/**
 * POST /api/generate (Ollama): a prompt through the model's chat template (`system` as the
 * system message), or as-is with `raw`; `context` (token ids of an earlier exchange) goes
 * before it, and the final chunk gives back prompt + answer ids as the next `context`. NDJSON
 * `{model, created_at, response, done}` chunks by default, one object with `"stream": false`.
 * `template` renders this request with a Go template instead of the model's. The model's thinking
 * comes in `thinking` (`think` turns it on or off in the template). An empty prompt
 * only loads the model (`done_reason: "load"`), or with `keep_alive: 0` unloads it.
 */
import type Router from "@koa/router";
import type { ChatMessage, ContentPart } from "../../../schemas/chat.ts";
import { ollamaGenerateRequest, type OllamaGenerateRequest } from "../../../schemas/ollama.ts";
import { RequestError } from "../../../service/errors.ts";
import { collectAnswer, startAnswer, type AnswerEvent } from "../../../service/answer.ts";
import type { Job } from "../../../service/generation.ts";
import { formatGrammar, ollamaSampling } from "../../../service/native.ts";
import { requestTemplate, type RequestTemplate } from "../../../service/profile.ts";
import { choiceReasoning, ollamaThink } from "../../../service/reasoning-plan.ts";
import { chatPrompt, completionPromptTokens, type ChatPrompt } from "../../../service/prompt.ts";
import { base64Ref, type ImageOptions } from "../../../service/images/index.ts";
import type { ServedModel } from "../../../service/registry.ts";
import { NDJSON, sendStream } from "../../stream.ts";
import { requestLog } from "../../request-log.ts";
import { parseBody } from "../../validate.ts";
import { clientGoneSignal, useModel, type RouteDeps } from "../common.ts";
import { logprobsField, OllamaLogprobs, withLogprobs } from "./logprobs.ts";
import { createdAt, doneMetrics, doneReason, loadOrUnload } from "./common.ts";

export function nativeGenerateRoutes(router: Router, { models, log, images }: RouteDeps): void {
  router.post("/api/generate", async (ctx) => {
    const started = performance.now();
    const req = parseBody(ollamaGenerateRequest, ctx.request.body);
    const head = () => ({ model: req.model, created_at: createdAt() });
    if (!req.prompt && !req.context?.length) {
      const loaded = await loadOrUnload(ctx, models, req.model, req.keep_alive);
      ctx.body = { ...head(), response: "", done_reason: loaded, done: true };
      return;
    }
    unsupported(req);
    const template = req.raw ? undefined : requestTemplate(req.template);
    const model = await useModel(ctx, models, req.model, req.keep_alive ?? undefined);
    const prompt = await generatePrompt(model, req, template, images);
    const promptTokens = prompt.tokens;
    const options = { ...withLogprobs(ollamaSampling(req.options, model.info.nVocab, model.profile?.params), req), promptTokens, ...(prompt.images.length ? { images: prompt.images } : {}) };
    const grammar = formatGrammar(req.format);
    if (grammar) options.grammar = grammar;
    // A raw prompt is the client's text: no template markers to keep, no thinking to split.
    const reasoning = req.raw ? undefined : choiceReasoning(model.reasoning, prompt.text);
    if (reasoning && model.reasoning.markerTokens.length) options.markerTokens = model.reasoning.markerTokens;
    const jobs: Job[] = [{ options, promptIndex: 0, ...(reasoning ? { reasoning } : {}) }];
    const answer = startAnswer(model, jobs, clientGoneSignal(ctx), { prompt: "prompt", maxTokens: "options.num_predict", grammar: "format" }, undefined, req.stream === false ? "whole" : "stream");
    const logprobs = req.logprobs ? new OllamaLogprobs(model) : null;

    if (req.stream === false) {
      const [c] = (await collectAnswer(answer)).choices;
      const context = [...promptTokens, ...c.done.tokens];
      ctx.body = {
        ...head(),
        response: c.content,
        ...thinking(c.reasoning),
        done: true,
        done_reason: doneReason(c.done),
        ...(req.raw ? {} : { context }),
        ...doneMetrics(c.done, started),
        ...logprobsField(logprobs, c.logprobs),
      };
      return;
    }
    sendStream(ctx, chunks(answer.events, { promptTokens, withContext: !req.raw, logprobs }, head, started), NDJSON, requestLog(ctx, log));
  });
}

/** Fields this server does not act on yet: refused clearly rather than silently ignored. */
function unsupported(req: OllamaGenerateRequest): void {
  if (req.images?.length && req.raw) throw new RequestError("INVALID_REQUEST", "Images cannot be combined with raw prompts.", "images");
  if (req.suffix) throw new RequestError("INVALID_REQUEST", "This model does not support insert (fill-in-the-middle) with suffix.", "suffix");
}

async function generatePrompt(model: ServedModel, req: OllamaGenerateRequest, goTemplate: RequestTemplate | undefined, images: ImageOptions): Promise<ChatPrompt> {
  const prompt = req.prompt ?? "";
  let out: ChatPrompt;
  if (req.raw) {
    out = { text: prompt, tokens: prompt ? completionPromptTokens(model, prompt)[0] : [], images: [] };
  } else {
    // Ollama puts the images before the prompt's text.
    const parts: ContentPart[] = (req.images ?? []).map((b64) => ({ type: "image_url", image_url: { url: base64Ref(b64) } }));
    const user: ChatMessage = { role: "user", content: parts.length ? [...parts, ...(prompt ? [{ type: "text" as const, text: prompt }] : [])] : prompt };
    const messages: ChatMessage[] = [...(req.system ? [{ role: "system" as const, content: req.system }] : []), user];
    // A continued exchange (`context`) already had the Modelfile's MESSAGEs.
    out = await chatPrompt(model, messages, { goTemplate, profileMessages: !req.context?.length, images, think: ollamaThink(req.think) });
  }
  const context = req.context ?? [];
  if (context.length === 0) return out;
  const bad = context.findIndex((id) => id >= model.info.nVocab);
  if (bad >= 0) throw new RequestError("INVALID_REQUEST", `context[${bad}] is not a token id of this model.`, `context[${bad}]`);
  // The earlier exchange already began with BOS: a second one mid-sequence would be wrong.
  const dropBos = out.tokens[0] === model.info.bosToken ? 1 : 0;
  const shift = context.length - dropBos;
  return { ...out, tokens: [...context, ...out.tokens.slice(dropBos)], images: out.images.map((i) => ({ ...i, at: i.at + shift })) };
}

interface ChunkOptions {
  promptTokens: number[];
  withContext: boolean;
  logprobs: OllamaLogprobs | null;
}

async function* chunks(events: AsyncIterable<AnswerEvent>, { promptTokens, withContext, logprobs }: ChunkOptions, head: () => object, started: number): AsyncGenerator<unknown> {
  for await (const ev of events) {
    const lps = logprobsField(logprobs, ev.logprobs);
    if (ev.type === "delta") {
      yield { ...head(), response: ev.content, ...thinking(ev.reasoning), done: false, ...lps };
    } else {
      const context = [...promptTokens, ...ev.tokens];
      yield { ...head(), response: "", done: true, done_reason: doneReason(ev), ...(withContext ? { context } : {}), ...doneMetrics(ev, started), ...lps };
    }
  }
}

/** Ollama's `thinking` field, present only when the model thought. */
function thinking(text: string): { thinking?: string } {
  return text ? { thinking: text } : {};
}
