/**
 * Connection-level limits of the HTTP server: how long a client may take to send its request
 * (headers and body; the slowloris guard) and how many connections may be open at once.
 * Node checks the request timeouts on a timer (`connectionsCheckingInterval`, 30 s by
 * default), so the timer runs often enough for the bound to hold within a second.
 */
import { createServer, type Server } from "node:http";
import type { Socket } from "node:net";
import type Koa from "koa";
import type { Middleware } from "koa";
import { HttpError } from "./errors.ts";

export interface ServerLimits {
  /** Time a client has to send a whole request, headers and body (llama-server's read timeout). */
  requestTimeoutMs: number;
  /** Open connections at most; those beyond are answered 503 and closed. 0 = no cap. */
  maxConnections: number;
}

export const DEFAULT_TIMEOUT_S = 60;

export const DEFAULT_SERVER_LIMITS: ServerLimits = { requestTimeoutMs: DEFAULT_TIMEOUT_S * 1000, maxConnections: 0 };

/** Marks a socket accepted beyond the cap: its request gets the 503 (in the API's own shape) and the socket closes. */
const OVER_LIMIT = Symbol("wick.overConnectionLimit");

/** An HTTP server for `app` under `limits`; listen on it as on `app.listen`'s. */
export function createHttpServer(app: Koa, limits: Partial<ServerLimits> = {}): Server {
  const { requestTimeoutMs, maxConnections } = { ...DEFAULT_SERVER_LIMITS, ...limits };
  const handle = app.callback();
  const server = createServer(
    {
      requestTimeout: requestTimeoutMs,
      headersTimeout: requestTimeoutMs,
      connectionsCheckingInterval: Math.max(100, Math.min(1_000, Math.floor(requestTimeoutMs / 4))),
    },
    // Koa's handler settles its own errors: the promise is only the request's end.
    (req, res) => void handle(req, res),
  );
  if (maxConnections > 0) {
    const open = new Set<Socket>();
    server.on("connection", (socket: Socket) => {
      if (open.size >= maxConnections) (socket as Socket & { [OVER_LIMIT]?: boolean })[OVER_LIMIT] = true;
      else {
        open.add(socket);
        socket.once("close", () => open.delete(socket));
      }
    });
  }
  return server;
}

/**
 * Answers a request on a connection beyond --max-connections with 503 and `Retry-After`, as a
 * full queue is answered, and closes that connection: the client gets an answer it can retry
 * instead of a reset socket.
 */
export function connectionCap(): Middleware {
  return async (ctx, next) => {
    if ((ctx.req.socket as Socket & { [OVER_LIMIT]?: boolean })[OVER_LIMIT]) {
      ctx.set("Connection", "close");
      throw new HttpError("TOO_MANY_CONNECTIONS", "Too many open connections to this server; retry shortly.");
    }
    await next();
  };
}
