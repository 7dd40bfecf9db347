/**
 * The Koa app factory. Middleware order: request log (outermost, so it sees the final status
 * and timing, streams included), error handler (Ollama's shape under /api, Anthropic's under
 * /v1/messages, OpenAI's elsewhere), CORS (before the key: preflights carry none), connection cap, shutdown
 * (counts requests in flight), API key, JSON body parser (not for blob uploads), routes. Tests call
 * `createApp(...).listen(0)`; the CLI serves it through `createHttpServer` (limits.ts) on --host/--port.
 */
import { randomUUID } from "node:crypto";
import Router from "@koa/router";
import { bodyParser } from "@koa/bodyparser";
import Koa from "koa";
import { pino, type Logger } from "pino";
import { ModelManager } from "../service/models.ts";
import type { ModelRegistry } from "../service/registry.ts";
import { DEFAULT_IMAGE_OPTIONS, type ImageOptions } from "../service/images/index.ts";
import { apiKeyAuth } from "./auth.ts";
import { cors, type CorsOrigins } from "./cors.ts";
import { connectionCap } from "./limits.ts";
import { requestLog, setRequestLog } from "./request-log.ts";
import { Shutdown } from "./shutdown.ts";
import { DEFAULT_STREAM_LIMITS, type StreamLimits } from "./stream-body.ts";
import { HttpError, isAnthropicPath, isNativeApiPath, toAnthropicError, toApiError, toOllamaError } from "./errors.ts";
import { healthRoutes } from "./health.ts";
import { metricsRoutes } from "./metrics.ts";
import { chatRoutes } from "./routes/openai/chat.ts";
import { completionsRoutes } from "./routes/openai/completions.ts";
import { modelsRoutes } from "./routes/openai/models.ts";
import { tokenizeRoutes } from "./routes/openai/tokenize.ts";
import { loraRoutes } from "./routes/openai/lora.ts";
import { embeddingsRoutes } from "./routes/openai/embeddings.ts";
import { responsesRoutes } from "./routes/responses/responses.ts";
import { anthropicRoutes } from "./routes/anthropic/messages.ts";
import { nativeChatRoutes } from "./routes/native/chat.ts";
import { nativeGenerateRoutes } from "./routes/native/generate.ts";
import { nativeModelRoutes } from "./routes/native/models.ts";
import { nativeEmbedRoutes } from "./routes/native/embed.ts";
import { BLOB_PATH_PREFIX, nativeBlobRoutes } from "./routes/native/blobs.ts";
import { showRoutes } from "./routes/native/show.ts";
import { uiRoutes } from "./routes/ui.ts";

export interface AppOptions {
  /** Models already loaded, served as they are (library use, tests); ignored when `models` is given. */
  registry?: ModelRegistry;
  /** The models this server loads and unloads (store, `-m`, keep-alive); default: `registry` alone, no store. */
  models?: ModelManager;
  /** Require this key on every route but /health (and Ollama's liveness `/`, /api/version). */
  apiKey?: string;
  /** Leave /metrics open when an API key is set (--metrics-public). */
  metricsPublic?: boolean;
  /** Origins allowed to call from a browser (--cors); none by default. */
  cors?: CorsOrigins;
  /** Per-stream buffer and how long it may stay full before the request is cancelled (--timeout). */
  streams?: Partial<StreamLimits>;
  /** Graceful shutdown state (`wick serve` drains through it on SIGTERM/SIGINT). */
  shutdown?: Shutdown;
  /** Largest JSON body in bytes (CONTRACT §6: 32 MiB, room for base64 images). */
  bodyLimit?: number;
  /** Largest blob uploaded to POST /api/blobs/:digest, in bytes (default 256 GiB: any GGUF served on one machine). */
  blobLimit?: number;
  /** Image fetching and decoding limits (`--no-private-image-urls`, sizes, timeouts). */
  images?: Partial<ImageOptions>;
  logger?: Logger;
}

const DEFAULT_BODY_LIMIT = 32 * 1024 * 1024;
const DEFAULT_BLOB_LIMIT = 256 * 1024 ** 3;

/** Errors Koa reports when a client leaves mid-response; expected, not worth a log line. */
const CLIENT_GONE = new Set(["ERR_STREAM_PREMATURE_CLOSE", "ECONNRESET", "EPIPE", "ERR_STREAM_DESTROYED"]);

export function createApp(opts: AppOptions): Koa {
  const log = opts.logger ?? pino({ level: "silent" });
  const app = new Koa();

  const streamLimits = { ...DEFAULT_STREAM_LIMITS, ...opts.streams };
  app.use(async (ctx, next) => {
    const start = performance.now();
    // A streamed response has a dozen 'close' listeners by design (this log, the shutdown count,
    // the client-gone signal, the model lease, Koa's pipeline): not a leak.
    ctx.res.setMaxListeners(32);
    const requestId = ctx.get("x-request-id") || randomUUID();
    ctx.set("X-Request-Id", requestId);
    const reqLog = log.child({ requestId });
    setRequestLog(ctx, reqLog);
    ctx.state.streamLimits = streamLimits;
    ctx.res.once("close", () => {
      const ms = Math.round(performance.now() - start);
      const aborted = !ctx.res.writableFinished;
      reqLog.info({ method: ctx.method, url: ctx.url, status: ctx.status, ms, ...(aborted ? { aborted } : {}) }, "request");
    });
    await next();
  });

  app.use(async (ctx, next) => {
    try {
      await next();
      if (ctx.status === 404 && ctx.body == null) {
        throw new HttpError("ROUTE_NOT_FOUND", `Invalid URL (${ctx.method} ${ctx.path}): no such route.`);
      }
    } catch (err) {
      const api = isNativeApiPath(ctx.path) ? toOllamaError(err) : isAnthropicPath(ctx.path) ? toAnthropicError(err) : toApiError(err);
      if (api.internal) requestLog(ctx, log).error({ err }, "request failed");
      if (ctx.headerSent) return; // a stream reports its own errors in-band (stream.ts)
      ctx.status = api.status;
      ctx.set(api.headers);
      ctx.body = api.body;
    }
  });

  if (opts.cors) app.use(cors(opts.cors));
  app.use(connectionCap());
  app.use((opts.shutdown ?? new Shutdown()).middleware());
  if (opts.apiKey) app.use(apiKeyAuth(opts.apiKey, { metricsPublic: opts.metricsPublic }));

  // Any POST body is read as JSON whatever its Content-Type: curl users often omit it. DELETE
  // has a body too: Ollama's /api/delete names the model in it.
  // Blob uploads are raw bytes streamed to disk (routes/native/blobs.ts), so they skip it.
  const parseJson = bodyParser({ enableTypes: ["json"], detectJSON: () => true, jsonLimit: opts.bodyLimit ?? DEFAULT_BODY_LIMIT, parsedMethods: ["POST", "PUT", "PATCH", "DELETE"] });
  app.use((ctx, next) => (ctx.path.startsWith(BLOB_PATH_PREFIX) ? next() : parseJson(ctx, next)));

  const router = new Router();
  const models = opts.models ?? new ModelManager({ registry: opts.registry });
  const registry = models.registry;
  const deps = { registry, models, log, images: { ...DEFAULT_IMAGE_OPTIONS, ...opts.images } };
  uiRoutes(router); // before healthRoutes: a browser's GET / gets the chat page, other clients the heartbeat
  healthRoutes(router, registry);
  metricsRoutes(router, registry);
  modelsRoutes(router, deps);
  chatRoutes(router, deps);
  completionsRoutes(router, deps);
  tokenizeRoutes(router, deps);
  loraRoutes(router, deps);
  embeddingsRoutes(router, deps);
  responsesRoutes(router, deps);
  anthropicRoutes(router, deps);
  showRoutes(router, deps);
  nativeChatRoutes(router, deps);
  nativeGenerateRoutes(router, deps);
  nativeModelRoutes(router, deps);
  nativeEmbedRoutes(router, deps);
  nativeBlobRoutes(router, deps, opts.blobLimit ?? DEFAULT_BLOB_LIMIT);
  app.use(router.routes());
  app.use(
    router.allowedMethods({
      throw: true,
      methodNotAllowed: () => new HttpError("METHOD_NOT_ALLOWED", "This route does not accept that HTTP method."),
      notImplemented: () => new HttpError("METHOD_NOT_ALLOWED", "This HTTP method is not supported."),
    }),
  );

  app.on("error", (err: Error & { code?: string }) => {
    if (err.code && CLIENT_GONE.has(err.code)) return;
    log.error({ err }, "unhandled server error");
  });
  return app;
}
