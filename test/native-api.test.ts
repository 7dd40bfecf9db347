/**
 * The native (Ollama) chat and generate routes through the real `ollama` npm client and raw
 * HTTP: NDJSON streams and single objects, Ollama's field names and types (durations in ns,
 * `done_reason`, `context`), `format` as JSON mode or a schema, `options` typed, errors as
 * `{"error": "…"}`.
 */
import { Ollama } from "ollama";
import { needs, smollm2 } from "./helpers/assets.ts";
import { postJson, serveModel } from "./helpers/server.ts";

const { path: smol, serial } = needs(smollm2());
const served = serveModel(smol);
const client = () => new Ollama({ host: served.server.url });
const hi = [{ role: "user", content: "Say hello in five words." }];

serial("/api/chat stream: NDJSON chunks of message pieces, then done with Ollama's metrics", async (t) => {
  const res = await fetch(`${served.server.url}/api/chat`, { method: "POST", body: JSON.stringify({ model: "smol", messages: hi, options: { temperature: 0, num_predict: 8 } }) });
  t.is(res.headers.get("content-type"), "application/x-ndjson");
  const lines = (await res.text())
    .trim()
    .split("\n")
    .map((l) => JSON.parse(l));
  const last = lines.at(-1)!;
  t.true(lines.slice(0, -1).every((l) => l.done === false && l.message.role === "assistant" && typeof l.message.content === "string"));
  t.is(last.done, true);
  t.is(last.done_reason, "length");
  t.is(last.eval_count, 8);
  for (const k of ["total_duration", "prompt_eval_count", "prompt_eval_duration", "eval_duration"]) t.true(Number.isInteger(last[k]) && last[k] > 0, k);
  t.true(last.total_duration > 1e6, "nanoseconds");
  t.regex(last.created_at, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d/);
});

serial("/api/chat through the ollama client, streamed and not, say the same at temperature 0", async (t) => {
  const one = await client().chat({ model: "smol", messages: hi, stream: false, options: { temperature: 0, num_predict: 12 } });
  let streamed = "";
  for await (const part of await client().chat({ model: "smol", messages: hi, stream: true, options: { temperature: 0, num_predict: 12 } })) streamed += part.message.content;
  t.is(streamed, one.message.content);
  t.true(one.message.content.length > 0);
  t.is(one.eval_count, 12);
});

serial("/api/generate: the template applies, `context` carries the exchange, raw skips the template", async (t) => {
  const r = await client().generate({ model: "smol", prompt: "Name a colour.", options: { temperature: 0, num_predict: 6 } });
  t.true(r.done);
  t.true(Array.isArray(r.context) && r.context.length > r.prompt_eval_count);
  const next = await client().generate({ model: "smol", prompt: "And another?", context: r.context, options: { temperature: 0, num_predict: 6 } });
  t.true(next.prompt_eval_count > r.context.length);
  const raw = await postJson(`${served.server.url}/api/generate`, { model: "smol", prompt: "The capital of France is", raw: true, stream: false, options: { temperature: 0, num_predict: 4 } });
  t.is(raw.status, 200);
  t.is(raw.json.context, undefined);
  t.true(raw.json.prompt_eval_count < 10, "no template around a raw prompt");
});

serial("an empty prompt or no messages only loads the model", async (t) => {
  const g = await postJson(`${served.server.url}/api/generate`, { model: "smol" });
  t.like(g.json, { response: "", done: true, done_reason: "load" });
  const c = await postJson(`${served.server.url}/api/chat`, { model: "smol", messages: [] });
  t.like(c.json, { done: true, done_reason: "load" });
});

serial('format: "json" and a schema constrain the answer', async (t) => {
  const j = await client().generate({
    model: "smol",
    prompt: "Reply with a JSON object with the keys name and age for a cat called Tom who is 3.",
    format: "json",
    options: { temperature: 0, num_predict: 200 },
  });
  t.is(j.done_reason, "stop", j.response);
  t.is(typeof JSON.parse(j.response ?? ""), "object");
  const schema = { type: "object", properties: { colour: { type: "string", enum: ["red", "green", "blue"] } }, required: ["colour"] };
  const s = await client().chat({ model: "smol", messages: [{ role: "user", content: "Pick a colour." }], format: schema, options: { temperature: 1, seed: 3, num_predict: 40 } });
  t.true(["red", "green", "blue"].includes(JSON.parse(s.message.content).colour));
});

serial("bad native input: 400 with {error} naming the field; the server keeps serving", async (t) => {
  const url = served.server.url;
  const cases: [string, string, Record<string, unknown>, RegExp][] = [
    ["options of the wrong type", "/api/chat", { model: "smol", messages: hi, options: { temperature: "hot" } }, /temperature/],
    ["a message role Ollama does not have", "/api/chat", { model: "smol", messages: [{ role: "wizard", content: "x" }] }, /role/],
    ["a missing model", "/api/generate", { prompt: "x" }, /model/],
    ["a format that is not a schema", "/api/chat", { model: "smol", messages: hi, format: { type: 5 } }, /format/],
    ["images for a text-only model", "/api/generate", { model: "smol", prompt: "x", images: ["aGk="] }, /image/],
  ];
  for (const [what, route, body, re] of cases) {
    const r = await postJson(url + route, body);
    t.is(r.status, 400, `${what}: ${r.text}`);
    t.deepEqual(Object.keys(r.json), ["error"], what);
    t.regex(r.json.error, re, what);
  }
  const ok = await client().generate({ model: "smol", prompt: "hi", options: { num_predict: 2 } });
  t.true(ok.done);
});

serial("GET / and HEAD / say Wick is running; /api/version through the ollama client", async (t) => {
  const get = await fetch(`${served.server.url}/`);
  t.is(get.status, 200);
  t.is(await get.text(), "Wick is running");
  const head = await fetch(`${served.server.url}/`, { method: "HEAD" });
  t.is(head.status, 200);
  const { version } = await client().version();
  t.regex(version, /^\d+\.\d+\.\d+/);
});
