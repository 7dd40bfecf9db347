/** The error table: every code has a status and an OpenAI body; nothing leaks a stack. */
import test from "ava";
import { WickError } from "../ts/engine/index.ts";
import { engineCodes } from "../ts/engine/errors.ts";
import { ERROR_TABLE, HttpError, toApiError } from "../ts/server/errors.ts";
import { RequestError } from "../ts/service/errors.ts";

test("every engine code maps to a status and an OpenAI error body", (t) => {
  for (const code of engineCodes()) {
    const api = toApiError(new WickError(code, `engine said ${code}`));
    t.is(api.status, ERROR_TABLE[code].status, code);
    t.deepEqual(Object.keys(api.body.error).sort(), ["code", "message", "param", "type"]);
    t.is(api.body.error.message, `engine said ${code}`);
  }
  t.is(toApiError(new WickError("CONTEXT_LENGTH_EXCEEDED", "x")).body.error.code, "context_length_exceeded");
  t.is(toApiError(new WickError("INVALID_REQUEST", "x")).status, 400);
});

test("QUEUE_FULL and ENGINE_STOPPED are 503 with Retry-After; INTERNAL is 500 and flagged for logging", (t) => {
  for (const code of ["QUEUE_FULL", "ENGINE_STOPPED"] as const) {
    const api = toApiError(new WickError(code, "busy"));
    t.is(api.status, 503);
    t.deepEqual(api.headers, { "Retry-After": "1" });
    t.false(api.internal);
  }
  const internal = toApiError(new WickError("INTERNAL", "boom"));
  t.is(internal.status, 500);
  t.true(internal.internal);
});

test("request errors keep their param and finer code; HTTP errors their status", (t) => {
  const r = toApiError(new RequestError("INVALID_REQUEST", "bad", "messages[0].role", "invalid_value"));
  t.deepEqual(r.body, { error: { message: "bad", type: "invalid_request_error", param: "messages[0].role", code: "invalid_value" } });
  t.is(toApiError(new RequestError("MODEL_NOT_FOUND", "no", "model")).status, 404);
  t.is(toApiError(new HttpError("UNAUTHORIZED", "key")).status, 401);
  t.is(toApiError(new HttpError("BODY_TOO_LARGE", "big")).status, 413);
});

test("unknown errors are a 500 that says what failed, without a stack", (t) => {
  const api = toApiError(new TypeError("x is not a function"));
  t.is(api.status, 500);
  t.is(api.body.error.message, "internal error: x is not a function");
  t.false(api.body.error.message.includes(" at "));
  t.is(toApiError("a string").status, 500);
});

test("body parser errors: malformed JSON is 400 invalid_json, oversized is 413", (t) => {
  const syntax = Object.assign(new SyntaxError("Unexpected end of JSON input"), { status: 400 });
  t.is(toApiError(syntax).body.error.code, "invalid_json");
  const big = Object.assign(new Error("request entity too large"), { status: 413, type: "entity.too.large", length: 5000, limit: 1000 });
  const api = toApiError(big);
  t.is(api.status, 413);
  t.regex(api.body.error.message, /5000 bytes.*limit of 1000 bytes/);
});
