/**
 * The pieces between the parsers and the routes, without a model: each format writes past
 * calls back so that its own parser reads them again; a choice's ToolOutput keeps calls to
 * tools that were not offered as text and honours parallel_tool_calls: false; native messages
 * pair tool results with calls by name; the tool checks name the field at fault.
 */
import test from "ava";
import type { ChatMessage } from "../ts/schemas/chat.ts";
import { RequestError } from "../ts/service/errors.ts";
import { toChatMessages } from "../ts/service/native.ts";
import { detectParser, hermesParser, lfm2Parser, type ToolCall } from "../ts/service/tools/index.ts";
import { ToolOutput } from "../ts/service/tools/output.ts";
import { checkToolMessages, type ToolPlan } from "../ts/service/tools/request.ts";

const calls: ToolCall[] = [
  { name: "get_weather", arguments: { city: 'Zürich "Nord"', days: 3, hourly: true, at: null, spots: [{ lat: 47.4, tags: ["a"] }] } },
  { name: "noop", arguments: {} },
];

test("each format's written calls parse back to the same calls", (t) => {
  for (const parser of [lfm2Parser, hermesParser]) {
    const text = `Checking.${parser.format(calls)}`;
    t.deepEqual(parser.parse(text), { content: "Checking.", calls }, parser.name);
  }
  t.is(lfm2Parser.format([calls[1]]), "<|tool_call_start|>[noop()]<|tool_call_end|>");
});

test("the parser family comes from the template", (t) => {
  t.is(detectParser("... List of tools: <|tool_list_start|>[...]<|tool_list_end|>").name, "lfm2");
  t.is(detectParser("{{- 'List of tools: [' -}}").name, "lfm2");
  t.is(detectParser("<tool_call>\\n{{ tool_call | tojson }}\\n</tool_call>").name, "hermes");
  t.is(detectParser("{{ messages }}").name, "hermes");
});

const plan = (over: Partial<ToolPlan> = {}): ToolPlan => ({ parser: lfm2Parser, allowed: new Set(["get_weather"]), single: false, markerTokens: [], ...over });

test("a block calling a tool that was not offered stays text; the others become numbered calls", (t) => {
  const out = new ToolOutput(plan());
  const bad = '<|tool_call_start|>[rm_rf(path="/")]<|tool_call_end|>';
  const a = out.push(`Hi ${bad} then `);
  const b = out.push('<|tool_call_start|>[get_weather(city="A"), get_weather(city="B")]<|tool_call_end|>');
  const c = out.finish();
  t.is(a.content + b.content + c.content, `Hi ${bad} then `);
  t.deepEqual(
    b.calls.map((x) => [x.index, x.name, x.arguments]),
    [
      [0, "get_weather", '{"city":"A"}'],
      [1, "get_weather", '{"city":"B"}'],
    ],
  );
  t.not(b.calls[0].id, b.calls[1].id);
  t.true(out.called);
});

test("parallel_tool_calls: false keeps the first call only", (t) => {
  const out = new ToolOutput(plan({ single: true }));
  const d = out.push('<|tool_call_start|>[get_weather(city="A"), get_weather(city="B")]<|tool_call_end|><|tool_call_start|>[get_weather(city="C")]<|tool_call_end|>');
  t.deepEqual(
    d.calls.map((c) => c.args),
    [{ city: "A" }],
  );
});

test("without a parser the text passes through untouched", (t) => {
  const out = new ToolOutput(plan({ parser: null }));
  t.deepEqual(out.push("<|tool_call_start|>[x()]"), { content: "<|tool_call_start|>[x()]", calls: [] });
  t.false(out.called);
});

const fails = (t: import("ava").ExecutionContext, fn: () => void, param: string) => {
  const err = t.throws(fn, { instanceOf: RequestError });
  t.is(err?.param, param);
};

test("a tool message must answer an earlier call by id", (t) => {
  const call = { id: "call_1", type: "function" as const, function: { name: "f", arguments: "{}" } };
  const ok: ChatMessage[] = [
    { role: "user", content: "x" },
    { role: "assistant", content: null, tool_calls: [call] },
    { role: "tool", content: "1", tool_call_id: "call_1" },
  ];
  t.notThrows(() => checkToolMessages(ok));
  fails(t, () => checkToolMessages([ok[0], { role: "tool", content: "1", tool_call_id: "call_1" }]), "messages[1].tool_call_id");
  fails(t, () => checkToolMessages([...ok.slice(0, 2), { role: "tool", content: "1" }]), "messages[2].tool_call_id");
});

test("native tool results pair with the earlier call of the same name, then in order", (t) => {
  const msgs = toChatMessages([
    { role: "user", content: "x" },
    { role: "assistant", content: "", tool_calls: [{ function: { name: "a", arguments: {} } }, { function: { name: "b", arguments: { k: 1 } } }] },
    { role: "tool", content: "B", tool_name: "b" },
    { role: "tool", content: "A" },
  ]);
  const assistant = msgs[1] as Extract<ChatMessage, { role: "assistant" }>;
  const [idA, idB] = assistant.tool_calls!.map((c) => c.id!);
  t.is(assistant.tool_calls![1].function.arguments, '{"k":1}');
  t.is((msgs[2] as { tool_call_id: string }).tool_call_id, idB);
  t.is((msgs[3] as { tool_call_id: string }).tool_call_id, idA);
  t.notThrows(() => checkToolMessages(msgs));
  // Ollama's images become image parts before the message's text; only user/system messages carry them.
  t.deepEqual(toChatMessages([{ role: "user", content: "x", images: ["aGk="] }]), [
    {
      role: "user",
      content: [
        { type: "image_url", image_url: { url: "data:;base64,aGk=" } },
        { type: "text", text: "x" },
      ],
    },
  ]);
  fails(t, () => toChatMessages([{ role: "assistant", content: "x", images: ["aGk="] }]), "messages[0].images");
});
