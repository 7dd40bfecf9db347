/**
 * Tool calls end to end through the real LFM2 chat template (llama.cpp's LFM2-8B-A1B.jinja) and
 * the `openai` client, on scripted fixtures: LFM2 models whose weights make greedy decoding a
 * lookup, so each answers with a chosen text (crates/wick-fixtures, `scripted-lfm2.json` says
 * which). The text is what a real LFM2 writes; the test is what the server makes of it —
 * calls parsed out in both response modes, control tokens never in client text, the tool
 * history rendered as the template expects.
 */
import { readFileSync } from "node:fs";
import path from "node:path";
import test from "ava";
import type OpenAI from "openai";
import { fixture, fixturesDir, needs } from "./helpers/assets.ts";
import { loadModels, openaiClient, postJson, startServer, type RunningServer } from "./helpers/server.ts";

const NAMES = ["pythonic-call", "json-call", "text-two-calls", "plain-answer", "control-leak"] as const;
type Script = (typeof NAMES)[number];
const file = (s: Script) => `scripted-lfm2-${s}.gguf`;
const need = needs(fixture(file("pythonic-call")), ...NAMES.slice(1).map((s) => fixture(file(s))), fixture("scripted-lfm2.json"));
const { test: t_, serial } = need;

let server: RunningServer;
let client: OpenAI;
let models: Awaited<ReturnType<typeof loadModels>> | undefined;
const registry = () => models!.registry;

test.before(async () => {
  if (!need.path) return;
  models = await loadModels(Object.fromEntries(NAMES.map((s) => [s, path.join(fixturesDir, file(s))])));
  server = await startServer({ registry: registry() });
  client = openaiClient(server.url);
});
test.after.always(async () => {
  await server?.close();
  await models?.unload();
});

const weather = {
  type: "function" as const,
  function: {
    name: "get_weather",
    description: "Current weather in a city",
    parameters: { type: "object", properties: { city: { type: "string" }, days: { type: "integer", minimum: 1 } }, required: ["city"] },
  },
};
const ask = [{ role: "user" as const, content: "What is the weather in Paris?" }];

async function chat(model: Script, extra: Record<string, unknown> = {}) {
  return client.chat.completions.create({ model, messages: ask, tools: [weather], temperature: 0, ...extra } as never) as Promise<OpenAI.ChatCompletion>;
}

/** Streams a request and folds the deltas the way OpenAI's own SDK helpers do. */
async function chatStream(model: Script, extra: Record<string, unknown> = {}) {
  const stream = (await client.chat.completions.create({
    model,
    messages: ask,
    tools: [weather],
    temperature: 0,
    stream: true,
    ...extra,
  } as never)) as unknown as AsyncIterable<OpenAI.ChatCompletionChunk>;
  let content = "";
  const calls: { id?: string; type?: string; name: string; arguments: string }[] = [];
  const callDeltas: OpenAI.ChatCompletionChunk.Choice.Delta.ToolCall[] = [];
  let finish: string | null = null;
  for await (const chunk of stream) {
    const choice = chunk.choices[0];
    if (!choice) continue;
    content += choice.delta.content ?? "";
    for (const d of choice.delta.tool_calls ?? []) {
      callDeltas.push(d);
      const c = (calls[d.index] ??= { name: "", arguments: "" });
      if (d.id) c.id = d.id;
      if (d.type) c.type = d.type;
      c.name += d.function?.name ?? "";
      c.arguments += d.function?.arguments ?? "";
    }
    if (choice.finish_reason) finish = choice.finish_reason;
  }
  return { content, calls, callDeltas, finish };
}

/** Python's json.dumps layout (", " and ": "), which the template's `tojson` writes. */
function pyJson(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(pyJson).join(", ")}]`;
  if (v && typeof v === "object")
    return `{${Object.entries(v)
      .map(([k, x]) => `${JSON.stringify(k)}: ${pyJson(x)}`)
      .join(", ")}}`;
  return JSON.stringify(v);
}

const scripts = () => JSON.parse(readFileSync(path.join(fixturesDir, "scripted-lfm2.json"), "utf8")) as Record<string, { text: string }>;

t_("the scripted fixtures say what the tests expect of them", (t) => {
  const s = scripts();
  t.is(s[file("pythonic-call")].text, '<|tool_call_start|>[get_weather(city="Paris", days=3)]<|tool_call_end|>');
  t.true(s[file("text-two-calls")].text.startsWith("Let me check both cities."));
});

t_("a Pythonic call comes back as tool_calls, not text (non-streamed)", async (t) => {
  const r = await chat("pythonic-call");
  const choice = r.choices[0];
  t.is(choice.finish_reason, "tool_calls");
  t.is(choice.message.content, null);
  const calls = choice.message.tool_calls!;
  t.is(calls.length, 1);
  t.regex(calls[0].id, /^call_[0-9a-f]{24}$/);
  t.is(calls[0].type, "function");
  const fn = (calls[0] as OpenAI.ChatCompletionMessageFunctionToolCall).function;
  t.is(fn.name, "get_weather");
  t.deepEqual(JSON.parse(fn.arguments), { city: "Paris", days: 3 });
});

t_("a Pythonic call streamed: id, type and name in one delta, then its arguments; finish tool_calls", async (t) => {
  const s = await chatStream("pythonic-call");
  t.is(s.content, "");
  t.is(s.finish, "tool_calls");
  t.is(s.calls.length, 1);
  t.deepEqual(
    s.callDeltas.map((d) => Object.keys(d).sort().join(",")),
    ["function,id,index,type", "function,index"],
  );
  t.is(s.callDeltas[0].function!.name, "get_weather");
  t.is(s.callDeltas[0].function!.arguments, "");
  t.deepEqual(JSON.parse(s.calls[0].arguments), { city: "Paris", days: 3 });
});

t_("a JSON-form call parses to the same call, streamed and not", async (t) => {
  const r = await chat("json-call");
  const fn = (r.choices[0].message.tool_calls![0] as OpenAI.ChatCompletionMessageFunctionToolCall).function;
  t.is(r.choices[0].finish_reason, "tool_calls");
  t.deepEqual([fn.name, JSON.parse(fn.arguments)], ["get_weather", { city: "Paris", days: 3 }]);
  const s = await chatStream("json-call");
  t.deepEqual([s.calls[0].name, JSON.parse(s.calls[0].arguments)], ["get_weather", { city: "Paris", days: 3 }]);
});

t_("text followed by two calls: the text is content, the calls are numbered 0 and 1", async (t) => {
  for (const s of [await chatStream("text-two-calls"), await chat("text-two-calls")]) {
    const { content, calls } =
      "choices" in s ? { content: s.choices[0].message.content, calls: s.choices[0].message.tool_calls!.map((c) => (c as OpenAI.ChatCompletionMessageFunctionToolCall).function) } : s;
    t.is(content, "Let me check both cities.");
    t.deepEqual(
      calls.map((c) => [c.name, JSON.parse(c.arguments)]),
      [
        ["get_weather", { city: "Paris" }],
        ["get_weather", { city: "Tokyo" }],
      ],
    );
  }
});

t_("a plain answer with tools offered stays content with finish_reason stop", async (t) => {
  const r = await chat("plain-answer");
  t.is(r.choices[0].message.content, "It is sunny in Paris, 21°C.");
  t.is(r.choices[0].finish_reason, "stop");
  t.is(r.choices[0].message.tool_calls, undefined);
  const s = await chatStream("plain-answer");
  t.is(s.content, "It is sunny in Paris, 21°C.");
  t.is(s.finish, "stop");
});

t_("tool_choice none: calls are not parsed, and the markers (control tokens) are not in the text", async (t) => {
  const r = await chat("pythonic-call", { tool_choice: "none" });
  t.is(r.choices[0].message.content, '[get_weather(city="Paris", days=3)]');
  t.is(r.choices[0].finish_reason, "stop");
});

t_("control tokens a model emits mid-text never reach the client (chat, stream, completions)", async (t) => {
  const r = await client.chat.completions.create({ model: "control-leak", messages: ask, temperature: 0, logprobs: true });
  t.is(r.choices[0].message.content, "Hello world!");
  // Logprobs still list every generated token, the control ones included.
  t.is(r.choices[0].logprobs!.content!.length, r.usage!.completion_tokens - 1);
  const s = await chatStream("control-leak", { tools: undefined });
  t.is(s.content, "Hello world!");
  const c = await client.completions.create({ model: "control-leak", prompt: "<|im_start|>assistant\n", temperature: 0, max_tokens: 20 });
  t.notRegex(c.choices[0].text, /<\|/);
});

t_("a follow-up turn: the assistant's call and the tool's result render as LFM2's template has them", async (t) => {
  const history = [
    ...ask,
    { role: "assistant", content: null, tool_calls: [{ id: "call_1", type: "function", function: { name: "get_weather", arguments: '{"city": "Paris"}' } }] },
    { role: "tool", tool_call_id: "call_1", content: '{"temp": 21, "sky": "sunny"}' },
  ];
  const r = (await client.chat.completions.create({ model: "plain-answer", messages: history, tools: [weather], temperature: 0 } as never)) as OpenAI.ChatCompletion;
  t.is(r.choices[0].message.content, "It is sunny in Paris, 21°C.");
  // The prompt the server rendered, token for token: the call written back in the model's own
  // syntax (LFM2's template ignores tool_calls), the result wrapped in tool-response tokens.
  const expected =
    "<|startoftext|><|im_start|>system\nList of tools: <|tool_list_start|>[" +
    pyJson(weather) +
    "]<|tool_list_end|><|im_end|>\n<|im_start|>user\nWhat is the weather in Paris?<|im_end|>\n" +
    '<|im_start|>assistant\n<|tool_call_start|>[get_weather(city="Paris")]<|tool_call_end|><|im_end|>\n' +
    '<|im_start|>tool\n<|tool_response_start|>{"temp": 21, "sky": "sunny"}<|tool_response_end|><|im_end|>\n<|im_start|>assistant\n';
  const ids = registry().get("plain-answer")!.engine.tokenize(expected, { addSpecial: false, parseSpecial: true });
  t.is(r.usage!.prompt_tokens, ids.length);
});

serial("bad tool input is a 400 naming the field, and the server keeps serving", async (t) => {
  const url = `${server.url}/v1/chat/completions`;
  const base = { model: "pythonic-call", messages: ask, tools: [weather] };
  const cases: [string, Record<string, unknown>, string][] = [
    ["a tool message answering no call", { messages: [...ask, { role: "tool", tool_call_id: "call_x", content: "21" }] }, "messages[1].tool_call_id"],
    ["tool_choice naming an unknown tool", { tool_choice: { type: "function", function: { name: "get_time" } } }, "tool_choice"],
    ["tool_choice required without tools", { tools: undefined, tool_choice: "required" }, "tool_choice"],
    [
      "an invalid parameters schema",
      { tools: [{ type: "function", function: { name: "f", parameters: { type: "object", properties: { a: { type: "no-such-type" } } } } }] },
      "tools[0].function.parameters",
    ],
    ["parameters that are not an object schema", { tools: [{ type: "function", function: { name: "f", parameters: { type: "string" } } }] }, "tools[0].function.parameters"],
    ["two tools with one name", { tools: [weather, weather] }, "tools[1].function.name"],
    ["a response_format schema that is not a schema", { response_format: { type: "json_schema", json_schema: { name: "x", schema: { type: 12 } } } }, "response_format.json_schema.schema"],
    ["a logit_bias id outside the vocabulary", { logit_bias: { "99999999": 5 } }, "logit_bias"],
  ];
  for (const [what, patch, param] of cases) {
    const r = await postJson(url, { ...base, ...patch });
    t.is(r.status, 400, `${what}: ${r.text}`);
    t.is(r.json?.error?.param, param, what);
    t.is(typeof r.json?.error?.message, "string", what);
  }
  const ok = await chat("pythonic-call");
  t.is(ok.choices[0].finish_reason, "tool_calls");
});

t_("/api/chat with tools through the ollama client: the call with object arguments, streamed and not", async (t) => {
  const { Ollama } = await import("ollama");
  const ollama = new Ollama({ host: server.url });
  const r = await ollama.chat({ model: "pythonic-call", messages: ask, tools: [weather], options: { temperature: 0 } });
  t.is(r.message.content, "");
  t.is(r.done_reason, "stop");
  t.deepEqual(
    r.message.tool_calls!.map((c) => c.function),
    [{ index: 0, name: "get_weather", arguments: { city: "Paris", days: 3 } }],
  );
  const calls: unknown[] = [];
  let content = "";
  for await (const part of await ollama.chat({ model: "text-two-calls", messages: ask, tools: [weather], options: { temperature: 0 }, stream: true })) {
    content += part.message.content;
    calls.push(...(part.message.tool_calls ?? []).map((c) => c.function));
  }
  t.is(content, "Let me check both cities.");
  t.deepEqual(calls, [
    { index: 0, name: "get_weather", arguments: { city: "Paris" } },
    { index: 1, name: "get_weather", arguments: { city: "Tokyo" } },
  ]);
  // A follow-up turn as Ollama clients send it: the result paired by tool_name, no ids.
  const follow = await ollama.chat({
    model: "plain-answer",
    messages: [
      ...ask,
      { role: "assistant", content: "", tool_calls: [{ function: { name: "get_weather", arguments: { city: "Paris" } } }] },
      { role: "tool", content: "21", tool_name: "get_weather" },
    ],
    tools: [weather],
    options: { temperature: 0 },
  });
  t.is(follow.message.content, "It is sunny in Paris, 21°C.");
});
