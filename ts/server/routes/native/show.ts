/** POST /api/show (Ollama): a served or stored model's details, GGUF metadata, Modelfile parts and capabilities. */
import type Router from "@koa/router";
import { showRequest } from "../../../schemas/show.ts";
import { showModel } from "../../../service/show.ts";
import { parseBody } from "../../validate.ts";
import type { RouteDeps } from "../common.ts";

export function showRoutes(router: Router, { models }: RouteDeps): void {
  router.post("/api/show", async (ctx) => {
    ctx.body = await showModel(models, parseBody(showRequest, ctx.request.body));
  });
}
