/**
 * The chat page (ui/, built by scripts/build-ui.ts into one file, ui/build/index.html) on
 * `GET /` for a browser — a request whose Accept names text/html — as llama-server serves its
 * web UI at `/`. Every other client (Ollama's heartbeat, curl, tests) still gets the plain
 * "Wick is running" from health.ts: this route hands those on. `/` is open without the API key
 * (auth.ts), so the page loads first and then asks for the key. Registered before health.ts.
 * The page is read from disk on each request (it is small), so a rebuilt page needs no restart;
 * without a build a browser gets the plain text too.
 */
import { readFile } from "node:fs/promises";
import type Router from "@koa/router";
import { UI_PAGE } from "../package-files.ts";

export function uiRoutes(router: Router): void {
  router.get("/", async (ctx, next) => {
    const page = /\btext\/html\b/i.test(ctx.get("accept")) ? await readFile(UI_PAGE).catch(() => null) : null;
    if (!page) {
      await next();
      return;
    }
    ctx.type = "text/html; charset=utf-8";
    ctx.set("Cache-Control", "no-cache");
    ctx.set("X-Content-Type-Options", "nosniff");
    ctx.set("Referrer-Policy", "no-referrer");
    ctx.set("Vary", "Accept");
    ctx.body = page;
  });
}
