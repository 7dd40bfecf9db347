/**
 * Liveness: GET /health for load balancers (llama-server and mlx-lm shape), and Ollama's
 * `GET /` / `HEAD /` ("… is running", what its CLI heartbeats) and `GET /api/version`. None
 * needs the API key: clients probe them before they know one is set.
 */
import { readFileSync } from "node:fs";
import type Router from "@koa/router";
import type { ModelRegistry } from "../service/registry.ts";
import { PACKAGE_JSON } from "./package-files.ts";

const VERSION = (JSON.parse(readFileSync(PACKAGE_JSON, "utf8")) as { version: string }).version;

export function healthRoutes(router: Router, registry: ModelRegistry): void {
  router.get("/health", (ctx) => {
    const models = registry.list();
    const down = models.flatMap((m) => {
      const h = m.engine.health();
      return h.ok ? [] : [{ model: m.id, reason: h.reason ?? "unavailable" }];
    });
    if (down.length === 0) {
      ctx.body = { status: "ok", models: models.map((m) => m.id) };
      return;
    }
    // A dead engine reloads on the model's next request (ts/service/models.ts). The `error`
    // object is llama-server's 503 shape, for clients that read that one.
    const reason = down.map((d) => `model '${d.model}': ${d.reason}`).join("; ");
    ctx.status = 503;
    ctx.body = { status: "error", reason, models: models.map((m) => m.id), unhealthy: down, error: { code: 503, message: reason, type: "unavailable_error" } };
  });
  // koa-router answers HEAD from the GET route, with the same headers and no body.
  router.get("/", (ctx) => {
    ctx.type = "text/plain";
    ctx.body = "Wick is running";
  });
  router.get("/api/version", (ctx) => {
    ctx.body = { version: VERSION };
  });
}
