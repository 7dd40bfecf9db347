/**
 * Server-sent events for the OpenAI streaming endpoints: `data: <json>\n\n` frames, then
 * `data: [DONE]`. Headers go out at once (before prefill), and an error after the stream began
 * is sent in-band as `data: {"error":{...}}` before the stream closes — the status is already 200.
 * A shutdown that cancels the stream ends it the same way, with a `shutting_down` error frame.
 */
import type { Context } from "koa";
import type { Logger } from "pino";
import { toApiError } from "./errors.ts";
import { shutdownDeadline, untilShutdown } from "./shutdown.ts";
import { streamBody } from "./stream-body.ts";

export function sendSse(ctx: Context, frames: AsyncIterable<unknown>, log: Logger): void {
  // Long generations must not hit the socket idle timeout; small frames must not wait for Nagle.
  ctx.req.socket.setTimeout(0);
  ctx.req.socket.setNoDelay(true);
  ctx.status = 200;
  ctx.set({
    "Content-Type": "text/event-stream; charset=utf-8",
    "Cache-Control": "no-cache",
    Connection: "keep-alive",
    "X-Accel-Buffering": "no",
  });
  // Pulled only while the socket drains (a bounded buffer), so backpressure reaches the engine.
  streamBody(ctx, encode(frames, log, shutdownDeadline(ctx)), log);
  ctx.flushHeaders();
}

async function* encode(frames: AsyncIterable<unknown>, log: Logger, deadline: AbortSignal | undefined): AsyncGenerator<string> {
  try {
    for await (const frame of untilShutdown(frames, deadline)) yield `data: ${JSON.stringify(frame)}\n\n`;
  } catch (err) {
    const api = toApiError(err);
    if (api.internal) log.error({ err }, "stream failed");
    else log.warn({ code: api.body.error.code, message: api.body.error.message }, "stream ended with an error");
    yield `data: ${JSON.stringify(api.body)}\n\n`;
    return;
  }
  yield "data: [DONE]\n\n";
}

/**
 * Aborts when the client goes away before the response finished, or when a shutdown's timeout
 * passes. `ctx.req` 'close' is the wrong signal: it fires as soon as the body parser has read
 * the body, long before the client leaves (see reference/napi-aesthetics.md §3); the
 * response's 'close' without `writableFinished` is the disconnect.
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
