/** GET /health: liveness for load balancers (no API key; llama-server and mlx-lm shape). */
import type Router from "@koa/router";
import type { ModelRegistry } from "../service/registry.ts";

export function healthRoutes(router: Router, registry: ModelRegistry): void {
  router.get("/health", (ctx) => {
    ctx.body = { status: "ok", models: registry.list().map((m) => m.id) };
  });
}
