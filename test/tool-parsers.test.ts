/**
 * Tool-call parsers: a golden table of model outputs and what each must yield, then the same
 * table streamed one character at a time and in random chunks, which must give exactly what
 * `parse` gives on the whole text (one delta): no split may change the result.
 */
import test from "ava";
import { parserFor, ToolStream, type ParseResult, type ToolParser } from "../ts/service/tools/index.ts";
import { rng } from "../benches/serving.ts"; // seeded (mulberry32): random splits are reproducible

const S = "<|tool_call_start|>";
const E = "<|tool_call_end|>";
const H = "<tool_call>";
const HE = "</tool_call>";

interface Golden {
  title: string;
  parser: "lfm2" | "hermes";
  text: string;
  expected: ParseResult;
}

/** Expected result of a malformed case: the whole text is content, no calls. */
const asContent = (text: string): ParseResult => ({ content: text, calls: [] });

const GOLDEN: Golden[] = [
  {
    title: "lfm2 single call",
    parser: "lfm2",
    text: `${S}[get_weather(city="Paris", days=3)]${E}`,
    expected: { content: "", calls: [{ name: "get_weather", arguments: { city: "Paris", days: 3 } }] },
  },
  {
    title: "lfm2 several calls in one block, trailing comma, no-arg call",
    parser: "lfm2",
    text: `${S}[get_weather(city='Paris', days=3,), other(), a.b.c(x=1)]${E}`,
    expected: {
      content: "",
      calls: [
        { name: "get_weather", arguments: { city: "Paris", days: 3 } },
        { name: "other", arguments: {} },
        { name: "a.b.c", arguments: { x: 1 } },
      ],
    },
  },
  {
    title: "lfm2 bare call without list brackets",
    parser: "lfm2",
    text: `${S}ping(host="example.com")${E}`,
    expected: { content: "", calls: [{ name: "ping", arguments: { host: "example.com" } }] },
  },
  {
    title: "lfm2 text before and after, content kept exactly",
    parser: "lfm2",
    text: `Let me check.\n ${S}[get_time(tz="UTC")]${E}  Done.\n`,
    expected: { content: "Let me check.\n   Done.\n", calls: [{ name: "get_time", arguments: { tz: "UTC" } }] },
  },
  {
    title: "lfm2 two blocks",
    parser: "lfm2",
    text: `A${S}[f(x=1)]${E}B${S}[g(y=2)]${E}C`,
    expected: {
      content: "ABC",
      calls: [
        { name: "f", arguments: { x: 1 } },
        { name: "g", arguments: { y: 2 } },
      ],
    },
  },
  {
    title: "lfm2 JSON form",
    parser: "lfm2",
    text: `${S}[{"name": "search", "arguments": {"q": "llm", "n": 5}}, {"name": "noop"}]${E}`,
    expected: {
      content: "",
      calls: [
        { name: "search", arguments: { q: "llm", n: 5 } },
        { name: "noop", arguments: {} },
      ],
    },
  },
  {
    title: "lfm2 JSON form, single object",
    parser: "lfm2",
    text: `ok ${S}{"name": "f", "arguments": {"a": [1, {"b": null}]}}${E}`,
    expected: { content: "ok ", calls: [{ name: "f", arguments: { a: [1, { b: null }] } }] },
  },
  {
    title: "lfm2 all literal kinds",
    parser: "lfm2",
    text: `${S}[f(i=42, n=-7, p=+3, fl=3.25, nf=-0.5, e=1e3, d=.5, t=True, fa=False, no=None, ` + `jt=true, jf=false, jn=null, s1='single', s2="double", empty="")]${E}`,
    expected: {
      content: "",
      calls: [
        {
          name: "f",
          arguments: {
            i: 42,
            n: -7,
            p: 3,
            fl: 3.25,
            nf: -0.5,
            e: 1000,
            d: 0.5,
            t: true,
            fa: false,
            no: null,
            jt: true,
            jf: false,
            jn: null,
            s1: "single",
            s2: "double",
            empty: "",
          },
        },
      ],
    },
  },
  {
    title: "lfm2 nested lists, dicts and tuples",
    parser: "lfm2",
    text: `${S}[plan(steps=[1, [2, 3], {"k": [True, None]}], opts={"a": {"b": 'c'}, 1: 2}, pair=(1, "x"), none=[], nd={})]${E}`,
    expected: {
      content: "",
      calls: [
        {
          name: "plan",
          arguments: {
            steps: [1, [2, 3], { k: [true, null] }],
            opts: { a: { b: "c" }, "1": 2 },
            pair: [1, "x"],
            none: [],
            nd: {},
          },
        },
      ],
    },
  },
  {
    title: "lfm2 unicode strings and text",
    parser: "lfm2",
    text: `Voilà 🌦️ ${S}[météo(ville="Zürich", note='日本語 ✓', e="\\u00e9\\U0001F600\\x41")]${E} fin`,
    expected: {
      content: "Voilà 🌦️  fin",
      calls: [{ name: "météo", arguments: { ville: "Zürich", note: "日本語 ✓", e: "é😀A" } }],
    },
  },
  {
    title: "lfm2 escaped quotes and escapes",
    parser: "lfm2",
    text: `${S}[say(a="He said \\"hi\\"", b='it\\'s', c="tab\\tnl\\nback\\\\", d="\\d", e="it's", f='"q"')]${E}`,
    expected: {
      content: "",
      calls: [
        {
          name: "say",
          arguments: { a: 'He said "hi"', b: "it's", c: "tab\tnl\nback\\", d: "\\d", e: "it's", f: '"q"' },
        },
      ],
    },
  },
  {
    title: "lfm2 brackets inside strings",
    parser: "lfm2",
    text: `${S}[f(x="a]b)c", y='{[(')]${E}`,
    expected: { content: "", calls: [{ name: "f", arguments: { x: "a]b)c", y: "{[(" } }] },
  },
  {
    title: "lfm2 empty list is a block with no calls",
    parser: "lfm2",
    text: `x${S}[]${E}y`,
    expected: { content: "xy", calls: [] },
  },
  {
    title: "lfm2 malformed: unbalanced brackets",
    parser: "lfm2",
    text: `before ${S}[f(x=[1, 2)]${E} after`,
    expected: asContent(`before ${S}[f(x=[1, 2)]${E} after`),
  },
  {
    title: "lfm2 malformed: positional argument",
    parser: "lfm2",
    text: `${S}[f("Paris", days=3)]${E}`,
    expected: asContent(`${S}[f("Paris", days=3)]${E}`),
  },
  {
    title: "lfm2 malformed: unknown value syntax (a call as a value, an expression)",
    parser: "lfm2",
    text: `${S}[f(x=g())]${E}${S}[f(x=1+2)]${E}${S}[f(x=os.path)]${E}`,
    expected: asContent(`${S}[f(x=g())]${E}${S}[f(x=1+2)]${E}${S}[f(x=os.path)]${E}`),
  },
  {
    title: "lfm2 malformed: not function-call syntax, repeated keyword, bad JSON",
    parser: "lfm2",
    text: `${S}get_weather city=Paris${E}|${S}[f(a=1, a=2)]${E}|${S}[{"name": "f", "arguments": {]${E}`,
    expected: asContent(`${S}get_weather city=Paris${E}|${S}[f(a=1, a=2)]${E}|${S}[{"name": "f", "arguments": {]${E}`),
  },
  {
    title: "lfm2 one malformed block does not spoil a good one",
    parser: "lfm2",
    text: `${S}[f(1)]${E} then ${S}[g(k='v')]${E}`,
    expected: { content: `${S}[f(1)]${E} then `, calls: [{ name: "g", arguments: { k: "v" } }] },
  },
  {
    title: "lfm2 unterminated block at finish",
    parser: "lfm2",
    text: `Calling ${S}[get_weather(city="Par`,
    expected: asContent(`Calling ${S}[get_weather(city="Par`),
  },
  {
    title: "lfm2 unterminated string runs into the end marker",
    parser: "lfm2",
    text: `${S}[f(x="abc)]${E}`,
    expected: asContent(`${S}[f(x="abc)]${E}`),
  },
  {
    title: "lfm2 no call at all",
    parser: "lfm2",
    text: "The weather in Paris is mild today. [f(x=1)] is just prose.",
    expected: asContent("The weather in Paris is mild today. [f(x=1)] is just prose."),
  },
  {
    title: "lfm2 text ending in a partial marker",
    parser: "lfm2",
    text: "Hold on <|tool",
    expected: asContent("Hold on <|tool"),
  },
  {
    title: "lfm2 near-markers in prose",
    parser: "lfm2",
    text: "<|tool_call_sta <|im_end|> <| <|tool_call_end|> plain",
    expected: asContent("<|tool_call_sta <|im_end|> <| <|tool_call_end|> plain"),
  },
  {
    title: "hermes single call",
    parser: "hermes",
    text: `${H}\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}\n${HE}`,
    expected: { content: "", calls: [{ name: "get_weather", arguments: { city: "Paris", days: 3 } }] },
  },
  {
    // Unlike SGLang's non-greedy regex: a call held to its schema by the grammar may write the
    // marker's text in a string value, and reading that as the end would turn the call into text.
    title: "hermes: an end marker inside a string value does not end the block",
    parser: "hermes",
    text: `${H}\n{"name": "note", "arguments": {"text": "a}}${HE}b \\"q\\" ${HE}"}}\n${HE} after`,
    expected: { content: " after", calls: [{ name: "note", arguments: { text: `a}}${HE}b "q" ${HE}` } }] },
  },
  {
    title: "lfm2: an end marker inside a string argument does not end the block",
    parser: "lfm2",
    text: `${S}[note(text="x${E}y")]${E}`,
    expected: { content: "", calls: [{ name: "note", arguments: { text: `x${E}y` } }] },
  },
  {
    title: "hermes several blocks with text around",
    parser: "hermes",
    text: `I'll look both up.\n${H}{"name": "a", "arguments": {}}${HE}\n${H}{"name": "b", "arguments": {"x": [1, {"y": "ü"}]}}${HE}\nDone.`,
    expected: {
      content: "I'll look both up.\n\n\nDone.",
      calls: [
        { name: "a", arguments: {} },
        { name: "b", arguments: { x: [1, { y: "ü" }] } },
      ],
    },
  },
  {
    title: "hermes unicode and escaped quotes",
    parser: "hermes",
    text: `${H}{"name": "say", "arguments": {"t": "他说 \\"你好\\" 🚀", "n": -1.5, "b": false}}${HE}`,
    expected: { content: "", calls: [{ name: "say", arguments: { t: '他说 "你好" 🚀', n: -1.5, b: false } }] },
  },
  {
    title: "hermes malformed: bad JSON, missing name, two objects, arguments not an object",
    parser: "hermes",
    text: `${H}{"name": "f", "arguments": {"a": 1}${HE}` + `${H}{"arguments": {}}${HE}` + `${H}{"name": "f"} {"name": "g"}${HE}` + `${H}{"name": "f", "arguments": "{}"}${HE}`,
    expected: asContent(`${H}{"name": "f", "arguments": {"a": 1}${HE}` + `${H}{"arguments": {}}${HE}` + `${H}{"name": "f"} {"name": "g"}${HE}` + `${H}{"name": "f", "arguments": "{}"}${HE}`),
  },
  {
    title: "hermes unterminated block",
    parser: "hermes",
    text: `ok ${H}{"name": "f", "arguments": {}}`,
    expected: asContent(`ok ${H}{"name": "f", "arguments": {}}`),
  },
  {
    title: "hermes <tool in prose and at the end",
    parser: "hermes",
    text: "Use a <tool> or a <toolbox>, not <tool_cal; maybe <tool",
    expected: asContent("Use a <tool> or a <toolbox>, not <tool_cal; maybe <tool"),
  },
  {
    title: "hermes no call at all, LFM2 markers are just text",
    parser: "hermes",
    text: `Nothing to call. ${S}[f()]${E}`,
    expected: asContent(`Nothing to call. ${S}[f()]${E}`),
  },
];

function parser(name: string): ToolParser {
  const p = parserFor(name);
  if (!p) throw new Error(`no parser ${name}`);
  return p;
}

/** Feed `chunks` through a ToolStream and concatenate what comes out. */
function stream(p: ToolParser, chunks: string[]): ParseResult {
  const s = new ToolStream(p);
  let content = "";
  const calls: ParseResult["calls"] = [];
  for (const c of [...chunks.map((d) => s.push(d)), s.finish()]) {
    content += c.content;
    calls.push(...c.calls);
  }
  return { content, calls };
}

function randomChunks(text: string, next: () => number, maxLen: number): string[] {
  const out: string[] = [];
  for (let i = 0; i < text.length;) {
    const n = 1 + Math.floor(next() * maxLen);
    out.push(text.slice(i, i + n));
    i += n;
  }
  return out;
}

test("golden table covers both parsers and at least 20 cases", (t) => {
  t.true(GOLDEN.length >= 20);
  t.true(GOLDEN.some((g) => g.parser === "lfm2"));
  t.true(GOLDEN.some((g) => g.parser === "hermes"));
});

for (const g of GOLDEN) {
  test(`parse: ${g.title}`, (t) => {
    t.deepEqual(parser(g.parser).parse(g.text), g.expected);
  });

  test(`stream equals parse: ${g.title}`, (t) => {
    const p = parser(g.parser);
    const whole = p.parse(g.text);
    // One UTF-16 unit at a time: this also splits surrogate pairs, which must still come out whole.
    t.deepEqual(stream(p, g.text.split("")), whole, "one char at a time");
    t.deepEqual(stream(p, [g.text]), whole, "one delta");
    t.deepEqual(stream(p, ["", g.text, ""]), whole, "empty deltas");
    const next = rng(0x5eed + g.text.length);
    for (let round = 0; round < 50; round++) {
      const chunks = randomChunks(g.text, next, 1 + (round % 12));
      t.deepEqual(stream(p, chunks), whole, `random chunks ${JSON.stringify(chunks)}`);
    }
  });
}

test("a marker split across deltas is held back until settled", (t) => {
  const s = new ToolStream(parser("lfm2"));
  t.deepEqual(s.push("Hi <|tool"), { content: "Hi ", calls: [] });
  t.deepEqual(s.push("_call_st"), { content: "", calls: [] });
  t.deepEqual(s.push("art|>[f(a=1)]<|tool_call_"), { content: "", calls: [] });
  t.deepEqual(s.push("end|> bye"), { content: " bye", calls: [{ name: "f", arguments: { a: 1 } }] });
  t.deepEqual(s.finish(), { content: "", calls: [] });

  const h = new ToolStream(parser("hermes"));
  t.deepEqual(h.push("a <to"), { content: "a ", calls: [] });
  // `<tool>` cannot become `<tool_call>`: released as soon as that is known.
  t.deepEqual(h.push("ol> b"), { content: "<tool> b", calls: [] });
  t.deepEqual(h.push(" <tool_"), { content: " ", calls: [] });
  t.deepEqual(h.finish(), { content: "<tool_", calls: [] });
});

test("no delta ends in half a surrogate pair", (t) => {
  const s = new ToolStream(parser("hermes"));
  const text = "a😀b🚀";
  const pieces = text.split("").map((c) => s.push(c).content);
  pieces.push(s.finish().content);
  t.is(pieces.join(""), text);
  for (const piece of pieces) t.false(/[\ud800-\udbff]$/.test(piece), JSON.stringify(piece));
});

test("couldBeToolCall", (t) => {
  const l = parser("lfm2");
  for (const tail of ["<", "<|", "x <|tool", "<|tool_call_start", "<|tool_call_start|>"]) t.true(l.couldBeToolCall(tail), tail);
  for (const tail of ["", "x", "<|im_end|>", "<|tool_call_end|>", "< |"]) t.false(l.couldBeToolCall(tail), tail);
  const h = parser("hermes");
  for (const tail of ["<", "<tool", "prose <tool_call", "<tool_call>"]) t.true(h.couldBeToolCall(tail), tail);
  for (const tail of ["<tool>", "<toolbox", "tool_call"]) t.false(h.couldBeToolCall(tail), tail);
});

test("parserFor knows lfm2 and hermes only", (t) => {
  t.is(parserFor("lfm2")?.name, "lfm2");
  t.is(parserFor("hermes")?.name, "hermes");
  t.is(parserFor("qwen"), undefined);
  t.is(parserFor("toString"), undefined);
  t.is(parserFor("__proto__"), undefined);
});

test("garbage never throws", (t) => {
  const next = rng(42);
  const alphabet = ["<|tool_call_start|>", "<|tool_call_end|>", "<tool_call>", "</tool_call>", "[", "]", "(", ")", "{", "}", '"', "'", "\\", ",", "=", ":", "f", "x", "1", "-", ".", " ", "True", "é"];
  for (const name of ["lfm2", "hermes"]) {
    const p = parser(name);
    for (let i = 0; i < 300; i++) {
      let text = "";
      for (let j = 0; j < 40; j++) text += alphabet[Math.floor(next() * alphabet.length)];
      const whole = p.parse(text); // a throw fails the test
      t.deepEqual(stream(p, randomChunks(text, next, 7)), whole, text);
    }
  }
});
