/** POST /api/show (Ollama): a served model's details, GGUF metadata, template and capabilities. */
import type Router from "@koa/router";
import { showRequest } from "../../../schemas/show.ts";
import type { ModelRegistry } from "../../../service/registry.ts";
import { showModel } from "../../../service/show.ts";
import { parseBody } from "../../validate.ts";

export function showRoutes(router: Router, { registry }: { registry: ModelRegistry }): void {
  router.post("/api/show", async (ctx) => {
    ctx.body = await showModel(registry, parseBody(showRequest, ctx.request.body));
  });
}
