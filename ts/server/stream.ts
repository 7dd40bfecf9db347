/**
 * Streamed responses, one writer for every API: frames go out through a codec — SSE for the
 * OpenAI endpoints (`data: <json>\n\n`, then `data: [DONE]`), NDJSON for the native API (one
 * JSON object per line). Headers go out at once (before prefill); an error after the stream
 * began is sent in-band in the API's own error shape (`data: {"error":{...}}`, or one more
 * line `{"error":"…"}` as Ollama does) — the status is already 200. A shutdown that cancels
 * the stream ends it the same way, with a `shutting_down` error frame.
 */
import type { Context } from "koa";
import type { Logger } from "pino";
import { toApiError, toOllamaError } from "./errors.ts";
import { shutdownDeadline, untilShutdown } from "./shutdown.ts";
import { streamBody } from "./stream-body.ts";

export interface StreamCodec {
  headers: Record<string, string>;
  frame(value: unknown): string;
  /** The in-band error frame, and what the log says of it. */
  error(err: unknown): { frame: string; internal: boolean; summary: Record<string, unknown> };
  /** Written after the last frame of a stream that ended cleanly. */
  end?: string;
}

export const SSE: StreamCodec = {
  headers: { "Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache", Connection: "keep-alive", "X-Accel-Buffering": "no" },
  frame: (value) => `data: ${JSON.stringify(value)}\n\n`,
  error(err) {
    const api = toApiError(err);
    return { frame: `data: ${JSON.stringify(api.body)}\n\n`, internal: api.internal, summary: { code: api.body.error.code, message: api.body.error.message } };
  },
  end: "data: [DONE]\n\n",
};

export const NDJSON: StreamCodec = {
  headers: { "Content-Type": "application/x-ndjson", "Cache-Control": "no-cache", "X-Accel-Buffering": "no" },
  frame: (value) => `${JSON.stringify(value)}\n`,
  error(err) {
    const api = toOllamaError(err);
    return { frame: `${JSON.stringify(api.body)}\n`, internal: api.internal, summary: { message: api.body.error } };
  },
};

/** A frame of an SSE stream with named events (`event:` before `data:`, no `[DONE]`): the Responses and Anthropic wings. */
export interface NamedFrame {
  event: string;
  data: unknown;
}

const namedFrame = ({ event, data }: NamedFrame) => `event: ${event}\ndata: ${JSON.stringify(data)}\n\n`;

/** The named-event SSE codec over a wing's own in-band error frame (`frames` yield `NamedFrame`s). */
export function namedSSE(error: (err: unknown) => { frame: NamedFrame; internal: boolean; summary: Record<string, unknown> }): StreamCodec {
  return {
    headers: SSE.headers,
    frame: (value) => namedFrame(value as NamedFrame),
    error(err) {
      const e = error(err);
      return { ...e, frame: namedFrame(e.frame) };
    },
  };
}

export function sendStream(ctx: Context, frames: AsyncIterable<unknown>, codec: StreamCodec, log: Logger): void {
  // Long generations must not hit the socket idle timeout; small frames must not wait for Nagle.
  ctx.req.socket.setTimeout(0);
  ctx.req.socket.setNoDelay(true);
  ctx.status = 200;
  ctx.set(codec.headers);
  // Pulled only while the socket drains (a bounded buffer), so backpressure reaches the engine.
  streamBody(ctx, encode(frames, codec, log, shutdownDeadline(ctx)), log);
  ctx.flushHeaders();
}

async function* encode(frames: AsyncIterable<unknown>, codec: StreamCodec, log: Logger, deadline: AbortSignal | undefined): AsyncGenerator<string> {
  try {
    for await (const frame of untilShutdown(frames, deadline)) yield codec.frame(frame);
  } catch (err) {
    const { frame, internal, summary } = codec.error(err);
    if (internal) log.error({ err }, "stream failed");
    else log.warn(summary, "stream ended with an error");
    yield frame;
    return;
  }
  if (codec.end) yield codec.end;
}
