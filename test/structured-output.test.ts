/**
 * Constrained decoding seen through the API: whatever a model would write, a forced tool call
 * parses and its arguments validate against the tool's schema, and a `response_format` answer
 * parses and validates against its schema — checked with ajv over 20 seeds at temperature 1, on
 * a random-weight LFM2 with LFM2's special tokens and real template (nothing but the grammar
 * keeps it in line) and on the real SmolLM2.
 */
import { Ajv } from "ajv";
import type OpenAI from "openai";
import { fixture, needs, smollm2 } from "./helpers/assets.ts";
import { postJson, serveModel } from "./helpers/server.ts";

const ajv = new Ajv({ strict: false });
const SEEDS = Array.from({ length: 20 }, (_, i) => 1000 + i);

const weather = {
  name: "get_weather",
  parameters: {
    type: "object",
    properties: {
      city: { type: "string", maxLength: 16 },
      days: { type: "integer", minimum: 1, maximum: 14 },
      units: { type: "string", enum: ["celsius", "fahrenheit"] },
    },
    required: ["city", "days"],
    additionalProperties: false,
  },
};
const clock = {
  name: "get_time",
  parameters: { type: "object", properties: { zone: { type: "string", enum: ["UTC", "CET", "JST"] }, exact: { type: "boolean" } }, required: ["zone"] },
};
const tools = [weather, clock].map((f) => ({ type: "function" as const, function: f }));

/** Nested objects, arrays, enums, bounds and required fields, every string and list bounded. */
const person = {
  type: "object",
  properties: {
    name: { type: "string", minLength: 1, maxLength: 12 },
    age: { type: "integer", minimum: 0, maximum: 120 },
    role: { type: "string", enum: ["admin", "user", "guest"] },
    tags: { type: "array", items: { type: "string", maxLength: 8 }, minItems: 1, maxItems: 3 },
    address: {
      type: "object",
      properties: { city: { type: "string", maxLength: 12 }, zip: { type: "string", pattern: "^[0-9]{5}$" } },
      required: ["city", "zip"],
      additionalProperties: false,
    },
  },
  required: ["name", "age", "role", "tags", "address"],
  additionalProperties: false,
};
const validPerson = ajv.compile(person);

const lfm = needs(fixture("tiny-lfm2-tools-q8_0.gguf"));
const lfmServed = serveModel(lfm.path, { maxSequences: 4 });
const smol = needs(smollm2());
const smolServed = serveModel(smol.path, { maxSequences: 4 });

const ask = [{ role: "user" as const, content: "What is the weather in Paris for the next three days?" }];

function callsOf(r: OpenAI.ChatCompletion, choice = 0) {
  return (r.choices[choice].message.tool_calls ?? []).map((c) => (c as OpenAI.ChatCompletionMessageFunctionToolCall).function);
}

function checkCall(t: { true(v: boolean, m?: string): void }, fn: { name: string; arguments: string }, seed: number) {
  const tool = [weather, clock].find((x) => x.name === fn.name);
  t.true(tool !== undefined, `seed ${seed}: a call to an unknown tool ${fn.name}`);
  const valid = ajv.compile(tool!.parameters);
  t.true(valid(JSON.parse(fn.arguments)), `seed ${seed}: ${fn.arguments} does not validate: ${ajv.errorsText(valid.errors)}`);
}

lfm.serial("tool_choice required: a random-weight LFM2 always makes a valid call (20 seeds, temperature 1)", async (t) => {
  for (const seed of SEEDS) {
    // Room for the most calls a turn may make (MAX_CALLS, ts/service/tools/grammar.ts): a random model may use them all.
    const r = (await lfmServed.client.chat.completions.create({ model: "m", messages: ask, tools, tool_choice: "required", temperature: 1, seed, max_tokens: 600 } as never)) as OpenAI.ChatCompletion;
    t.is(r.choices[0].finish_reason, "tool_calls", `seed ${seed}: ${JSON.stringify(r.choices[0].message)}`);
    const calls = callsOf(r);
    t.true(calls.length >= 1, `seed ${seed}`);
    for (const fn of calls) checkCall(t, fn, seed);
  }
});

lfm.serial("a named tool_choice: every call is to that function and validates (20 seeds)", async (t) => {
  for (const seed of SEEDS) {
    const r = (await lfmServed.client.chat.completions.create({
      model: "m",
      messages: ask,
      tools,
      tool_choice: { type: "function", function: { name: "get_time" } },
      temperature: 1,
      seed,
      max_tokens: 200,
    } as never)) as OpenAI.ChatCompletion;
    const calls = callsOf(r);
    t.is(calls.length, 1, `seed ${seed}: ${JSON.stringify(r.choices[0].message)}`);
    t.is(calls[0].name, "get_time");
    checkCall(t, calls[0], seed);
  }
});

lfm.serial("n = 3 with a forced call: each choice has its own valid call", async (t) => {
  const r = (await lfmServed.client.chat.completions.create({
    model: "m",
    messages: ask,
    tools,
    tool_choice: "required",
    temperature: 1,
    seed: 7,
    n: 3,
    max_tokens: 600, // room for MAX_CALLS calls
  } as never)) as OpenAI.ChatCompletion;
  t.is(r.choices.length, 3);
  for (const c of r.choices) {
    t.is(c.finish_reason, "tool_calls");
    for (const fn of callsOf(r, c.index)) checkCall(t, fn, 7);
  }
});

lfm.serial("tool_choice auto: free text until the model starts a call, then the call is held to the schema (one, with parallel_tool_calls false)", async (t) => {
  // logit_bias makes the random model open a call at once (token 10 is <|tool_call_start|>);
  // from there only the grammar decides, so the call must come out valid — and alone.
  for (const seed of SEEDS.slice(0, 10)) {
    const r = (await lfmServed.client.chat.completions.create({
      model: "m",
      messages: ask,
      tools,
      temperature: 1,
      seed,
      max_tokens: 120,
      logit_bias: { "10": 100 },
      parallel_tool_calls: false,
    } as never)) as OpenAI.ChatCompletion;
    const calls = callsOf(r);
    t.is(calls.length, 1, `seed ${seed}: ${JSON.stringify(r.choices[0].message)}`);
    checkCall(t, calls[0], seed);
  }
});

for (const [name, need, served] of [
  ["the random-weight LFM2", lfm, lfmServed],
  ["SmolLM2-135M", smol, smolServed],
] as const) {
  need.serial(`response_format json_schema on ${name}: every answer parses and validates (20 seeds)`, async (t) => {
    for (const seed of SEEDS) {
      const r = await served.client.chat.completions.create({
        model: "m",
        messages: [{ role: "user", content: "Describe a person as JSON." }],
        response_format: { type: "json_schema", json_schema: { name: "person", schema: person, strict: true } },
        temperature: 1,
        seed,
        max_tokens: 300,
      });
      const text = r.choices[0].message.content!;
      t.is(r.choices[0].finish_reason, "stop", `seed ${seed}: ${text}`);
      t.true(validPerson(JSON.parse(text)), `seed ${seed}: ${text}: ${ajv.errorsText(validPerson.errors)}`);
    }
  });
}

smol.serial("response_format json_object: the answer is one JSON object", async (t) => {
  const r = await smolServed.client.chat.completions.create({
    model: "m",
    messages: [{ role: "user", content: "Reply with a JSON object with the keys name and age for a cat called Tom who is 3." }],
    response_format: { type: "json_object" },
    temperature: 0,
    max_tokens: 300,
  });
  const text = r.choices[0].message.content!;
  t.is(r.choices[0].finish_reason, "stop", text);
  const value = JSON.parse(text);
  t.true(typeof value === "object" && value !== null && !Array.isArray(value), text);
});

smol.serial("logit_bias: -100 bans the greedy token, +100 forces a token", async (t) => {
  const base = { model: "m", messages: [{ role: "user" as const, content: "Say hello." }], temperature: 0, max_tokens: 1, logprobs: true };
  const first = await smolServed.client.chat.completions.create(base);
  const greedy = first.choices[0].logprobs!.content![0];
  const tokenOf = (text: string) => smolServed.engine.tokenize(text, { addSpecial: false })[0];
  const banned = await smolServed.client.chat.completions.create({ ...base, logit_bias: { [tokenOf(greedy.token)]: -100 } });
  t.not(banned.choices[0].logprobs!.content![0].token, greedy.token);
  const forcedId = tokenOf(" banana");
  const forced = await smolServed.client.chat.completions.create({ ...base, logit_bias: { [forcedId]: 100 } });
  t.is(forced.choices[0].message.content, smolServed.engine.detokenize([forcedId]));
});

smol.serial("grammars too large: a huge schema and a grammar over the engine's limits are 400s naming the field; the server keeps serving", async (t) => {
  const url = `${smolServed.server.url}/v1/chat/completions`;
  const base = { messages: [{ role: "user", content: "hi" }], max_tokens: 4 };
  // Tens of thousands of enum strings (1.5 MB): refused before any schema check runs.
  const huge = { type: "object", properties: { pick: { type: "string", enum: Array.from({ length: 60_000 }, (_, i) => `v${i.toString(36)}-${(i * 7919).toString(36)}`) } } };
  const started = performance.now();
  const a = await postJson(url, { ...base, response_format: { type: "json_schema", json_schema: { name: "big", schema: huge } } });
  t.is(a.status, 400, a.text.slice(0, 300));
  t.is(a.json?.error?.param, "response_format.json_schema.schema");
  t.is(a.json?.error?.code, "schema_too_large");
  t.true(performance.now() - started < 2000, "answered at once");
  // A schema ajv accepts but no JSON value satisfies: the grammar compiler says so.
  const never = { allOf: [{ type: "string" }, { type: "integer" }] };
  const b = await postJson(url, { ...base, response_format: { type: "json_schema", json_schema: { name: "never", schema: never } } });
  t.is(b.status, 400, b.text.slice(0, 300));
  t.like(b.json?.error, { param: "response_format", code: "invalid_grammar" });
  // Tools each under the schema cap, together far past the context once written into the prompt
  // (SmolLM2's template has no place for tools: they go in as the generic tool prompt), which is
  // checked before their call grammar is compiled. (The engine's grammar source limit:
  // crates/wick-core/tests/grammar.rs.)
  const props = Object.fromEntries(Array.from({ length: 700 }, (_, i) => [`key_${i}_${"q".repeat(20)}`, { type: "string", pattern: "^[a-z]{3,40}$" }]));
  const wideTools = [0, 1, 2].map((i) => ({ type: "function", function: { name: `tool_${i}`, parameters: { type: "object", properties: props } } }));
  const c = await postJson(url, { ...base, tools: wideTools, tool_choice: "required" });
  t.is(c.status, 400, c.text.slice(0, 300));
  t.like(c.json?.error, { param: "messages", code: "context_length_exceeded" });
  // A tool whose parameters no value satisfies: the call grammar fails to compile, named as `tools`.
  const impossible = [{ type: "function", function: { name: "never", parameters: { type: "object", properties: { x: never }, required: ["x"] } } }];
  const d = await postJson(url, { ...base, tools: impossible, tool_choice: "required" });
  t.is(d.status, 400, d.text.slice(0, 300));
  t.like(d.json?.error, { param: "tools", code: "invalid_grammar" });
  const ok = await smolServed.client.chat.completions.create({ model: "m", messages: [{ role: "user", content: "hi" }], max_tokens: 2 });
  t.is(ok.choices.length, 1);
});
