/**
 * GET /v1/models and GET /v1/models/{id}: the loaded models (with `max_model_len` and their
 * engine facts), then the store's models that are not loaded (they load on first use). Ids may
 * contain "/" (hub names), hence the wildcard. An id answers for every name that picks a model
 * exactly; unknown ids are 404 even though completions accept any name with a `-m` model served.
 */
import { promises as fsp } from "node:fs";
import type Router from "@koa/router";
import { RequestError, StoreError } from "../../../service/errors.ts";
import type { AdapterModel } from "../../../service/models.ts";
import type { ServedModel } from "../../../service/registry.ts";
import { listTags, type TagsModel } from "../../../service/store.ts";
import type { RouteDeps } from "../common.ts";

export function modelsRoutes(router: Router, { registry, models }: RouteDeps): void {
  router.get("/v1/models", async (ctx) => {
    const loaded = registry.list();
    const ids = new Set(loaded.map((m) => m.id));
    // Adapters served under their own names (vLLM lists them after their base, `parent` naming it).
    const adapters = models.adapterModels().filter((a) => !ids.has(a.adapter.name));
    const stored = (await listTags(models)).filter((m) => !ids.has(m.name) && !adapters.some((a) => a.adapter.name === m.name));
    ctx.body = { object: "list", data: [...loaded.map(modelObject), ...adapters.map(adapterObject), ...stored.map(storeObject)] };
  });
  router.get("/v1/models/{*id}", async (ctx) => {
    const id = String(ctx.params.id);
    const adapter = registry.find(id) ? undefined : models.adapterModel(id);
    if (adapter) {
      ctx.body = adapterObject(adapter);
      return;
    }
    // Every name that picks a model exactly (served name, `:latest`, store and hub spellings);
    // not the any-name fallback to the `-m` model, so an unknown id is still a 404.
    const found = await models.describe(id).catch((err: unknown) => {
      if (err instanceof StoreError && err.code === "INVALID_NAME") return undefined; // no model could have that name
      throw err;
    });
    if (!found) throw new RequestError("MODEL_NOT_FOUND", `The model '${id}' does not exist.`, "model");
    if (found.model) {
      ctx.body = modelObject(found.model);
      return;
    }
    const stat = await fsp.stat(found.path);
    ctx.body = { id: found.id, object: "model", created: Math.floor(stat.mtimeMs / 1000), owned_by: "wick" };
  });
}

/** OpenAI's model object, plus vLLM's `max_model_len` so clients can size prompts. */
function modelObject(m: ServedModel) {
  return {
    id: m.id,
    object: "model",
    created: m.created,
    owned_by: "wick",
    max_model_len: m.info.contextSize,
    meta: {
      architecture: m.info.architecture,
      n_params: m.info.nParams,
      n_ctx_train: m.info.nCtxTrain,
      n_vocab: m.info.nVocab,
      size: m.info.fileSize,
    },
  };
}

/** vLLM's model card of a LoRA adapter: `root` its file, `parent` the base model's id. */
function adapterObject({ adapter, base }: AdapterModel) {
  return { id: adapter.name, object: "model", created: base.created, owned_by: "wick", root: adapter.path, parent: base.id, max_model_len: base.info.contextSize };
}

/** A store model not loaded yet: `created` is when it was written to the store. */
function storeObject(m: TagsModel) {
  return { id: m.name, object: "model", created: Math.floor(Date.parse(m.modified_at) / 1000), owned_by: "wick" };
}
