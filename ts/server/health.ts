/**
 * Liveness: GET /health for load balancers (llama-server and mlx-lm shape), and Ollama's
 * `GET /` / `HEAD /` ("… is running", what its CLI heartbeats) and `GET /api/version`. None
 * needs the API key: clients probe them before they know one is set.
 */
import { readFileSync } from "node:fs";
import type Router from "@koa/router";
import type { ModelRegistry } from "../service/registry.ts";

const VERSION = (JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8")) as { version: string }).version;

export function healthRoutes(router: Router, registry: ModelRegistry): void {
  router.get("/health", (ctx) => {
    ctx.body = { status: "ok", models: registry.list().map((m) => m.id) };
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
