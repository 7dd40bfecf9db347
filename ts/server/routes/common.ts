/**
 * What every route needs from the app, whichever API it serves: its dependencies, the model a
 * request names (held until the response is done), and the signal that says the client left.
 * Neither API wing imports the other; both import this.
 */
import type { Context } from "koa";
import type { Logger } from "pino";
import type { ImageOptions } from "../../service/images/index.ts";
import type { ModelManager } from "../../service/models.ts";
import type { ModelRegistry, ServedModel } from "../../service/registry.ts";
import { shutdownDeadline } from "../shutdown.ts";

export interface RouteDeps {
  registry: ModelRegistry;
  models: ModelManager;
  log: Logger;
  /** How request images are fetched and decoded. */
  images: ImageOptions;
}

/**
 * The model a request names, loaded if need be and held until the response is finished (or the
 * client leaves): its keep-alive only starts then. `keepAliveMs` is the request's `keep_alive`,
 * already converted by its schema.
 */
export async function useModel(ctx: Context, models: ModelManager, name: string | null | undefined, keepAliveMs?: number): Promise<ServedModel> {
  const lease = await models.acquire(name, { keepAliveMs });
  if (ctx.res.destroyed || ctx.res.writableFinished) lease.release();
  else ctx.res.once("close", () => lease.release());
  return lease.model;
}

/**
 * Aborts when the client goes away before the response finished, or when a shutdown's timeout
 * passes. `ctx.req` 'close' is the wrong signal: it fires as soon as the body parser has read
 * the body, long before the client leaves; the response's 'close' without `writableFinished`
 * is the disconnect.
 */
export function clientGoneSignal(ctx: Context): AbortSignal {
  const ac = new AbortController();
  // A listener removed when the response closes, not AbortSignal.any: the server-wide deadline
  // outlives every request and must not collect one dependent signal per request.
  const deadline = shutdownDeadline(ctx);
  const onDeadline = () => ac.abort();
  deadline?.addEventListener("abort", onDeadline, { once: true });
  ctx.res.once("close", () => {
    deadline?.removeEventListener("abort", onDeadline);
    if (!ctx.res.writableFinished) ac.abort();
  });
  return ac.signal;
}
