/**
 * API key check: `Authorization: Bearer <key>` (OpenAI clients) or `X-Api-Key: <key>`
 * (llama-server, Anthropic-style clients). Compared in constant time over SHA-256 digests, so
 * neither the key's content nor its length leaks through timing. /health stays open for
 * load balancers and orchestrators, `/` and /api/version for Ollama clients' liveness probes;
 * /metrics too with --metrics-public (a Prometheus scraper often has no secret to send).
 * The presented key is never logged: it is neither in the request log nor in an error.
 */
import { createHash, timingSafeEqual } from "node:crypto";
import type { Middleware } from "koa";
import { HttpError } from "./errors.ts";

const OPEN_PATHS = ["/health", "/", "/api/version"];

export function apiKeyAuth(apiKey: string, opts: { metricsPublic?: boolean } = {}): Middleware {
  const expected = digest(apiKey);
  const open = new Set([...OPEN_PATHS, ...(opts.metricsPublic ? ["/metrics"] : [])]);
  return async (ctx, next) => {
    if (open.has(ctx.path)) {
      await next();
      return;
    }
    const given = presentedKey(ctx.get("authorization"), ctx.get("x-api-key"));
    if (given === null) {
      throw new HttpError("UNAUTHORIZED", "You didn't provide an API key. Send it as 'Authorization: Bearer <key>' or 'X-Api-Key: <key>'.");
    }
    if (!timingSafeEqual(digest(given), expected)) {
      throw new HttpError("UNAUTHORIZED", "Incorrect API key provided.");
    }
    await next();
  };
}

function presentedKey(authorization: string, xApiKey: string): string | null {
  const bearer = /^Bearer\s+(.+)$/i.exec(authorization.trim());
  if (bearer) return bearer[1].trim();
  if (xApiKey) return xApiKey.trim();
  return null;
}

function digest(s: string): Buffer {
  return createHash("sha256").update(s, "utf8").digest();
}
