/**
 * Embeddings and ranking, OpenAI-style and as llama-server and vLLM serve them:
 *
 * - POST /v1/embeddings (OpenAI): `{object: "list", data: [{object: "embedding", index,
 *   embedding}], model, usage}`, `embedding` floats or base64 (little-endian float32). One
 *   vector per input: a per-token model (ColBERT) is a 400, as llama-server answers. A body with
 *   llama-server's `content` instead of `input` gets the non-OAI answer below, as llama-server.
 * - POST /embeddings, /embedding (llama-server's non-OAI form): `[{index, embedding: [[…]]}]`,
 *   one vector per token for a per-token model, else the pooled vector alone in the array.
 * - POST /v1/rerank, /rerank, /v1/reranking, /reranking (Jina/Cohere, llama-server's aliases):
 *   `{model, object: "list", usage, results: [{index, relevance_score, document?}]}`, highest
 *   score first, `top_n` kept; TEI's `texts` body gets TEI's bare `[{index, score, text?}]`.
 * - POST /v1/score, /score (vLLM): `{id, object: "list", created, model, data: [{index,
 *   object: "score", score}], usage}`; `text_1` one text against each of `text_2`, or pairs.
 */
import type Router from "@koa/router";
import type { Context } from "koa";
import { openaiEmbeddingsRequest, rerankRequest, scoreRequest, type OpenAIEmbeddingsRequest } from "../../../schemas/embeddings.ts";
import { base64Floats, embedInputs, inputList, rankDocuments, rankOrder, requirePooled } from "../../../service/embeddings.ts";
import { RequestError } from "../../../service/errors.ts";
import { parseBody } from "../../validate.ts";
import { clientGoneSignal, useModel, type RouteDeps } from "../common.ts";
import { unixNow } from "./common.ts";
import { randomBytes } from "node:crypto";

export function embeddingsRoutes(router: Router, { models }: RouteDeps): void {
  router.post("/v1/embeddings", async (ctx) => {
    const req = parseBody(openaiEmbeddingsRequest, ctx.request.body);
    ctx.body = req.input == null && req.content != null ? await llamaEmbeddings(ctx, req, models) : await openaiEmbeddings(ctx, req, models);
  });

  for (const route of ["/embeddings", "/embedding"]) {
    router.post(route, async (ctx) => {
      ctx.body = await llamaEmbeddings(ctx, parseBody(openaiEmbeddingsRequest, ctx.request.body), models);
    });
  }

  for (const route of ["/v1/rerank", "/rerank", "/v1/reranking", "/reranking"]) {
    router.post(route, async (ctx) => {
      const req = parseBody(rerankRequest, ctx.request.body);
      const tei = req.documents == null && req.texts != null;
      const docs = req.documents ?? req.texts;
      if (docs == null) throw new RequestError("INVALID_REQUEST", "Missing required parameter: 'documents'.", "documents", "missing_required_parameter");
      const texts = docs.map((d) => (typeof d === "string" ? d : d.text));
      const model = await useModel(ctx, models, req.model);
      const ranked = await rankDocuments(model, req.query, texts, clientGoneSignal(ctx));
      const order = rankOrder(ranked.scores, req.top_n);
      if (tei) {
        ctx.body = order.map(({ index, score }) => ({ index, score, ...(req.return_text ? { text: texts[index] } : {}) }));
        return;
      }
      ctx.body = {
        model: req.model ?? model.id,
        object: "list",
        usage: { prompt_tokens: ranked.promptTokens, total_tokens: ranked.promptTokens },
        results: order.map(({ index, score }) => ({ index, relevance_score: score, ...(req.return_documents ? { document: { text: texts[index] } } : {}) })),
      };
    });
  }

  for (const route of ["/v1/score", "/score"]) {
    router.post(route, async (ctx) => {
      const req = parseBody(scoreRequest, ctx.request.body);
      const model = await useModel(ctx, models, req.model);
      const signal = clientGoneSignal(ctx);
      const [a, b] = [req.text_1, req.text_2].map((t) => (typeof t === "string" ? [t] : t));
      if (a.length !== 1 && a.length !== b.length) {
        throw new RequestError("INVALID_REQUEST", `'text_1' has ${a.length} texts and 'text_2' ${b.length}: give one text_1, or as many as text_2.`, "text_1");
      }
      let scores: number[];
      let tokens = 0;
      if (a.length === 1) {
        const r = await rankDocuments(model, a[0], b, signal);
        [scores, tokens] = [r.scores, r.promptTokens];
      } else {
        const rs = await Promise.all(a.map((q, i) => rankDocuments(model, q, [b[i]], signal)));
        scores = rs.map((r) => r.scores[0]);
        tokens = rs.reduce((n, r) => n + r.promptTokens, 0);
      }
      ctx.body = {
        id: `score-${randomBytes(12).toString("hex")}`,
        object: "list",
        created: unixNow(),
        model: req.model ?? model.id,
        data: scores.map((score, index) => ({ index, object: "score", score })),
        usage: { prompt_tokens: tokens, total_tokens: tokens, completion_tokens: 0 },
      };
    });
  }
}

async function openaiEmbeddings(ctx: Context, req: OpenAIEmbeddingsRequest, models: RouteDeps["models"]) {
  if (req.input == null) throw new RequestError("INVALID_REQUEST", "Missing required parameter: 'input'.", "input", "missing_required_parameter");
  const items = inputList(req.input);
  const model = await useModel(ctx, models, req.model);
  requirePooled(model, "/v1/embeddings");
  const outs = await embedInputs(model, items, { normalize: req.embd_normalize ?? undefined, dimensions: req.dimensions ?? undefined, signal: clientGoneSignal(ctx) });
  const base64 = req.encoding_format === "base64";
  const tokens = outs.reduce((n, o) => n + o.promptTokens, 0);
  return {
    object: "list",
    data: outs.map((o, index) => ({ object: "embedding", index, embedding: base64 ? base64Floats(o.vectors[0]) : Array.from(o.vectors[0]) })),
    model: req.model ?? model.id,
    usage: { prompt_tokens: tokens, total_tokens: tokens },
  };
}

/** llama-server's non-OAI answer: every input's vectors (one per token, or the pooled one alone). */
async function llamaEmbeddings(ctx: Context, req: OpenAIEmbeddingsRequest, models: RouteDeps["models"]) {
  const input = req.content ?? req.input;
  const param = req.content != null ? "content" : "input";
  if (input == null) throw new RequestError("INVALID_REQUEST", `"input" or "content" must be provided`, "content", "missing_required_parameter");
  const model = await useModel(ctx, models, req.model);
  const outs = await embedInputs(model, inputList(input), { param, normalize: req.embd_normalize ?? undefined, dimensions: req.dimensions ?? undefined, signal: clientGoneSignal(ctx) });
  return outs.map((o, index) => ({ index, embedding: o.vectors.map((v) => Array.from(v)) }));
}
