/**
 * POST /v1/responses with the real `openai` client (`responses.create`, `responses.parse`, and
 * the `responses.stream` helper, whose ResponseStream folds the semantic events into a final
 * object) on the scripted LFM2 fixtures through the real LFM2 template: greedy output is fixed
 * by the weights (`scripted-lfm2.json` says what each writes), so each test knows the exact
 * items. Every case is run whole and streamed, and the stream's final object must equal the
 * whole one; the stream's deltas must add up to its items; its sequence numbers must count up.
 */
import { readFileSync } from "node:fs";
import path from "node:path";
import test from "ava";
import type { ExecutionContext } from "ava";
import type OpenAI from "openai";
import type { APIError } from "openai";
import { Ajv } from "ajv";
import { Engine } from "../ts/engine/index.ts";
import { loadSharp } from "../ts/service/images/index.ts";
import { ModelRegistry } from "../ts/service/registry.ts";
import { fixture, fixturesDir, needs, type Asset } from "./helpers/assets.ts";
import { testImage } from "./helpers/images.ts";
import { openaiClient, postJson, startServer, type RunningServer } from "./helpers/server.ts";

const NAMES = ["plain-answer", "pythonic-call", "json-call", "text-two-calls"] as const;
type Script = (typeof NAMES)[number] | "thinking" | "doomed" | "vision";
const file = (s: string) => `scripted-lfm2-${s}.gguf`;
const need = needs(fixture(file("plain-answer")), ...NAMES.slice(1).map((s) => fixture(file(s))), fixture("scripted-lfm2.json"), fixture("tiny-lfm2-q8_0.gguf"));
// The reasoning fixture comes with the reasoning split; without it this test is skipped (CI: fails).
const thinking = needs(fixture(file("thinking")), fixture("scripted-lfm2.json"));
const sharp: Asset = await loadSharp().then(
  () => ({ path: "sharp" }),
  () => ({ missing: "the sharp package is not installed (npm install sharp)" }),
);
const vision = needs(fixture("tiny-lfm2-vl-q8_0.gguf"), fixture("mmproj-tiny-lfm2-vl-q8_0.gguf"), sharp);

let server: RunningServer;
let client: OpenAI;
const engines = new Map<Script, Engine>();
const registry = new ModelRegistry();

test.before(async () => {
  if (!need.path) return;
  const load = async (id: Script, modelPath: string, mmproj?: string) => {
    const engine = await Engine.load({ modelPath, contextSize: 1024, maxSequences: 2, ...(mmproj ? { mmproj } : {}) });
    engines.set(id, engine);
    registry.add(engine, { path: modelPath, id });
  };
  for (const s of NAMES) await load(s, path.join(fixturesDir, file(s)));
  // Random weights that never stop by themselves: the stream the error test breaks.
  await load("doomed", path.join(fixturesDir, "tiny-lfm2-q8_0.gguf"));
  if (thinking.path) await load("thinking", thinking.path);
  if (vision.path) await load("vision", vision.path, path.join(fixturesDir, "mmproj-tiny-lfm2-vl-q8_0.gguf"));
  server = await startServer({ registry });
  client = openaiClient(server.url);
});
test.after.always(async () => {
  await server?.close();
  await Promise.all([...engines.values()].map((e) => e.unload().catch(() => undefined)));
});

const scripts = () => JSON.parse(readFileSync(path.join(fixturesDir, "scripted-lfm2.json"), "utf8")) as Record<string, { text: string }>;

const weather = {
  type: "function" as const,
  name: "get_weather",
  description: "Current weather in a city",
  parameters: { type: "object", properties: { city: { type: "string" }, days: { type: "integer", minimum: 1 } }, required: ["city"] },
  strict: false,
};
const question = "What is the weather in Paris?";

type Params = Omit<OpenAI.Responses.ResponseCreateParamsNonStreaming, "model" | "stream"> & { model: Script };
type Item = OpenAI.Responses.ResponseOutputItem;
type Event = OpenAI.Responses.ResponseStreamEvent;

/** The parts of a response that are the same every run (no ids, no clocks). */
function stable(r: OpenAI.Responses.Response) {
  // The stream helper adds `parsed` fields; a repeated prompt may find its prefix cached.
  const { id: _id, created_at: _c, completed_at: _d, output_parsed: _p, output, usage, ...rest } = r as OpenAI.Responses.Response & { completed_at?: number; output_parsed?: unknown };
  const items = output.map(({ id: _i, ...item }) => {
    const out: Record<string, unknown> = "call_id" in item ? { ...item, call_id: "call", parsed_arguments: undefined } : { ...item };
    if (item.type === "message") out.content = item.content.map((c) => ({ ...c, parsed: undefined }));
    return out;
  });
  return { ...rest, output: items, usage: usage && { ...usage, input_tokens_details: undefined } };
}

/**
 * The request whole and through the SDK's stream helper; checks that the stream's final object
 * equals the whole one, that its deltas add up to each item, and that its events are numbered
 * and framed as the API has them. Returns the whole response.
 */
async function both(t: ExecutionContext, params: Params) {
  const whole = await client.responses.create(params);
  t.regex(whole.id, /^resp_[0-9a-f]{24}$/);
  t.is(whole.object, "response");
  const stream = client.responses.stream(params);
  const events: Event[] = [];
  for await (const ev of stream) events.push(ev);
  const final = await stream.finalResponse();
  t.deepEqual(stable(final), stable(whole));
  t.is(final.output_text, whole.output_text);
  checkEvents(t, events, final);
  return whole;
}

function checkEvents(t: ExecutionContext, events: Event[], final: OpenAI.Responses.Response) {
  t.deepEqual(
    events.map((e) => e.sequence_number),
    events.map((_, i) => i),
  );
  t.deepEqual(
    events.slice(0, 2).map((e) => e.type),
    ["response.created", "response.in_progress"],
  );
  t.is(events.at(-1)!.type, final.status === "incomplete" ? "response.incomplete" : "response.completed");
  const added = events.filter((e) => e.type === "response.output_item.added").map((e) => e.item.id);
  t.deepEqual(
    added,
    final.output.map((o) => o.id),
  );
  // What the deltas add up to, item by item, is what the item holds at the end.
  const sums = new Map<string, string>();
  for (const e of events) {
    if (e.type === "response.output_text.delta" || e.type === "response.reasoning_text.delta" || e.type === "response.function_call_arguments.delta") {
      sums.set(e.item_id, (sums.get(e.item_id) ?? "") + e.delta);
    }
  }
  for (const item of final.output) t.is(sums.get(item.id!) ?? "", itemText(item), `the deltas of ${item.type} ${item.id}`);
}

function itemText(item: Item): string {
  if (item.type === "message") return item.content.map((c) => (c.type === "output_text" ? c.text : "")).join("");
  if (item.type === "reasoning") return (item.content ?? []).map((c) => c.text).join("");
  if (item.type === "function_call") return item.arguments;
  return "";
}

const calls = (r: OpenAI.Responses.Response) =>
  r.output.filter((o): o is OpenAI.Responses.ResponseFunctionToolCall => o.type === "function_call").map((c) => [c.name, JSON.parse(c.arguments) as unknown, c.status]);

need.test("a text answer: one message with one output_text part, usage as chat counts it", async (t) => {
  const r = await both(t, { model: "plain-answer", input: question, temperature: 0 });
  t.is(r.status, "completed");
  t.is(r.incomplete_details, null);
  t.is(r.output_text, scripts()[file("plain-answer")].text);
  t.is(r.output.length, 1);
  const msg = r.output[0] as OpenAI.Responses.ResponseOutputMessage;
  t.like(msg, { type: "message", role: "assistant", status: "completed" });
  t.regex(msg.id, /^msg_/);
  t.deepEqual((msg.content[0] as OpenAI.Responses.ResponseOutputText).annotations, []);
  // The same conversation through chat completions: the same prompt, the same tokens out.
  const chat = await client.chat.completions.create({ model: "plain-answer", messages: [{ role: "user", content: question }], temperature: 0 });
  t.deepEqual(r.usage, {
    input_tokens: chat.usage!.prompt_tokens,
    input_tokens_details: { cached_tokens: r.usage!.input_tokens_details.cached_tokens },
    output_tokens: chat.usage!.completion_tokens,
    output_tokens_details: { reasoning_tokens: 0 },
    total_tokens: chat.usage!.prompt_tokens + chat.usage!.completion_tokens,
  });
});

need.test("instructions and message items render as chat's system and user messages", async (t) => {
  const input = [
    { role: "developer" as const, content: "Be brief." },
    { type: "message" as const, role: "user" as const, content: [{ type: "input_text" as const, text: question }] },
  ];
  const r = await both(t, { model: "plain-answer", instructions: "You report the weather.", input, temperature: 0 });
  const chat = await client.chat.completions.create({
    model: "plain-answer",
    messages: [
      { role: "system", content: "You report the weather." },
      { role: "developer", content: "Be brief." },
      { role: "user", content: [{ type: "text", text: question }] },
    ],
    temperature: 0,
  });
  t.is(r.usage!.input_tokens, chat.usage!.prompt_tokens);
  t.is(r.instructions, "You report the weather.");
});

need.test("a call comes back as a function_call item (Pythonic and JSON forms), not text", async (t) => {
  for (const model of ["pythonic-call", "json-call"] as const) {
    const r = await both(t, { model, input: question, tools: [weather], temperature: 0 });
    t.is(r.status, "completed");
    t.is(r.output_text, "");
    t.deepEqual(calls(r), [["get_weather", { city: "Paris", days: 3 }, "completed"]], model);
    const call = r.output[0] as OpenAI.Responses.ResponseFunctionToolCall;
    t.regex(call.call_id, /^call_[0-9a-f]{24}$/);
    t.regex(call.id!, /^fc_/);
  }
});

need.test("text then two calls: a message item, then one function_call item per call", async (t) => {
  const r = await both(t, { model: "text-two-calls", input: question, tools: [weather], temperature: 0 });
  t.deepEqual(
    r.output.map((o) => o.type),
    ["message", "function_call", "function_call"],
  );
  t.is(r.output_text, "Let me check both cities.");
  t.deepEqual(calls(r), [
    ["get_weather", { city: "Paris" }, "completed"],
    ["get_weather", { city: "Tokyo" }, "completed"],
  ]);
});

need.test("tool_choice none leaves the call as text; a named function is accepted", async (t) => {
  const none = await client.responses.create({ model: "pythonic-call", input: question, tools: [weather], tool_choice: "none", temperature: 0 });
  t.is(none.output_text, '[get_weather(city="Paris", days=3)]');
  const named = await client.responses.create({ model: "pythonic-call", input: question, tools: [weather], tool_choice: { type: "function", name: "get_weather" }, temperature: 0 });
  t.deepEqual(calls(named), [["get_weather", { city: "Paris", days: 3 }, "completed"]]);
});

need.test("the follow-up turn: the call and its function_call_output render as chat's tool messages", async (t) => {
  const first = await client.responses.create({ model: "pythonic-call", input: question, tools: [weather], temperature: 0 });
  const call = first.output[0] as OpenAI.Responses.ResponseFunctionToolCall;
  const result = '{"temp": 21, "sky": "sunny"}';
  // The call item exactly as the first response gave it (id, status and all).
  const input: OpenAI.Responses.ResponseInput = [{ role: "user", content: question }, call, { type: "function_call_output", call_id: call.call_id, output: result }];
  const r = await both(t, { model: "plain-answer", input, tools: [weather], temperature: 0 });
  t.is(r.output_text, "It is sunny in Paris, 21°C.");
  const chat = await client.chat.completions.create({
    model: "plain-answer",
    messages: [
      { role: "user", content: question },
      { role: "assistant", content: null, tool_calls: [{ id: call.call_id, type: "function", function: { name: call.name, arguments: call.arguments } }] },
      { role: "tool", tool_call_id: call.call_id, content: result },
    ],
    tools: [{ type: "function", function: { name: weather.name, description: weather.description, parameters: weather.parameters } }],
    temperature: 0,
  });
  t.is(r.usage!.input_tokens, chat.usage!.prompt_tokens);
});

need.test("text.format json_schema: the output parses and validates (responses.parse gives it parsed)", async (t) => {
  const schema = {
    type: "object",
    properties: { city: { type: "string", enum: ["Paris", "Tokyo"] }, sunny: { type: "boolean" } },
    required: ["city", "sunny"],
    additionalProperties: false,
  };
  const text = { format: { type: "json_schema" as const, name: "report", schema, strict: true } };
  const r = await both(t, { model: "plain-answer", input: question, text, max_output_tokens: 64, temperature: 0 });
  t.is(r.status, "completed");
  const valid = new Ajv().compile(schema);
  t.true(valid(JSON.parse(r.output_text)), r.output_text);
  const parsed = await client.responses.parse({ model: "plain-answer", input: question, text, max_output_tokens: 64, temperature: 0 });
  t.deepEqual(parsed.output_parsed, JSON.parse(r.output_text));
});

need.test("max_output_tokens cut: status incomplete, reason max_output_tokens, the message incomplete", async (t) => {
  const r = await both(t, { model: "plain-answer", input: question, max_output_tokens: 3, temperature: 0 });
  t.is(r.status, "incomplete");
  t.deepEqual(r.incomplete_details, { reason: "max_output_tokens" });
  t.is(r.output_text, "It is sunny");
  t.is((r.output[0] as OpenAI.Responses.ResponseOutputMessage).status, "incomplete");
  t.is(r.usage!.output_tokens, 3);
});

thinking.test("a thinking model: a reasoning item with the thought, then the answer as a message", async (t) => {
  const m = /^<think>([\s\S]*)<\/think>([\s\S]*)$/.exec(scripts()[file("thinking")].text);
  t.truthy(m, "the thinking fixture writes a think block");
  const r = await both(t, { model: "thinking", input: question, temperature: 0 });
  t.deepEqual(
    r.output.map((o) => o.type),
    ["reasoning", "message"],
  );
  const reasoning = r.output[0] as OpenAI.Responses.ResponseReasoningItem;
  t.regex(reasoning.id, /^rs_/);
  t.is(itemText(reasoning).trim(), m![1].trim());
  t.is(r.output_text, m![2].trim());
  t.is(r.usage!.output_tokens_details.reasoning_tokens, 7, "<think>, five thought tokens, </think>");
});

vision.test("an input_image part reaches the image path: the same prompt and answer as chat's image_url", async (t) => {
  const { dataUri } = testImage(320, 240, 9);
  const content = [
    { type: "input_image" as const, image_url: dataUri, detail: "auto" as const },
    { type: "input_text" as const, text: "What is in the image?" },
  ];
  const r = await both(t, { model: "vision", input: [{ role: "user", content }], max_output_tokens: 8, temperature: 0 });
  const chat = await client.chat.completions.create({
    model: "vision",
    messages: [
      {
        role: "user",
        content: [
          { type: "image_url", image_url: { url: dataUri } },
          { type: "text", text: "What is in the image?" },
        ],
      },
    ],
    max_tokens: 8,
    temperature: 0,
  });
  t.true(r.usage!.input_tokens > 80, `input_tokens ${r.usage!.input_tokens}`);
  t.is(r.usage!.input_tokens, chat.usage!.prompt_tokens);
  t.is(r.output_text, chat.choices[0].message.content ?? "");
});

need.serial("bad input is a 400 in OpenAI's shape naming the field, and the server keeps serving", async (t) => {
  const url = `${server.url}/v1/responses`;
  const base = { model: "pythonic-call", input: question, tools: [weather] };
  const cases: [string, Record<string, unknown>, string][] = [
    ["no input", { input: undefined }, "input"],
    ["an empty input list", { input: [] }, "input"],
    ["an unknown item type", { input: [{ type: "item_reference", id: "msg_1" }] }, "input[0].type"],
    ["an unknown content part", { input: [{ role: "user", content: [{ type: "input_audio", input_audio: {} }] }] }, "input[0].content[0].type"],
    ["a file part", { input: [{ role: "user", content: [{ type: "input_file", file_id: "file-1" }] }] }, "input[0].content[0]"],
    ["an image by file id", { input: [{ role: "user", content: [{ type: "input_image", file_id: "file-1", detail: "auto" }] }] }, "input[0].content[0].image_url"],
    [
      "an output for no call",
      {
        input: [
          { role: "user", content: question },
          { type: "function_call_output", call_id: "call_x", output: "21" },
        ],
      },
      "input[1].call_id",
    ],
    ["previous_response_id", { previous_response_id: "resp_123" }, "previous_response_id"],
    ["tool_choice naming an unknown tool", { tool_choice: { type: "function", name: "get_time" } }, "tool_choice"],
    ["a tool type Wick does not run", { tools: [{ type: "web_search" }] }, "tools[0].type"],
    ["parameters that are not a schema", { tools: [{ ...weather, parameters: { type: "object", properties: { a: { type: "nope" } } } }] }, "tools[0].parameters"],
    ["two tools with one name", { tools: [weather, weather] }, "tools[1].name"],
    ["a json_schema format that is not a schema", { text: { format: { type: "json_schema", name: "x", schema: { type: 12 } } } }, "text.format.schema"],
    ["an unknown reasoning effort", { reasoning: { effort: "max" } }, "reasoning.effort"],
  ];
  for (const [what, patch, param] of cases) {
    const r = await postJson(url, { ...base, ...patch });
    t.is(r.status, 400, `${what}: ${r.text}`);
    t.deepEqual(Object.keys(r.json?.error ?? {}).sort(), ["code", "message", "param", "type"], what);
    t.is(r.json.error.type, "invalid_request_error", what);
    t.is(r.json.error.param, param, `${what}: ${r.text}`);
  }
  const err = await t.throwsAsync<APIError>(client.responses.create({ model: "plain-answer", input: question, previous_response_id: "resp_1" }));
  t.is(err?.status, 400);
  t.regex(err?.message ?? "", /stateless/);
  const ok = await client.responses.create({ model: "plain-answer", input: question, temperature: 0 });
  t.is(ok.output_text, "It is sunny in Paris, 21°C.");
});

/** Named SSE events off the wire: `event:` and the `data:` JSON it names. */
async function namedEvents(res: Response): Promise<{ event: string; data: any }[]> {
  const frames = (await res.text()).split("\n\n").filter((f) => f.trim());
  return frames.map((f) => {
    const event = /^event: (.*)$/m.exec(f)?.[1] ?? "";
    const data = /^data: (.*)$/m.exec(f)?.[1] ?? "null";
    return { event, data: JSON.parse(data) };
  });
}

need.serial("on the wire: event names match the data's type, and no [DONE]", async (t) => {
  const res = await fetch(`${server.url}/v1/responses`, { method: "POST", body: JSON.stringify({ model: "plain-answer", input: question, stream: true, temperature: 0 }) });
  t.is(res.headers.get("content-type"), "text/event-stream; charset=utf-8");
  const events = await namedEvents(res);
  t.true(events.length > 8);
  for (const e of events) t.is(e.event, e.data.type);
});

// Last: it unloads the doomed engine.
need.serial("an engine failure mid-stream ends the stream with the API's error event", async (t) => {
  const body = { model: "doomed", input: question, stream: true, max_output_tokens: 800, ignore_eos: true, temperature: 0 };
  const res = await fetch(`${server.url}/v1/responses`, { method: "POST", body: JSON.stringify(body) });
  const decoder = new TextDecoder();
  let text = "";
  let unloading: Promise<void> | undefined;
  for await (const bytes of res.body!) {
    text += decoder.decode(bytes, { stream: true });
    if (!unloading && text.split("response.output_text.delta").length > 3) unloading = engines.get("doomed")!.unload();
  }
  await unloading;
  const events = await namedEvents(new Response(text));
  const last = events.at(-1)!;
  t.is(last.event, "error", text.slice(-300));
  t.deepEqual(Object.keys(last.data).sort(), ["code", "message", "param", "sequence_number", "type"]);
  t.is(last.data.code, "model_unloaded");
  t.deepEqual(
    events.map((e) => e.data.sequence_number),
    events.map((_, i) => i),
  );
  const ok = await client.responses.create({ model: "plain-answer", input: question, temperature: 0 });
  t.is(ok.status, "completed");
});
