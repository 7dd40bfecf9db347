/** GET /metrics: Prometheus text exposition (behind the API key, as vLLM serves it). */
import type Router from "@koa/router";
import type { ModelRegistry } from "../service/registry.ts";

export function metricsRoutes(router: Router, registry: ModelRegistry): void {
  router.get("/metrics", async (ctx) => {
    ctx.type = registry.metrics.contentType;
    ctx.body = await registry.metrics.text();
  });
}
