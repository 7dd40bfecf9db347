/**
 * Ollama's embedding routes. POST /api/embed: `input` a text or texts → `{model, embeddings,
 * total_duration, load_duration, prompt_eval_count}`, each vector L2-normalised (after
 * `dimensions` cut it, as Ollama); inputs over the context are cut to fit unless `truncate` is
 * false (then a 400). No input (or `[]`) only loads the model, or unloads it with `keep_alive:
 * 0`, as Ollama answers an empty request. POST /api/embeddings (the older route): `prompt` →
 * `{embedding}`, the vector as the model pools it, not normalised (as Ollama's). A model whose
 * vectors are per token (ColBERT) cannot answer either: a 400.
 */
import type Router from "@koa/router";
import { ollamaEmbeddingsRequest, ollamaEmbedRequest } from "../../../schemas/embeddings.ts";
import { embedInputs, requirePooled } from "../../../service/embeddings.ts";
import { parseBody } from "../../validate.ts";
import { clientGoneSignal, useModel, type RouteDeps } from "../common.ts";
import { loadOrUnload } from "./common.ts";

const NS_PER_MS = 1e6;

export function nativeEmbedRoutes(router: Router, { models }: RouteDeps): void {
  router.post("/api/embed", async (ctx) => {
    const started = performance.now();
    const req = parseBody(ollamaEmbedRequest, ctx.request.body);
    const items = req.input == null ? [] : typeof req.input === "string" ? [req.input] : req.input;
    if (items.length === 0) {
      await loadOrUnload(ctx, models, req.model, req.keep_alive);
      ctx.body = { model: req.model, embeddings: [] };
      return;
    }
    const loadStart = performance.now();
    const model = await useModel(ctx, models, req.model, req.keep_alive ?? undefined);
    const loadMs = performance.now() - loadStart;
    requirePooled(model, "/api/embed");
    const outs = await embedInputs(model, items, { truncate: req.truncate ?? true, dimensions: req.dimensions ?? undefined, signal: clientGoneSignal(ctx) });
    ctx.body = {
      model: req.model,
      embeddings: outs.map((o) => Array.from(o.vectors[0])),
      total_duration: Math.round((performance.now() - started) * NS_PER_MS),
      load_duration: Math.round(loadMs * NS_PER_MS),
      prompt_eval_count: outs.reduce((n, o) => n + o.promptTokens, 0),
    };
  });

  router.post("/api/embeddings", async (ctx) => {
    const req = parseBody(ollamaEmbeddingsRequest, ctx.request.body);
    if (!req.prompt) {
      // Ollama answers an empty prompt with an empty vector (after loading the model).
      await loadOrUnload(ctx, models, req.model, req.keep_alive);
      ctx.body = { embedding: [] };
      return;
    }
    const model = await useModel(ctx, models, req.model, req.keep_alive ?? undefined);
    requirePooled(model, "/api/embeddings");
    const [out] = await embedInputs(model, [req.prompt], { param: "prompt", normalize: -1, truncate: true, signal: clientGoneSignal(ctx) });
    ctx.body = { embedding: Array.from(out.vectors[0]) };
  });
}
