/**
 * The one table from error codes (engine, service and HTTP) to an HTTP status and the OpenAI
 * error body `{"error":{"message","type","param","code"}}`; the native API (`/api`, Ollama)
 * gets the same status with `{"error":"message"}`, Anthropic's Messages API (`/v1/messages*`)
 * `{"type":"error","error":{"type","message"}}`. Routes throw; the error middleware in app.ts
 * and the stream writers format through `toApiError` / `toOllamaError` / `toAnthropicError`.
 */
import { WickError, type EngineCode } from "../engine/index.ts";
import { RequestError, StoreError, type RequestErrorCode, type StoreErrorCode } from "../service/errors.ts";

/** Failures only the HTTP layer can see. */
export type HttpErrorCode = "INVALID_JSON" | "UNAUTHORIZED" | "ROUTE_NOT_FOUND" | "METHOD_NOT_ALLOWED" | "BODY_TOO_LARGE" | "UNSUPPORTED_MEDIA_TYPE" | "TOO_MANY_CONNECTIONS" | "SHUTTING_DOWN";

export type ErrorCode = EngineCode | RequestErrorCode | StoreErrorCode | HttpErrorCode;

interface ErrorRow {
  status: number;
  /** OpenAI's error `type`. */
  type: string;
  /** OpenAI's error `code` unless the error gives a finer one. */
  code: string | null;
  /** Seconds for a Retry-After header (the openai client honours it when it retries). */
  retryAfter?: number;
}

const invalid = "invalid_request_error";

export const ERROR_TABLE: Record<ErrorCode, ErrorRow> = {
  // engine codes (ts/engine/errors.ts)
  INVALID_REQUEST: { status: 400, type: invalid, code: null },
  CONTEXT_LENGTH_EXCEEDED: { status: 400, type: invalid, code: "context_length_exceeded" },
  MODEL_LOAD_FAILED: { status: 500, type: "server_error", code: "model_load_failed" },
  UNSUPPORTED_ARCHITECTURE: { status: 400, type: invalid, code: "unsupported_architecture" },
  UNSUPPORTED_TOKENIZER: { status: 400, type: invalid, code: "unsupported_tokenizer" },
  // Busy, not the client's rate: 503 as Ollama does, retryable by every OpenAI client.
  QUEUE_FULL: { status: 503, type: "server_error", code: "queue_full", retryAfter: 1 },
  // Only reached when the client already left (499 = "client closed request", as Ollama).
  CANCELLED: { status: 499, type: invalid, code: "cancelled" },
  ENGINE_STOPPED: { status: 503, type: "server_error", code: "model_unloaded", retryAfter: 1 },
  INTERNAL: { status: 500, type: "server_error", code: "internal_error" },
  // The model's scheduler died mid-request; the next request reloads the model, so retry.
  ENGINE_DEAD: { status: 503, type: "server_error", code: "engine_dead", retryAfter: 1 },
  INVALID_GRAMMAR: { status: 400, type: invalid, code: "invalid_grammar" },
  // `wick convert` only (no route converts models): bad checkpoints, disk errors.
  CONVERT_FAILED: { status: 400, type: invalid, code: "convert_failed" },
  // service codes (ts/service/errors.ts)
  MODEL_NOT_FOUND: { status: 404, type: invalid, code: "model_not_found" },
  NOT_IMPLEMENTED: { status: 501, type: "server_error", code: "not_implemented" },
  // store codes (ts/store/errors.ts; MODEL_NOT_FOUND shared with the service)
  INVALID_NAME: { status: 400, type: invalid, code: "invalid_model_name" },
  INVALID_MODELFILE: { status: 400, type: invalid, code: "invalid_modelfile" },
  INVALID_TEMPLATE: { status: 400, type: invalid, code: "invalid_template" },
  UNSUPPORTED: { status: 400, type: invalid, code: "unsupported" },
  HUB_NO_GGUF: { status: 400, type: invalid, code: "hub_no_gguf" },
  HUB_QUANT_NOT_FOUND: { status: 400, type: invalid, code: "hub_quant_not_found" },
  FILE_NOT_FOUND: { status: 404, type: invalid, code: "file_not_found" },
  HUB_NOT_FOUND: { status: 404, type: invalid, code: "hub_not_found" },
  // The hub refused or failed: a bad gateway from this server's point of view.
  HUB_UNAUTHORIZED: { status: 502, type: "server_error", code: "hub_unauthorized" },
  HUB_ERROR: { status: 502, type: "server_error", code: "hub_error" },
  DISK_FULL: { status: 507, type: "server_error", code: "disk_full" },
  CORRUPT_MODEL: { status: 500, type: "server_error", code: "corrupt_model" },
  DIGEST_MISMATCH: { status: 500, type: "server_error", code: "digest_mismatch" },
  IO_ERROR: { status: 500, type: "server_error", code: "io_error" },
  // HTTP-only codes
  INVALID_JSON: { status: 400, type: invalid, code: "invalid_json" },
  UNAUTHORIZED: { status: 401, type: invalid, code: "invalid_api_key" },
  ROUTE_NOT_FOUND: { status: 404, type: invalid, code: "not_found" },
  METHOD_NOT_ALLOWED: { status: 405, type: invalid, code: "method_not_allowed" },
  BODY_TOO_LARGE: { status: 413, type: invalid, code: "request_too_large" },
  UNSUPPORTED_MEDIA_TYPE: { status: 415, type: invalid, code: "unsupported_media_type" },
  // Busy or going away, as QUEUE_FULL: retryable, and the openai client retries 503 by itself.
  TOO_MANY_CONNECTIONS: { status: 503, type: "server_error", code: "too_many_connections", retryAfter: 1 },
  SHUTTING_DOWN: { status: 503, type: "server_error", code: "shutting_down", retryAfter: 1 },
};

/** Server-side statuses that are not our bugs: no stack in the log. */
const EXPECTED_5XX = new Set<ErrorCode>(["QUEUE_FULL", "ENGINE_STOPPED", "NOT_IMPLEMENTED", "HUB_UNAUTHORIZED", "HUB_ERROR", "DISK_FULL", "TOO_MANY_CONNECTIONS", "SHUTTING_DOWN"]);

export class HttpError extends Error {
  constructor(
    readonly code: HttpErrorCode,
    message: string,
    readonly param: string | null = null,
  ) {
    super(message);
    this.name = "HttpError";
  }
}

export interface OpenAIErrorBody {
  error: { message: string; type: string; param: string | null; code: string | null };
}

export interface ApiError {
  status: number;
  headers: Record<string, string>;
  body: OpenAIErrorBody;
  /** True for failures that are ours, not the client's: log them with their stack. */
  internal: boolean;
}

/** Maps anything thrown while serving a request to its status, headers and body. */
export function toApiError(err: unknown): ApiError {
  const known = classify(err);
  const row = ERROR_TABLE[known.code];
  const headers: Record<string, string> = row.retryAfter ? { "Retry-After": String(row.retryAfter) } : {};
  const internal = row.status >= 500 && !EXPECTED_5XX.has(known.code);
  // A client error echoes what the client sent; a failure of ours must not map the server's disk.
  const message = internal ? hidePaths(known.message) : known.message;
  return {
    status: row.status,
    headers,
    body: { error: { message, type: row.type, param: known.param, code: known.detail ?? row.code } },
    internal,
  };
}

export interface OllamaApiError extends Omit<ApiError, "body"> {
  body: { error: string };
}

/** Ollama's error shape for the native API: the same status and message, no type or code. */
export function toOllamaError(err: unknown): OllamaApiError {
  const api = toApiError(err);
  return { ...api, body: { error: api.body.error.message } };
}

/**
 * Absolute paths (two parts or more) in a message, cut to their last part: "the manifest of
 * m:latest (…/latest) is not valid", "ENOENT: no such file or directory, open '…/sha256-…'".
 * The log keeps the whole error.
 */
export function hidePaths(message: string): string {
  return message.replace(/(^|[\s'"`(=,:])(\/[^\s'"`()/,]+(?:\/[^\s'"`()/,]+)+)\/?/g, (_, pre: string, p: string) => `${pre}…/${p.slice(p.lastIndexOf("/") + 1)}`);
}

export interface AnthropicErrorBody {
  type: "error";
  error: { type: string; message: string };
}

export interface AnthropicApiError extends Omit<ApiError, "body"> {
  body: AnthropicErrorBody;
}

/** Anthropic's error `type` for a status (its errors page); other 5xx are `api_error`. */
const ANTHROPIC_TYPES: Record<number, string> = {
  400: "invalid_request_error",
  401: "authentication_error",
  403: "permission_error",
  404: "not_found_error",
  405: "invalid_request_error",
  413: "request_too_large",
  415: "invalid_request_error",
  429: "rate_limit_error",
  499: "invalid_request_error",
  503: "overloaded_error",
  529: "overloaded_error",
};

/** Anthropic's error shape for /v1/messages*: the same status and message, typed by status. */
export function toAnthropicError(err: unknown): AnthropicApiError {
  const api = toApiError(err);
  const type = ANTHROPIC_TYPES[api.status] ?? (api.status >= 500 ? "api_error" : "invalid_request_error");
  return { ...api, body: { type: "error", error: { type, message: api.body.error.message } } };
}

/** Routes under /v1/messages (Anthropic's Messages API) answer in Anthropic's shapes. */
export function isAnthropicPath(path: string): boolean {
  return path === "/v1/messages" || path.startsWith("/v1/messages/");
}

/** Routes under /api answer in Ollama's shapes, errors included. */
export function isNativeApiPath(path: string): boolean {
  return path === "/api" || path.startsWith("/api/");
}

interface Classified {
  code: ErrorCode;
  message: string;
  param: string | null;
  detail: string | null;
}

function classify(err: unknown): Classified {
  if (err instanceof RequestError || err instanceof HttpError) {
    return { code: err.code, message: err.message, param: err.param, detail: err instanceof RequestError ? err.detail : null };
  }
  if (err instanceof WickError) return { code: err.code, message: err.message, param: null, detail: null };
  if (err instanceof StoreError) return { code: err.code, message: err.message, param: null, detail: null };
  const bodyError = fromBodyParser(err);
  if (bodyError) return bodyError;
  // Anything else is a bug on our side: say what failed, never the stack.
  const message = err instanceof Error ? err.message : String(err);
  return { code: "INTERNAL", message: `internal error: ${message}`, param: null, detail: null };
}

/** @koa/bodyparser (co-body / raw-body) errors carry an HTTP `status` and a `type`. */
function fromBodyParser(err: unknown): Classified | null {
  const e = err as { status?: unknown; type?: unknown; message?: unknown; limit?: unknown; length?: unknown };
  if (typeof e?.status !== "number" || typeof e.message !== "string") return null;
  if (e.status === 413 || e.type === "entity.too.large") {
    const size = typeof e.length === "number" ? ` of ${e.length} bytes` : "";
    return {
      code: "BODY_TOO_LARGE",
      message: `The request body${size} is larger than the limit of ${String(e.limit)} bytes`,
      param: null,
      detail: null,
    };
  }
  if (e.status === 415) return { code: "UNSUPPORTED_MEDIA_TYPE", message: e.message, param: null, detail: null };
  if (err instanceof SyntaxError || e.status === 400) {
    return {
      code: "INVALID_JSON",
      message: `We could not parse the JSON body of your request: ${e.message}`,
      param: null,
      detail: null,
    };
  }
  return null;
}
