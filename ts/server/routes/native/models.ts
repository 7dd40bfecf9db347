/**
 * Ollama's model-management routes: GET|HEAD /api/tags (the store), GET /api/ps (loaded
 * models), POST /api/create and /api/pull (progress streams), DELETE /api/delete, POST
 * /api/copy; POST /api/push answers 501 with a reason (embeddings: embed.ts).
 */
import type Router from "@koa/router";
import { copyRequest, createRequest, deleteRequest, pullRequest } from "../../../schemas/ollama-models.ts";
import { RequestError } from "../../../service/errors.ts";
import type { LoadedModel } from "../../../service/models.ts";
import { bodyName, copyModel, deleteModel, fileDigest, listTags, planCreate, planPull } from "../../../service/store.ts";
import { sendProgress } from "../../progress.ts";
import { requestLog } from "../../request-log.ts";
import { parseBody } from "../../validate.ts";
import type { RouteDeps } from "../common.ts";

export function nativeModelRoutes(router: Router, { models, log }: RouteDeps): void {
  // koa-router answers HEAD from the GET route.
  router.get("/api/tags", async (ctx) => {
    ctx.body = { models: await listTags(models) };
  });

  router.get("/api/ps", async (ctx) => {
    ctx.body = { models: await Promise.all(models.loaded().map(psModel)) };
  });

  router.post("/api/create", async (ctx) => {
    const req = parseBody(createRequest, ctx.request.body);
    const run = await planCreate(models, req);
    await sendProgress(ctx, run, req.stream !== false, requestLog(ctx, log));
  });

  router.post("/api/pull", async (ctx) => {
    const req = parseBody(pullRequest, ctx.request.body);
    const run = planPull(models, bodyName(req));
    await sendProgress(ctx, run, req.stream !== false, requestLog(ctx, log));
  });

  router.delete("/api/delete", async (ctx) => {
    await deleteModel(models, bodyName(parseBody(deleteRequest, ctx.request.body)));
    ctx.status = 200;
    ctx.body = ""; // Ollama answers 200 with an empty body
  });

  router.post("/api/copy", async (ctx) => {
    const req = parseBody(copyRequest, ctx.request.body);
    await copyModel(models, req.source, req.destination);
    ctx.status = 200;
    ctx.body = ""; // Ollama answers 200 with an empty body
  });

  router.post("/api/push", () => {
    throw new RequestError("NOT_IMPLEMENTED", "push is not supported: Wick has no registry to push to (models come from Hugging Face with /api/pull, or from a GGUF with /api/create)");
  });
}

/** The bytes of a model of `size` that sit on a GPU (see psModel). */
export function vramBytes(info: { device: string; deviceLayers?: number; nLayer: number }, size: number): number {
  if (!/^(cuda|metal)/.test(info.device)) return 0;
  if (info.deviceLayers === undefined || info.nLayer === 0) return size;
  return Math.round((size * info.deviceLayers) / info.nLayer);
}

/**
 * One /api/ps entry (Ollama's ProcessModelResponse). size_vram: the model's bytes on a GPU — all
 * of them on `cuda:N` or `metal`, the offloaded blocks' share when `-ngl` split them (Ollama
 * reports a split the same way: `ollama ps` shows it as a CPU/GPU percentage), 0 on the CPU
 * (`cpu`, `cpu-candle`).
 */
async function psModel({ model, size, expiresAt }: LoadedModel) {
  const stored = model.profile?.store;
  const family = model.info.architecture;
  return {
    name: model.id,
    model: model.id,
    size,
    // A model served from a file has the digest /api/tags gives it.
    digest: stored ? stored.digest.replace(/^sha256:/, "") : await fileDigest(model.path),
    details: {
      parent_model: "",
      format: "gguf",
      family: stored?.config?.model_family ?? family,
      families: stored?.config?.model_families ?? [family],
      parameter_size: stored?.config?.model_type ?? "",
      quantization_level: stored?.config?.file_type ?? "",
    },
    expires_at: expiresAt.toISOString(),
    size_vram: vramBytes(model.info, size),
    context_length: model.info.contextSize,
  };
}
