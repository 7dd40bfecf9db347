/**
 * Graceful shutdown: stop accepting, let the requests in flight finish for up to a bound, then
 * cancel what is left so every stream ends with a final error frame instead of a cut socket.
 * The app counts requests in flight and reads `deadline` (aborted when the bound passes) in
 * each request's signal (routes/common.ts `clientGoneSignal`) and at the end of each stream.
 */
import { setMaxListeners } from "node:events";
import type { Server } from "node:http";
import type { Context, Middleware } from "koa";
import type { Logger } from "pino";
import { HttpError } from "./errors.ts";

/** After the deadline, how long cancelled requests get to write their last frame before their sockets are closed. */
const CANCEL_GRACE_MS = 2_000;

export interface DrainResult {
  /** Requests still in flight when the timeout passed (cancelled). */
  cancelled: number;
  ms: number;
}

export class Shutdown {
  private readonly deadlineCtl = new AbortController();
  private draining = false;
  private inFlight = 0;
  private idle: (() => void) | undefined;

  constructor() {
    // Every request in flight listens to the deadline (clientGoneSignal): no leak warning at 11.
    setMaxListeners(0, this.deadlineCtl.signal);
  }

  /** Aborted when the shutdown timeout has passed: requests still running are cancelled. */
  get deadline(): AbortSignal {
    return this.deadlineCtl.signal;
  }

  get stopping(): boolean {
    return this.draining;
  }

  /** Counts requests from their start until their response is closed; refuses new ones once stopping. */
  middleware(): Middleware {
    return async (ctx, next) => {
      ctx.state.shutdown = this;
      if (this.draining) {
        // A request on a kept-alive connection after the listener closed.
        ctx.set("Connection", "close");
        throw new HttpError("SHUTTING_DOWN", "The server is shutting down; retry on another replica or once it is back.");
      }
      this.inFlight++;
      let counted = true;
      const done = () => {
        if (!counted) return;
        counted = false;
        this.inFlight--;
        if (this.inFlight === 0) this.idle?.();
      };
      ctx.res.once("close", done);
      await next();
      if (this.draining) ctx.set("Connection", "close");
      // A whole (non-streamed) answer cut short by the deadline: say so instead of sending a partial one.
      if (this.deadline.aborted && !ctx.headerSent && !isStream(ctx)) {
        throw shutDown();
      }
    };
  }

  /**
   * Stops `server` accepting connections, waits up to `timeoutMs` for the requests in flight,
   * then cancels the rest and closes every connection once they have written their last frame.
   */
  async drain(server: Server, timeoutMs: number, log: Logger): Promise<DrainResult> {
    const started = performance.now();
    this.draining = true;
    server.close();
    server.closeIdleConnections();
    let cancelled = 0;
    if (!(await this.whenIdle(timeoutMs))) {
      cancelled = this.inFlight;
      log.warn({ inFlight: cancelled, timeoutMs }, "shutdown timeout passed: cancelling the requests still in flight");
      this.deadlineCtl.abort();
      await this.whenIdle(CANCEL_GRACE_MS);
    }
    server.closeAllConnections();
    return { cancelled, ms: Math.round(performance.now() - started) };
  }

  /** Resolves true once no request is in flight, false after `ms`. */
  private whenIdle(ms: number): Promise<boolean> {
    if (this.inFlight === 0) return Promise.resolve(true);
    return new Promise((resolve) => {
      const timer = setTimeout(() => resolve(false), ms);
      this.idle = () => {
        clearTimeout(timer);
        resolve(true);
      };
    });
  }
}

/** The shutdown deadline of the app serving `ctx`, if it has one. */
export function shutdownDeadline(ctx: Context): AbortSignal | undefined {
  return (ctx.state.shutdown as Shutdown | undefined)?.deadline;
}

function isStream(ctx: Context): boolean {
  const body = ctx.body as { pipe?: unknown } | null | undefined;
  return typeof body?.pipe === "function";
}

/** `frames` until the shutdown deadline passes, then a SHUTTING_DOWN error: a cancelled stream
 * ends with its API's error frame, not a cut socket (stream.ts). */
export async function* untilShutdown<T>(frames: AsyncIterable<T>, deadline: AbortSignal | undefined): AsyncGenerator<T> {
  for await (const frame of frames) {
    if (deadline?.aborted) throw shutDown();
    yield frame;
  }
  if (deadline?.aborted) throw shutDown();
}

/** The error of a request the shutdown deadline cancelled. */
function shutDown(): HttpError {
  return new HttpError("SHUTTING_DOWN", "The server shut down before this request finished; it was cancelled.");
}
