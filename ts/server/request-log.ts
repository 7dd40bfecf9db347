/** The request's own logger: app.ts gives each request a child of the server's, with its id. */
import type { Context } from "koa";
import type { Logger } from "pino";

export function setRequestLog(ctx: Context, log: Logger): void {
  (ctx.state as { log?: Logger }).log = log;
}

/** The request's logger, else `fallback` (a context that did not pass through the app). */
export function requestLog(ctx: Context, fallback: Logger): Logger {
  return (ctx.state as { log?: Logger }).log ?? fallback;
}
