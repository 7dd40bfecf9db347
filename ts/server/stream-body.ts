/**
 * The body of a streamed response (SSE, NDJSON, progress): a byte stream that pulls the next
 * frame only while it holds less than `bufferBytes` the socket has not taken yet. Without
 * this bound a client that stops reading leaves its sequence generating into the engine's
 * event queue until `max_tokens`; with it, pulling stops when the buffer is full, and a
 * buffer that stays full for `stallMs` ends the response: the socket is destroyed, which
 * cancels the engine sequence (clientGoneSignal) and frees its KV blocks at once.
 */
import { Readable } from "node:stream";
import type { Context } from "koa";
import type { Logger } from "pino";

/** Bytes of frames a stream holds for a socket that does not drain (about 30 tokens with top_logprobs, 300 plain). */
export const STREAM_BUFFER_BYTES = 64 * 1024;

export interface StreamLimits {
  /** Bytes held for the socket before pulling stops. */
  bufferBytes: number;
  /** How long the buffer may stay full before the response is ended; 0 = never. */
  stallMs: number;
}

export const DEFAULT_STREAM_LIMITS: StreamLimits = { bufferBytes: STREAM_BUFFER_BYTES, stallMs: 60_000 };

/** The limits the app put on this request (app.ts sets them in ctx.state). */
export function streamLimits(ctx: Context): StreamLimits {
  return (ctx.state.streamLimits as StreamLimits | undefined) ?? DEFAULT_STREAM_LIMITS;
}

/** Sets `frames` as the response body of `ctx` under the app's stream limits. */
export function streamBody(ctx: Context, frames: AsyncIterable<string>, log: Logger): Readable {
  const limits = streamLimits(ctx);
  const onStall = (buffered: number) => {
    log.warn({ stallMs: limits.stallMs, buffered, url: ctx.url }, "client stopped reading the stream: request cancelled");
    // Destroying the response closes the socket; its 'close' before the end aborts the
    // request's signal (clientGoneSignal), which cancels the engine sequence.
    ctx.res.destroy();
  };
  const body = new BoundedStream(frames[Symbol.asyncIterator](), limits, () => onStall(body.readableLength + ctx.res.writableLength));
  ctx.body = body;
  return body;
}

class BoundedStream extends Readable {
  private pumping = false;
  private stallTimer: NodeJS.Timeout | undefined;

  constructor(
    private readonly frames: AsyncIterator<string>,
    private readonly limits: StreamLimits,
    private readonly onStall: () => void,
  ) {
    super({ highWaterMark: limits.bufferBytes });
  }

  override _read(): void {
    this.clearStall();
    if (this.pumping) return;
    this.pumping = true;
    void this.pump();
  }

  /** Pulls frames until one is refused (buffer full) or they end; the next `_read` resumes. */
  private async pump(): Promise<void> {
    try {
      for (;;) {
        const next = await this.frames.next();
        if (this.destroyed) {
          void this.frames.return?.(undefined)?.catch(() => {});
          return;
        }
        if (next.done) {
          this.push(null);
          return;
        }
        if (!this.push(next.value)) {
          this.armStall();
          return;
        }
      }
    } catch (err) {
      this.destroy(err as Error);
    } finally {
      this.pumping = false;
    }
  }

  private armStall(): void {
    if (this.limits.stallMs <= 0 || this.stallTimer) return;
    this.stallTimer = setTimeout(() => {
      this.stallTimer = undefined;
      if (!this.destroyed && this.readableLength >= this.readableHighWaterMark) this.onStall();
    }, this.limits.stallMs);
    this.stallTimer.unref();
  }

  private clearStall(): void {
    clearTimeout(this.stallTimer);
    this.stallTimer = undefined;
  }

  override _destroy(err: Error | null, cb: (err?: Error | null) => void): void {
    this.clearStall();
    // Ends the frame generator (its finally blocks cancel the sequences); a pending pull ends
    // it in pump once it settles (the client-gone signal has cancelled the sequences by then).
    if (!this.pumping) void this.frames.return?.(undefined)?.catch(() => {});
    cb(err);
  }
}
