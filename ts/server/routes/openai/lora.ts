/**
 * LoRA adapter routes of the `-m` model (or the one loaded model), in OpenAI's error shape:
 *
 * - llama-server: `GET /lora-adapters` → `[{ id, path, scale }]` (scale: what requests naming no
 *   adapters get), `POST /lora-adapters` with `[{ id, scale }]` sets those scales → `{ success: true }`.
 * - vLLM: `POST /v1/load_lora_adapter` `{ lora_name, lora_path }` → 200 and a plain-text
 *   "Success: …" line; the adapter is then a model id of its own (`/v1/models`, `model`), off for
 *   requests naming the base. `POST /v1/unload_lora_adapter` `{ lora_name }`: 404 when unknown.
 */
import type Router from "@koa/router";
import { loadLoraAdapterRequest, loraScales, unloadLoraAdapterRequest } from "../../../schemas/lora.ts";
import { RequestError } from "../../../service/errors.ts";
import { parseBody } from "../../validate.ts";
import type { RouteDeps } from "../common.ts";

export function loraRoutes(router: Router, { models }: RouteDeps): void {
  router.get("/lora-adapters", async (ctx) => {
    const lease = await models.adapterBase();
    try {
      ctx.body = lease.model.engine.adapters().map((a) => ({ id: a.id, path: a.path, scale: a.scale, name: a.name }));
    } finally {
      lease.release();
    }
  });
  router.post("/lora-adapters", async (ctx) => {
    if (!Array.isArray(ctx.request.body)) throw new RequestError("INVALID_REQUEST", "Request body must be an array of { id, scale }.");
    await models.setAdapterScales(parseBody(loraScales, ctx.request.body));
    ctx.body = { success: true };
  });
  router.post("/v1/load_lora_adapter", async (ctx) => {
    const req = parseBody(loadLoraAdapterRequest, ctx.request.body);
    await models.loadAdapter({ path: req.lora_path, name: req.lora_name, scale: 0 });
    ctx.type = "text/plain";
    ctx.body = `Success: LoRA adapter '${req.lora_name}' added successfully.`;
  });
  router.post("/v1/unload_lora_adapter", (ctx) => {
    const req = parseBody(unloadLoraAdapterRequest, ctx.request.body);
    models.unloadAdapter(req.lora_name);
    ctx.type = "text/plain";
    ctx.body = `Success: LoRA adapter '${req.lora_name}' removed successfully.`;
  });
}
