/** Pieces the routes share: ids, finish reasons, what a route needs from the app, and holding the model a request uses. */
import { randomBytes } from "node:crypto";
import type { Logger } from "pino";
import type { DoneEvent } from "../../../service/generation.ts";
import type { Context } from "koa";
import { keepAliveMs } from "../../../service/keep-alive.ts";
import type { ModelManager } from "../../../service/models.ts";
import type { ModelRegistry, ServedModel } from "../../../service/registry.ts";
import type { ImageOptions } from "../../../service/images/index.ts";

export interface RouteDeps {
  registry: ModelRegistry;
  models: ModelManager;
  log: Logger;
  /** How request images are fetched and decoded. */
  images: ImageOptions;
}

/**
 * The model a request names, loaded if need be and held until the response is finished (or the
 * client leaves): its keep-alive only starts then. `keepAlive` is the request's `keep_alive`.
 */
export async function useModel(ctx: Context, models: ModelManager, name: string | null | undefined, keepAlive?: string | number | null): Promise<ServedModel> {
  const lease = await models.acquire(name, { keepAliveMs: keepAlive == null ? undefined : keepAliveMs(keepAlive) });
  if (ctx.res.destroyed || ctx.res.writableFinished) lease.release();
  else ctx.res.once("close", lease.release);
  return lease.model;
}

/** `chatcmpl-…` / `cmpl-…`, as OpenAI and vLLM name them. */
export function responseId(prefix: "chatcmpl" | "cmpl"): string {
  return `${prefix}-${randomBytes(12).toString("hex")}`;
}

export function unixNow(): number {
  return Math.floor(Date.now() / 1000);
}

/** "cancelled" only happens when the client left, so no client ever reads it; say "stop". */
export function finishReason(r: DoneEvent["finishReason"]): "stop" | "length" {
  return r === "length" ? "length" : "stop";
}

/** The fixed part of every response and chunk of one request. */
export interface ResponseMeta {
  id: string;
  created: number;
  model: string;
}
