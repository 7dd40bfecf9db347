/**
 * The HTTP fuzz generator, shared by test/http-fuzz.test.ts, benches/soak.ts (its bad requests)
 * and benches/fuzz-peer.ts (the same corpus sent to llama-server): ONE source of the routes, the
 * fast-check arbitraries, the fixed seeds, the kept corpus and the answer properties.
 */
import { readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import fc from "fast-check";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");

/** A route and the valid body its cases start from; a `variant` is a second base on the same path (tools, images). */
export type Route = { path: string; native: boolean; base: Record<string, unknown>; variant?: string; vision?: boolean; rerank?: boolean };
/** A 1×1 PNG: a valid image for the vision variants. */
const PNG_1X1 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";
const TOOLS = [{ type: "function", function: { name: "get_weather", description: "Weather", parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } } }];
export const ROUTES: Route[] = [
  { path: "/v1/chat/completions", native: false, base: { model: "m", messages: [{ role: "user", content: "hi" }], max_tokens: 4 } },
  { path: "/v1/completions", native: false, base: { model: "m", prompt: "hi", max_tokens: 4 } },
  { path: "/api/chat", native: true, base: { model: "m", messages: [{ role: "user", content: "hi" }], options: { num_predict: 4 } } },
  { path: "/api/generate", native: true, base: { model: "m", prompt: "hi", options: { num_predict: 4 } } },
  { path: "/api/show", native: true, base: { model: "tiny-llama-q8_0" } },
  { path: "/v1/chat/completions", variant: "tools", native: false, base: { model: "m", messages: [{ role: "user", content: "hi" }], max_tokens: 4, tools: TOOLS, tool_choice: "auto" } },
  { path: "/api/chat", variant: "tools", native: true, base: { model: "m", messages: [{ role: "user", content: "hi" }], options: { num_predict: 4 }, tools: TOOLS } },
  {
    path: "/v1/chat/completions",
    variant: "image",
    vision: true,
    native: false,
    base: { model: "m", messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: `data:image/png;base64,${PNG_1X1}` } }, { type: "text", text: "hi" }] }], max_tokens: 4 },
  },
  { path: "/api/generate", variant: "image", vision: true, native: true, base: { model: "m", prompt: "hi", images: [PNG_1X1], options: { num_predict: 4 } } },
  { path: "/v1/embeddings", native: false, base: { model: "m", input: ["hi", "there"] } },
  { path: "/api/embed", native: true, base: { model: "m", input: ["hi", "there"] } },
  { path: "/api/embeddings", native: true, base: { model: "m", prompt: "hi" } },
  { path: "/v1/rerank", rerank: true, native: false, base: { model: "m", query: "hi", documents: ["a", "b"] } },
];

/** How tests and tables name a route. */
export const routeName = (r: Route) => (r.variant ? `${r.path} (${r.variant})` : r.path);

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

/** One generated case for `route`: a body (4 near-valid to 1 raw) and a content type. */
export function caseArbitrary(route: Route): fc.Arbitrary<[string | Buffer, string]> {
  return fc.tuple(fc.oneof({ weight: 4, arbitrary: nearValid(route.base) }, { weight: 1, arbitrary: rawBodies }), contentTypes);
}

/** The fixed seed of a route (WICK_FUZZ_SEED moves every route's by hand). */
export function fuzzSeed(route: Route, base = Number(process.env.WICK_FUZZ_SEED ?? 4242)): number {
  return base + route.path.length + 1000 * (route.variant?.length ?? 0);
}

/** Cases per route (WICK_FUZZ_RUNS runs longer searches by hand). */
export const FUZZ_RUNS = Number(process.env.WICK_FUZZ_RUNS ?? 1000);

/**
 * The first `n` cases `fc.assert(fc.asyncProperty(caseArbitrary(route), …), { seed })` runs,
 * in order (fc.sample walks the same random stream as a property run with that seed).
 */
export function sampleCases(route: Route, n = FUZZ_RUNS, seed = fuzzSeed(route)): [string | Buffer, string][] {
  return fc.sample(caseArbitrary(route), { seed, numRuns: n });
}

export interface Answer {
  status: number;
  text: string;
  type: string;
}

export async function send(baseUrl: string, route: Route, body: string | Buffer, contentType: string, signal?: AbortSignal): Promise<Answer> {
  const payload = typeof body === "string" ? body : new Uint8Array(body);
  const res = await fetch(baseUrl + route.path, { method: "POST", headers: contentType ? { "content-type": contentType } : {}, body: payload, signal });
  const text = await res.text();
  return { status: res.status, text, type: res.headers.get("content-type") ?? "" };
}

/** The properties every answer must have; returns a reason when one does not hold. */
export function problem(route: Route, r: Answer): string | null {
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
    try {
      JSON.parse(r.text);
    } catch {
      return `200 with a non-JSON body: ${r.text.slice(0, 200)}`;
    }
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

/** The kept regression cases (hostile bodies and failures the fuzzer found), replayed first. */
export function keptCorpus(): { route: Route; body: string }[] {
  const raw = JSON.parse(readFileSync(path.join(ROOT, "test/fuzz-corpus/http.json"), "utf8")) as { route: string; body: string }[];
  return raw.map((c) => {
    const route = ROUTES.find((r) => r.path === c.route);
    if (!route) throw new Error(`test/fuzz-corpus/http.json: unknown route ${c.route}`);
    return { route, body: c.body };
  });
}
