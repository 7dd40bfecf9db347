/**
 * GET /v1/models and GET /v1/models/{id}. Ids may contain "/" (hub names), hence the
 * wildcard. Unknown ids are 404 even though completions accept any name with one model served.
 */
import type Router from "@koa/router";
import type { ServedModel } from "../../../service/registry.ts";
import { RequestError } from "../../../service/errors.ts";
import type { RouteDeps } from "./common.ts";

export function modelsRoutes(router: Router, { registry }: RouteDeps): void {
  router.get("/v1/models", (ctx) => {
    ctx.body = { object: "list", data: registry.list().map(modelObject) };
  });
  router.get("/v1/models/{*id}", (ctx) => {
    const id = String(ctx.params.id);
    const model = registry.get(id);
    if (!model) throw new RequestError("MODEL_NOT_FOUND", `The model '${id}' does not exist.`, "model");
    ctx.body = modelObject(model);
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
