/**
 * NDJSON streams for the native API (Ollama): one JSON object per line, headers at once, and an
 * error after the stream began sent in-band as one more line, `{"error":"…"}` — the status is
 * already 200, as Ollama does it. A shutdown that cancels the stream ends it the same way.
 */
import type { Context } from "koa";
import type { Logger } from "pino";
import { toOllamaError } from "./errors.ts";
import { shutdownDeadline, untilShutdown } from "./shutdown.ts";
import { streamBody } from "./stream-body.ts";

export function sendNdjson(ctx: Context, lines: AsyncIterable<unknown>, log: Logger): void {
  ctx.req.socket.setTimeout(0);
  ctx.req.socket.setNoDelay(true);
  ctx.status = 200;
  ctx.set({ "Content-Type": "application/x-ndjson", "Cache-Control": "no-cache", "X-Accel-Buffering": "no" });
  streamBody(ctx, encode(lines, log, shutdownDeadline(ctx)), log);
  ctx.flushHeaders();
}

async function* encode(lines: AsyncIterable<unknown>, log: Logger, deadline: AbortSignal | undefined): AsyncGenerator<string> {
  try {
    for await (const line of untilShutdown(lines, deadline)) yield `${JSON.stringify(line)}\n`;
  } catch (err) {
    const api = toOllamaError(err);
    if (api.internal) log.error({ err }, "stream failed");
    else log.warn({ message: api.body.error }, "stream ended with an error");
    yield `${JSON.stringify(api.body)}\n`;
  }
}
