/**
 * Property-based HTTP fuzzing (fast-check, fixed seeds): thousands of generated bodies per
 * endpoint — near-valid requests with fields swapped for wrong types, huge and negative numbers,
 * deep nesting, long and odd strings, enum neighbours and unknown keys, plus raw bytes, cut-off
 * JSON and odd content types. Every answer must be a success or a client error in the
 * endpoint's own error shape (OpenAI's under /v1, Ollama's under /api), never a 5xx; streams
 * must end cleanly; and the server must keep serving with bounded memory. Hostile bodies (and
 * any failure the fuzzer finds) are kept in test/fuzz-corpus/http.json and replayed first.
 */
import { readFileSync } from "node:fs";
import path from "node:path";
import fc from "fast-check";
import { fixture, needs, repoRoot } from "./helpers/assets.ts";
import { serveModel } from "./helpers/server.ts";

const { path: model, serial } = needs(fixture("tiny-llama-q8_0.gguf"));
// A short context bounds every generation a valid body starts.
const served = serveModel(model, { contextSize: 64, maxSequences: 4 });

type Route = { path: string; native: boolean; base: Record<string, unknown> };
const ROUTES: Route[] = [
  { path: "/v1/chat/completions", native: false, base: { model: "m", messages: [{ role: "user", content: "hi" }], max_tokens: 4 } },
  { path: "/v1/completions", native: false, base: { model: "m", prompt: "hi", max_tokens: 4 } },
  { path: "/api/chat", native: true, base: { model: "m", messages: [{ role: "user", content: "hi" }], options: { num_predict: 4 } } },
  { path: "/api/generate", native: true, base: { model: "m", prompt: "hi", options: { num_predict: 4 } } },
  { path: "/api/show", native: true, base: { model: "tiny-llama-q8_0" } },
];

/** Values that break naive code: wrong types, extremes, odd strings, deep nesting. */
const weird = fc.oneof(
  fc.constantFrom(null, true, false, 0, -1, -0, 1e308, -1e308, 2 ** 53 + 1, 4294967296, 0.5, "", " ", "\u0000", "\ud800", "💥".repeat(50)),
  fc.string({ maxLength: 40 }),
  fc.integer(),
  fc.double({ noNaN: true }),
  fc.constantFrom("x".repeat(100_000), "<|im_start|>".repeat(200), "{".repeat(1000)),
  fc.constantFrom("system", "user", "assistant", "tool", "developer", "function", "text", "image_url", "json_schema", "json_object", "required", "auto", "none"),
  fc.jsonValue({ maxDepth: 3 }),
  fc.integer({ min: 50, max: 400 }).map((d) => JSON.parse("[".repeat(d) + "]".repeat(d)) as unknown),
);

const FIELDS = [
  "model", "messages", "prompt", "max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k", "min_p", "n", "stop", "seed",
  "stream", "stream_options", "logprobs", "top_logprobs", "logit_bias", "tools", "tool_choice", "response_format", "parallel_tool_calls",
  "presence_penalty", "frequency_penalty", "repetition_penalty", "ignore_eos", "options", "format", "raw", "context", "system",
  "template", "images", "keep_alive", "suffix", "verbose", "unknown_field",
];

/** A valid body with some fields replaced (or nested parts of messages/options replaced). */
const nearValid = (base: Record<string, unknown>) =>
  fc
    .tuple(
      fc.dictionary(fc.constantFrom(...FIELDS), weird, { maxKeys: 4 }),
      fc.option(fc.record({ role: weird, content: weird, tool_calls: weird, tool_call_id: weird }, { requiredKeys: [] })),
      fc.option(fc.dictionary(fc.constantFrom("temperature", "num_predict", "stop", "seed", "top_k", "num_ctx", "bogus"), weird, { maxKeys: 3 })),
      fc.boolean(),
    )
    .map(([patch, message, options, stream]) => {
      const body: Record<string, unknown> = { ...base, ...patch };
      if (message) body.messages = [message];
      if (options) body.options = options;
      if (stream && !("stream" in patch)) body.stream = true;
      return JSON.stringify(body);
    });

/** Bodies that are not (valid) JSON objects at all. */
const rawBodies = fc.oneof(
  fc.uint8Array({ maxLength: 200 }).map((b) => Buffer.from(b)),
  fc.jsonValue().map((v) => JSON.stringify(v)),
  fc.string().map((s) => `{"model": "m", "messages": ${s}`),
  fc.constant(Buffer.from([0x7b, 0x22, 0x61, 0x22, 0x3a, 0x22, 0xff, 0xfe, 0x22, 0x7d])),
);

const contentTypes = fc.constantFrom("application/json", "text/plain", "application/x-www-form-urlencoded", "multipart/form-data", "", "application/json; charset=latin1");

async function send(route: Route, body: string | Buffer, contentType: string) {
  const payload = typeof body === "string" ? body : new Uint8Array(body);
  const res = await fetch(served.server.url + route.path, { method: "POST", headers: contentType ? { "content-type": contentType } : {}, body: payload });
  const text = await res.text();
  return { status: res.status, text, type: res.headers.get("content-type") ?? "" };
}

/** The properties every answer must have; returns a reason when one does not hold. */
function problem(route: Route, r: { status: number; text: string; type: string }): string | null {
  if (r.status >= 500) return `status ${r.status}: ${r.text.slice(0, 300)}`;
  if (r.status === 200) {
    if (r.type.startsWith("text/event-stream")) {
      if (r.text.includes('"internal_error"') || r.text.includes('"server_error"')) return `stream with a server error: ${r.text.slice(-300)}`;
      if (!r.text.trimEnd().endsWith("data: [DONE]") && !r.text.includes('"error"')) return "stream ended without [DONE]";
      return null;
    }
    if (r.type.includes("ndjson")) {
      const last = JSON.parse(r.text.trim().split("\n").at(-1)!);
      if (last.error && /internal/i.test(last.error)) return `ndjson server error: ${last.error}`;
      return last.done === true || typeof last.error === "string" ? null : "ndjson stream without a final line";
    }
    JSON.parse(r.text);
    return null;
  }
  let body: any;
  try {
    body = JSON.parse(r.text);
  } catch {
    return `status ${r.status} with a non-JSON body: ${r.text.slice(0, 200)}`;
  }
  if (route.native) {
    return typeof body?.error === "string" && Object.keys(body).length === 1 ? null : `not Ollama's error shape: ${r.text.slice(0, 200)}`;
  }
  const e = body?.error;
  const ok = e && typeof e.message === "string" && typeof e.type === "string" && "param" in e && "code" in e;
  return ok ? null : `not OpenAI's error shape: ${r.text.slice(0, 200)}`;
}

const corpus = JSON.parse(readFileSync(path.join(repoRoot, "test/fuzz-corpus/http.json"), "utf8")) as { route: string; body: string }[];

serial("the kept corpus of hostile bodies still gets clean answers", async (t) => {
  t.true(corpus.length > 0);
  for (const c of corpus) {
    const route = ROUTES.find((r) => r.path === c.route)!;
    const r = await send(route, c.body, "application/json");
    t.is(problem(route, r), null, `${c.route} ${c.body.slice(0, 200)}`);
  }
});

for (const route of ROUTES) {
  serial(`${route.path}: 1000 generated bodies, each a success or a clean client error`, async (t) => {
    const seen = new Map<number, number>();
    await fc.assert(
      fc.asyncProperty(fc.oneof({ weight: 4, arbitrary: nearValid(route.base) }, { weight: 1, arbitrary: rawBodies }), contentTypes, async (body, type) => {
        const r = await send(route, body, type);
        seen.set(r.status, (seen.get(r.status) ?? 0) + 1);
        const why = problem(route, r);
        if (why) throw new Error(why);
      }),
      // WICK_FUZZ_SEED / WICK_FUZZ_RUNS run other and longer searches by hand.
      { seed: Number(process.env.WICK_FUZZ_SEED ?? 4242) + route.path.length, numRuns: Number(process.env.WICK_FUZZ_RUNS ?? 1000), endOnFailure: true },
    );
    t.log(`${route.path}: statuses ${JSON.stringify(Object.fromEntries(seen))}`);
    t.true((seen.get(200) ?? 0) > 0 && [...seen.keys()].some((s) => s >= 400), "both successes and client errors were reached");
  });
}

serial("after the fuzzing the server still serves, with bounded memory", async (t) => {
  const rss = process.memoryUsage().rss;
  const r = await served.client.chat.completions.create({ model: "m", messages: [{ role: "user", content: "hi" }], max_tokens: 2 });
  t.is(r.choices.length, 1);
  const m = served.engine.metrics();
  t.is(m.running, 0);
  t.is(m.kvBlocksUsed - m.kvBlocksCached >= 0, true);
  t.log(`RSS after fuzzing: ${(rss / 2 ** 20).toFixed(0)} MiB`);
  t.true(rss < 2 * 2 ** 30, "RSS under 2 GiB");
});
