/**
 * CORS, off unless `--cors` names origins (a list, or `*` for any). An allowed origin is
 * echoed in `Access-Control-Allow-Origin` (with `Vary: Origin`, so caches keep answers per
 * origin apart); any other origin gets no CORS header at all, so browsers refuse the answer.
 * Preflights (`OPTIONS` with `Access-Control-Request-Method`) from allowed origins are answered
 * here, before the API key check: browsers never send credentials on a preflight.
 */
import type { Middleware } from "koa";

const ALLOW_METHODS = "GET, HEAD, POST, DELETE, OPTIONS";
const ALLOW_HEADERS = "Authorization, Content-Type, X-Api-Key, X-Request-Id";
/** Response headers a browser script may read: the request id and the retry hint of a 503. */
const EXPOSE_HEADERS = "X-Request-Id, Retry-After";

/** `*` allows any origin; otherwise exact origins (`scheme://host[:port]`). */
export type CorsOrigins = "*" | string[];

/** `--cors` / `--allowed-origins` values: `*`, a comma list, or vLLM's JSON list (`'["*"]'`). */
export function parseCorsOrigins(raw: string): CorsOrigins {
  const text = raw.trim();
  let items: string[];
  if (text.startsWith("[")) {
    const parsed: unknown = JSON.parse(text);
    if (!Array.isArray(parsed) || !parsed.every((o) => typeof o === "string")) throw new Error("expected a JSON list of origins");
    items = parsed;
  } else items = text.split(",");
  items = items.map((o) => o.trim().replace(/\/+$/, "")).filter(Boolean);
  if (items.length === 0) throw new Error("expected origins, as a comma list or *");
  if (items.includes("*")) return "*";
  for (const o of items) {
    let url: URL;
    try {
      url = new URL(o);
    } catch {
      throw new Error(`${o} is not an origin (scheme://host[:port])`);
    }
    if (url.origin !== o.toLowerCase()) throw new Error(`${o} is not an origin (scheme://host[:port], no path)`);
  }
  return items.map((o) => o.toLowerCase());
}

export function cors(origins: CorsOrigins): Middleware {
  const allowed = (origin: string) => origins === "*" || origins.includes(origin.toLowerCase());
  return async (ctx, next) => {
    const origin = ctx.get("origin");
    ctx.vary("Origin");
    if (!origin || !allowed(origin)) {
      await next();
      return;
    }
    ctx.set("Access-Control-Allow-Origin", origins === "*" ? "*" : origin);
    if (ctx.method === "OPTIONS" && ctx.get("access-control-request-method")) {
      ctx.set({
        "Access-Control-Allow-Methods": ALLOW_METHODS,
        // Echo what the browser asks for: the openai SDK adds its own x-stainless-* headers.
        "Access-Control-Allow-Headers": ctx.get("access-control-request-headers") || ALLOW_HEADERS,
        "Access-Control-Max-Age": "600",
      });
      ctx.status = 204;
      return;
    }
    ctx.set("Access-Control-Expose-Headers", EXPOSE_HEADERS);
    await next();
  };
}
