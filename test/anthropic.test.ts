/**
 * Anthropic Messages (`/v1/messages`, `/v1/messages/count_tokens`) through the real
 * `@anthropic-ai/sdk` client, on the scripted LFM2 fixtures (greedy output fixed by weights,
 * `scripted-lfm2.json` says which text) and the real LFM2 template: a text answer, a tool call
 * and its tool_result follow-up, stop sequences, the reasoning split, each non-streamed and
 * streamed (the SDK's MessageStream must fold the events into the same content), count_tokens
 * equal to the prompt the call ran, x-api-key auth, and bad input in Anthropic's error shape.
 */
import { readFileSync } from "node:fs";
import path from "node:path";
import Anthropic from "@anthropic-ai/sdk";
import test from "ava";
import { Engine } from "../ts/engine/index.ts";
import { fixture, fixturesDir, needs } from "./helpers/assets.ts";
import { loadModels, postJson, startServer, type RunningServer } from "./helpers/server.ts";

const NAMES = ["plain-answer", "json-call", "pythonic-call"] as const;
type Script = (typeof NAMES)[number] | "thinking";
const file = (s: Script) => `scripted-lfm2-${s}.gguf`;
const need = needs(fixture(file("plain-answer")), ...NAMES.slice(1).map((s) => fixture(file(s))), fixture("scripted-lfm2.json"));
const needThinking = needs(fixture(file("thinking")), fixture(file("plain-answer")));
const needTiny = needs(fixture("tiny-lfm2-q8_0.gguf"), fixture(file("plain-answer")));
const { test: t_, serial } = need;

const KEY = "sk-ant-test-key";
let server: RunningServer;
let keyed: RunningServer;
let client: Anthropic;
let models: Awaited<ReturnType<typeof loadModels>> | undefined;
const registry = () => models!.registry;

test.before(async () => {
  if (!need.path) return;
  const names: Script[] = [...NAMES, ...(needThinking.path ? (["thinking"] as const) : [])];
  models = await loadModels(Object.fromEntries(names.map((s) => [s, path.join(fixturesDir, file(s))])));
  server = await startServer({ registry: registry() });
  keyed = await startServer({ registry: registry(), apiKey: KEY });
  client = anthropic(server.url);
});
test.after.always(async () => {
  await server?.close();
  await keyed?.close();
  await models?.unload();
});

function anthropic(url: string, auth: { apiKey?: string | null; authToken?: string | null } = { apiKey: "unused" }): Anthropic {
  return new Anthropic({ baseURL: url, maxRetries: 0, timeout: 120_000, ...auth });
}

const scripts = () => JSON.parse(readFileSync(path.join(fixturesDir, "scripted-lfm2.json"), "utf8")) as Record<string, { text: string }>;
const ANSWER = "It is sunny in Paris, 21°C.";

const weather: Anthropic.Tool = {
  name: "get_weather",
  description: "Current weather in a city",
  input_schema: { type: "object", properties: { city: { type: "string" }, days: { type: "integer", minimum: 1 } }, required: ["city"] },
};
const ask: Anthropic.MessageParam[] = [{ role: "user", content: "What is the weather in Paris?" }];

type Params = Omit<Anthropic.MessageCreateParamsNonStreaming, "model" | "max_tokens" | "messages"> & { messages?: Anthropic.MessageParam[]; max_tokens?: number; temperature?: number };

/** The same request answered whole and streamed (the SDK's MessageStream assembling it), and the kinds of events the stream sent. */
async function both(model: Script, extra: Params = {}) {
  const params = { model, max_tokens: 64, messages: ask, temperature: 0, ...extra } as Anthropic.MessageCreateParamsNonStreaming;
  const whole = await client.messages.create(params);
  const events: string[] = [];
  const stream = client.messages.stream(params);
  stream.on("streamEvent", (ev) => events.push(ev.type === "content_block_delta" ? `${ev.type}:${ev.delta.type}` : ev.type));
  const streamed = await stream.finalMessage();
  return { whole, streamed, events };
}

/** Content as JSON (the SDK's streamed tool_use blocks carry a non-enumerable buffer), tool ids blanked: they are fresh per call. */
const plain = (content: Anthropic.ContentBlock[]) => JSON.parse(JSON.stringify(content, (k, v: unknown) => (k === "id" ? "toolu_*" : v))) as unknown;

t_("a text answer: one text block, end_turn, usage; the stream folds into the same message", async (t) => {
  t.is(scripts()[file("plain-answer")].text, ANSWER);
  const { whole, streamed, events } = await both("plain-answer");
  t.regex(whole.id, /^msg_[0-9a-f]{24}$/);
  t.like(whole, { type: "message", role: "assistant", model: "plain-answer", stop_reason: "end_turn", stop_sequence: null });
  t.deepEqual(whole.content, [{ type: "text", text: ANSWER }]);
  // Nine text tokens and the end-of-turn token.
  t.deepEqual(whole.usage, { input_tokens: whole.usage.input_tokens, output_tokens: 10, cache_creation_input_tokens: 0, cache_read_input_tokens: 0 });
  t.true(whole.usage.input_tokens > 5);

  t.deepEqual(plain(streamed.content), plain(whole.content));
  t.like(streamed, { stop_reason: "end_turn", stop_sequence: null, model: "plain-answer", usage: whole.usage });
  t.is(events[0], "message_start");
  t.is(events[1], "content_block_start");
  t.true(events.slice(2, -3).every((e) => e === "content_block_delta:text_delta"));
  t.deepEqual(events.slice(-3), ["content_block_stop", "message_delta", "message_stop"]);
});

t_("the raw stream: named events, a ping after message_start, no [DONE]", async (t) => {
  const res = await fetch(`${server.url}/v1/messages`, {
    method: "POST",
    headers: { "content-type": "application/json", "anthropic-version": "2023-06-01" },
    body: JSON.stringify({ model: "plain-answer", max_tokens: 64, messages: ask, temperature: 0, stream: true }),
  });
  t.is(res.status, 200);
  t.regex(res.headers.get("content-type") ?? "", /^text\/event-stream/);
  const frames = (await res.text()).trim().split("\n\n");
  const named = frames.map((f) => {
    const [event, data] = f.split("\n");
    const body = JSON.parse(data.replace(/^data: /, "")) as { type: string };
    t.is(event, `event: ${body.type}`);
    return body.type;
  });
  t.deepEqual(named.slice(0, 3), ["message_start", "ping", "content_block_start"]);
  t.is(named.at(-1), "message_stop");
  t.false(frames.some((f) => f.includes("[DONE]")));
});

t_("a tool call: a tool_use block with the parsed input and stop_reason tool_use, streamed and not", async (t) => {
  for (const model of ["json-call", "pythonic-call"] as const) {
    const { whole, streamed, events } = await both(model, { tools: [weather] });
    t.is(whole.stop_reason, "tool_use", model);
    t.is(whole.content.length, 1, model);
    const call = whole.content[0] as Anthropic.ToolUseBlock;
    t.like(call, { type: "tool_use", name: "get_weather", input: { city: "Paris", days: 3 } }, model);
    t.regex(call.id, /^toolu_[0-9a-f]{24}$/);
    t.deepEqual(plain(streamed.content), plain(whole.content), model);
    t.is(streamed.stop_reason, "tool_use");
    t.deepEqual(events.slice(1, 4), ["content_block_start", "content_block_delta:input_json_delta", "content_block_stop"], model);
  }
});

t_("the tool_result follow-up renders as LFM2's template has it, and count_tokens counts that prompt", async (t) => {
  const first = await client.messages.create({ model: "pythonic-call", max_tokens: 64, messages: ask, tools: [weather] });
  const call = first.content[0] as Anthropic.ToolUseBlock;
  const messages: Anthropic.MessageParam[] = [
    ...ask,
    { role: "assistant", content: first.content },
    { role: "user", content: [{ type: "tool_result", tool_use_id: call.id, content: [{ type: "text", text: '{"temp": 21, "sky": "sunny"}' }] }] },
  ];
  const { whole, streamed } = await both("plain-answer", { messages, tools: [weather], system: "Be brief." });
  t.deepEqual(whole.content, [{ type: "text", text: ANSWER }]);
  t.deepEqual(plain(streamed.content), plain(whole.content));
  // Token for token: the system text before the tool list, the call written back in the model's
  // own syntax, the result wrapped in tool-response tokens.
  const tool = { type: "function", function: { name: weather.name, description: weather.description, parameters: weather.input_schema } };
  const expected =
    `<|startoftext|><|im_start|>system\nBe brief.\nList of tools: <|tool_list_start|>[${pyJson(tool)}]<|tool_list_end|><|im_end|>\n` +
    "<|im_start|>user\nWhat is the weather in Paris?<|im_end|>\n" +
    '<|im_start|>assistant\n<|tool_call_start|>[get_weather(city="Paris", days=3)]<|tool_call_end|><|im_end|>\n' +
    '<|im_start|>tool\n<|tool_response_start|>{"temp": 21, "sky": "sunny"}<|tool_response_end|><|im_end|>\n<|im_start|>assistant\n';
  const ids = registry().get("plain-answer")!.engine.tokenize(expected, { addSpecial: false, parseSpecial: true });
  t.is(whole.usage.input_tokens, ids.length);
  const counted = await client.messages.countTokens({ model: "plain-answer", messages, tools: [weather], system: [{ type: "text", text: "Be brief." }] });
  t.deepEqual(counted, { input_tokens: whole.usage.input_tokens });
});

t_("count_tokens equals the input_tokens of the real call, and grows with the tools", async (t) => {
  const r = await client.messages.create({ model: "plain-answer", max_tokens: 16, messages: ask });
  const counted = await client.messages.countTokens({ model: "plain-answer", messages: ask });
  t.is(counted.input_tokens, r.usage.input_tokens);
  const withTools = await client.messages.countTokens({ model: "plain-answer", messages: ask, tools: [weather] });
  t.true(withTools.input_tokens > counted.input_tokens);
});

t_("stop_sequences: the text ends before the matched one, stop_reason stop_sequence; max_tokens", async (t) => {
  // The earliest match in the text wins, not the first in the list.
  const { whole, streamed } = await both("plain-answer", { stop_sequences: ["nothing like this", " in", "sunny"] });
  t.deepEqual(whole.content, [{ type: "text", text: "It is " }]);
  t.like(whole, { stop_reason: "stop_sequence", stop_sequence: "sunny" });
  t.like(streamed, { stop_reason: "stop_sequence", stop_sequence: whole.stop_sequence });
  t.deepEqual(plain(streamed.content), plain(whole.content));
  const unmatched = await both("plain-answer", { stop_sequences: ["nothing like this"] });
  t.like(unmatched.whole, { stop_reason: "end_turn", stop_sequence: null });
  const cut = await both("plain-answer", { max_tokens: 3 });
  t.like(cut.whole, { stop_reason: "max_tokens", content: [{ type: "text", text: "It is sunny" }], usage: { output_tokens: 3 } });
  t.like(cut.streamed, { stop_reason: "max_tokens", usage: { output_tokens: 3 } });
});

needThinking.test("reasoning and answer: a thinking block then a text block, streamed and not", async (t) => {
  const script = scripts()[file("thinking")].text;
  const { whole, streamed, events } = await both("thinking", { thinking: { type: "enabled", budget_tokens: 1024 }, max_tokens: 128 });
  t.is(whole.content.length, 2, JSON.stringify(whole.content));
  const [thinking, text] = whole.content as [Anthropic.ThinkingBlock, Anthropic.TextBlock];
  t.like(thinking, { type: "thinking", signature: "" });
  t.is(text.type, "text");
  // The script is `<think>reasoning</think>answer`: each part in its own block, no tags left.
  const [, reasoning, answer] = /^<think>(.*)<\/think>(.*)$/s.exec(script)!;
  t.is(thinking.thinking.trim(), reasoning.trim());
  t.is(text.text.trim(), answer.trim());
  t.deepEqual(plain(streamed.content), plain(whole.content));
  t.true(events.includes("content_block_delta:thinking_delta"));
});

/** Python's json.dumps layout (", " and ": "), which the template's `tojson` writes. */
function pyJson(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(pyJson).join(", ")}]`;
  if (v && typeof v === "object")
    return `{${Object.entries(v)
      .map(([k, x]) => `${JSON.stringify(k)}: ${pyJson(x)}`)
      .join(", ")}}`;
  return JSON.stringify(v);
}

t_("x-api-key (what the SDK sends) or a Bearer token; a wrong or missing key is 401 authentication_error", async (t) => {
  const ok = await anthropic(keyed.url, { apiKey: KEY }).messages.create({ model: "plain-answer", max_tokens: 16, messages: ask });
  t.is(ok.type, "message");
  const bearer = await anthropic(keyed.url, { apiKey: null, authToken: KEY }).messages.countTokens({ model: "plain-answer", messages: ask });
  t.true(bearer.input_tokens > 0);
  const err = await t.throwsAsync(anthropic(keyed.url, { apiKey: "wrong" }).messages.create({ model: "plain-answer", max_tokens: 16, messages: ask }), {
    instanceOf: Anthropic.AuthenticationError,
  });
  t.like(err?.error, { type: "error", error: { type: "authentication_error" } });
  const missing = await postJson(`${keyed.url}/v1/messages/count_tokens`, { messages: ask });
  t.is(missing.status, 401);
  t.like(missing.json, { type: "error", error: { type: "authentication_error" } });
});

serial("bad input is a 4xx in Anthropic's error shape, and the server keeps serving", async (t) => {
  const url = `${server.url}/v1/messages`;
  const base = { model: "plain-answer", max_tokens: 16, messages: ask };
  const user = (content: unknown[]) => ({ messages: [{ role: "user", content }] });
  const cases: [string, unknown, number, string, RegExp][] = [
    ["no max_tokens", { max_tokens: undefined }, 400, "invalid_request_error", /max_tokens/],
    ["an unknown block type", user([{ type: "document", source: { type: "text", data: "x" } }]), 400, "invalid_request_error", /messages\[0\]\.content\[0\]\.type/],
    ["a tool_use in a user turn", user([{ type: "tool_use", id: "toolu_1", name: "f", input: {} }]), 400, "invalid_request_error", /messages\[0\]\.content\[0\]\.type/],
    ["a tool_result answering no tool_use", user([{ type: "tool_result", tool_use_id: "toolu_nope", content: "21" }]), 400, "invalid_request_error", /toolu_nope/],
    ["a server tool", { tools: [{ type: "web_search_20250305", name: "web_search" }] }, 400, "invalid_request_error", /server tool/],
    ["a custom tool without input_schema", { tools: [{ name: "f" }] }, 400, "invalid_request_error", /tools\[0\]\.input_schema/],
    ["a tool schema that is not one", { tools: [{ name: "f", input_schema: { type: "object", properties: { a: { type: 12 } } } }] }, 400, "invalid_request_error", /tools\[0\]\.input_schema/],
    ["tool_choice naming no tool", { tools: [weather], tool_choice: { type: "tool", name: "get_time" } }, 400, "invalid_request_error", /get_time/],
    ["an image for a text-only model", user([{ type: "image", source: { type: "base64", media_type: "image/png", data: "iVBORw0KGgo=" } }]), 400, "invalid_request_error", /image/],
    ["an unknown model", { model: "no-such-model" }, 404, "not_found_error", /no-such-model/],
    ["a body that is not JSON", "{not json", 400, "invalid_request_error", /JSON/],
  ];
  for (const [what, patch, status, type, message] of cases) {
    const body = typeof patch === "string" ? patch : { ...base, ...(patch as object) };
    for (const stream of [false, true]) {
      const r = await postJson(url, typeof body === "string" ? body : { ...body, stream });
      t.is(r.status, status, `${what}: ${r.text}`);
      t.is(r.json?.type, "error", what);
      t.is(r.json?.error?.type, type, what);
      t.regex(r.json?.error?.message ?? "", message, what);
    }
  }
  const count = await postJson(`${url}/count_tokens`, user([{ type: "tool_result", tool_use_id: "x" }]));
  t.like(count.json, { type: "error", error: { type: "invalid_request_error" } });
  const wrongMethod = await fetch(url);
  t.is(wrongMethod.status, 405);
  t.like(await wrongMethod.json(), { type: "error", error: { type: "invalid_request_error" } });
  const sdkErr = await t.throwsAsync(client.messages.create({ ...base, max_tokens: 16, messages: [{ role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_x", content: "1" }] }] }), {
    instanceOf: Anthropic.BadRequestError,
  });
  t.is(sdkErr?.status, 400);
  const ok = await client.messages.create(base);
  t.is(ok.stop_reason, "end_turn");
});

needTiny.serial("an engine failure mid-stream is an `error` event in Anthropic's shape, which the SDK throws", async (t) => {
  // Random weights: it talks until max_tokens, long enough to be cut off.
  const modelPath = needTiny.path!;
  const engine = await Engine.load({ modelPath, contextSize: 1024, maxSequences: 1 });
  registry().add(engine, { path: modelPath, id: "doomed" });
  const stream = client.messages.stream({ model: "doomed", max_tokens: 500, messages: ask });
  let seen = 0;
  let unloading: Promise<void> | undefined;
  stream.on("streamEvent", () => {
    if (++seen === 4) unloading = engine.unload();
  });
  const err = await t.throwsAsync(stream.finalMessage(), { instanceOf: Anthropic.APIError });
  await unloading;
  t.true(seen >= 4 && seen < 400, `${seen} events`);
  t.like(err?.error, { type: "error", error: { type: "overloaded_error" } });
  const ok = await client.messages.create({ model: "plain-answer", max_tokens: 16, messages: ask });
  t.is(ok.stop_reason, "end_turn");
});
