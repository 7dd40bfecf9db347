/**
 * Bad input, one test per row: each gets the OpenAI error shape with the right status, a
 * message a person can act on and the field it blames, and the request after it succeeds.
 */
import { ModelRegistry } from "../ts/service/registry.ts";
import { needs, smollm2 } from "./helpers/assets.ts";
import { postJson, serveModel, startServer } from "./helpers/server.ts";

const { path: smol, serial } = needs(smollm2());
const CONTEXT = 512;
const served = serveModel(smol, { contextSize: CONTEXT });

const user = (content: unknown) => [{ role: "user", content }];
const chat = (extra: Record<string, unknown>) => ({ model: "any", messages: user("Say hi."), max_tokens: 4, ...extra });

interface Row {
  name: string;
  method?: "GET" | "POST";
  path?: string;
  body?: unknown;
  status: number;
  param?: string | null;
  code?: string;
  message: RegExp;
}

const ROWS: Row[] = [
  { name: "invalid JSON", body: '{"messages": [', status: 400, param: null, code: "invalid_json", message: /parse the JSON body/ },
  { name: "a JSON string instead of an object", body: '"hello"', status: 400, param: null, code: "invalid_json", message: /object and array/ },
  { name: "a JSON array instead of an object", body: [], status: 400, param: null, code: "invalid_type", message: /expected an object/ },
  { name: "missing messages", body: { model: "m" }, status: 400, param: "messages", code: "missing_required_parameter", message: /Missing required parameter: 'messages'/ },
  { name: "empty messages", body: { messages: [] }, status: 400, param: "messages", code: "empty_array", message: /at least 1/ },
  { name: "messages is a string", body: { messages: "hi" }, status: 400, param: "messages", code: "invalid_type", message: /expected an array, but got a string/ },
  { name: "content is a number", body: { messages: user(42) }, status: 400, param: "messages[0].content", code: "invalid_type", message: /expected a string or an array/ },
  { name: "message without content", body: { messages: [{ role: "user" }] }, status: 400, param: "messages[0].content", code: "missing_required_parameter", message: /messages\[0\]\.content/ },
  { name: "temperature is a string", body: chat({ temperature: "hot" }), status: 400, param: "temperature", code: "invalid_type", message: /expected a number/ },
  { name: "stream is a string", body: chat({ stream: "yes" }), status: 400, param: "stream", code: "invalid_type", message: /expected a boolean/ },
  { name: "stop is a number", body: chat({ stop: 5 }), status: 400, param: "stop", code: "invalid_type", message: /'stop'/ },
  { name: "unknown role", body: { messages: [{ role: "wizard", content: "x" }] }, status: 400, param: "messages[0].role", code: "invalid_value", message: /'wizard'.*'system'.*'user'/ },
  { name: "message without role", body: { messages: [{ content: "x" }] }, status: 400, param: "messages[0].role", code: "missing_required_parameter", message: /role/ },
  { name: "unknown content part type", body: { messages: user([{ type: "video", url: "x" }]) }, status: 400, param: "messages[0].content[0].type", code: "invalid_value", message: /'video'/ },
  {
    name: "image part for a text-only model",
    body: {
      messages: user([
        { type: "text", text: "what is this?" },
        { type: "image_url", image_url: { url: "data:image/png;base64,AAAA" } },
      ]),
    },
    status: 400,
    param: "messages[0].content[1]",
    code: "image_input_not_supported",
    message: /image/,
  },
  { name: "max_tokens 0", body: chat({ max_tokens: 0 }), status: 400, param: "max_tokens", message: />= 1/ },
  { name: "max_tokens negative", body: chat({ max_tokens: -5 }), status: 400, param: "max_tokens", message: />= 1/ },
  { name: "max_tokens fractional", body: chat({ max_tokens: 2.5 }), status: 400, param: "max_tokens", code: "invalid_type", message: /integer/ },
  { name: "n = 0", body: chat({ n: 0 }), status: 400, param: "n", message: />= 1/ },
  { name: "top_p above 1", body: chat({ top_p: 1.5 }), status: 400, param: "top_p", message: /<= 1/ },
  { name: "negative temperature", body: chat({ temperature: -1 }), status: 400, param: "temperature", message: />= 0/ },
  { name: "top_logprobs above 20", body: chat({ logprobs: true, top_logprobs: 50 }), status: 400, param: "top_logprobs", message: /<= 20/ },
  { name: "prompt over the context", body: { messages: user("hello ".repeat(CONTEXT + 50)) }, status: 400, param: "messages", code: "context_length_exceeded", message: /context length is 512/ },
  { name: "prompt + max_tokens over the context", body: chat({ max_tokens: CONTEXT * 4 }), status: 400, param: "max_tokens", code: "context_length_exceeded", message: /context length is 512/ },
  {
    name: "prompt + max_completion_tokens over the context",
    body: chat({ max_tokens: undefined, max_completion_tokens: CONTEXT * 4 }),
    status: 400,
    param: "max_completion_tokens",
    code: "context_length_exceeded",
    message: /context length/,
  },
  { name: "completions: missing prompt", path: "/v1/completions", body: { max_tokens: 3 }, status: 400, param: "prompt", code: "missing_required_parameter", message: /'prompt'/ },
  { name: "completions: prompt is a number", path: "/v1/completions", body: { prompt: 5 }, status: 400, param: "prompt", code: "invalid_type", message: /expected a string or an array/ },
  { name: "completions: logprobs above 5", path: "/v1/completions", body: { prompt: "x", logprobs: 6 }, status: 400, param: "logprobs", message: /<= 5/ },
  {
    name: "completions: prompt over the context",
    path: "/v1/completions",
    body: { prompt: "word ".repeat(CONTEXT + 50) },
    status: 400,
    param: "prompt",
    code: "context_length_exceeded",
    message: /context length/,
  },
  { name: "completions: token id out of range", path: "/v1/completions", body: { prompt: [1, 2, 99999999] }, status: 400, message: /out of range/ },
  { name: "unknown route", path: "/v1/nope", body: {}, status: 404, param: null, code: "not_found", message: /POST \/v1\/nope/ },
  { name: "unknown route (GET)", method: "GET", path: "/v2/models", status: 404, code: "not_found", message: /GET \/v2\/models/ },
  { name: "wrong method", method: "GET", path: "/v1/chat/completions", status: 405, message: /method/ },
  { name: "unknown model id", method: "GET", path: "/v1/models/nope", status: 404, param: "model", code: "model_not_found", message: /'nope'/ },
];

for (const row of ROWS) {
  serial(`bad input: ${row.name} → ${row.status}`, async (t) => {
    const url = `${served.server.url}${row.path ?? "/v1/chat/completions"}`;
    const res = row.method === "GET" ? await getJson(url) : await postJson(url, row.body);
    t.is(res.status, row.status, res.text);
    assertErrorShape(t, res.json, row);
    await assertStillServes(t);
  });
}

serial("bad input: a body over the 32 MiB default limit → 413, and the server keeps serving", async (t) => {
  const big = JSON.stringify({ messages: user("x".repeat(33 * 1024 * 1024)) });
  const res = await postJson(`${served.server.url}/v1/chat/completions`, big);
  t.is(res.status, 413);
  assertErrorShape(t, res.json, { status: 413, param: null, code: "request_too_large", message: /larger than the limit of 33554432 bytes/ } as Row);
  await assertStillServes(t);
});

serial("bad input: a smaller configured body limit is honoured", async (t) => {
  const small = await startServer({ registry: new ModelRegistry(), bodyLimit: 1024 });
  try {
    const res = await postJson(`${small.url}/v1/chat/completions`, { messages: user("x".repeat(2000)) });
    t.is(res.status, 413);
    t.regex(res.json.error.message, /limit of 1024 bytes/);
  } finally {
    await small.close();
  }
});

async function getJson(url: string) {
  const res = await fetch(url);
  const text = await res.text();
  return { status: res.status, text, json: JSON.parse(text) };
}

function assertErrorShape(t: import("ava").ExecutionContext, body: any, row: Row) {
  t.truthy(body?.error, "an OpenAI error body");
  t.deepEqual(Object.keys(body.error).sort(), ["code", "message", "param", "type"]);
  t.is(typeof body.error.message, "string");
  t.regex(body.error.message, row.message);
  t.is(body.error.type, row.status >= 500 ? "server_error" : "invalid_request_error");
  if (row.param !== undefined) t.is(body.error.param, row.param);
  if (row.code !== undefined) t.is(body.error.code, row.code);
  t.log(`${row.status} ${JSON.stringify(body.error)}`);
}

async function assertStillServes(t: import("ava").ExecutionContext) {
  const ok = await postJson(`${served.server.url}/v1/chat/completions`, chat({}));
  t.is(ok.status, 200, `the next request failed: ${ok.text}`);
  t.is(typeof ok.json.choices[0].message.content, "string");
}
