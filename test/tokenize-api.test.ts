/**
 * POST /tokenize, /detokenize and /apply-template in llama-server's shapes and vLLM's, on a real
 * server on 127.0.0.1 serving the scripted LFM2 fixture (LFM2's real template and vocabulary):
 * tokens equal to the engine's own tokenization, a detokenize round trip, a chat's tokens and
 * template text equal to what /v1/chat/completions renders and counts, and bad input as 400s in
 * OpenAI's error shape.
 */
import { fixture, needs } from "./helpers/assets.ts";
import { postJson, serveModel } from "./helpers/server.ts";

const need = needs(fixture("scripted-lfm2-plain-answer.gguf"));
const served = serveModel(need.path);
const TEXT = "Hello <|im_start|> world, 21°C — ünïcödé 日本";
const messages = [
  { role: "system", content: "You report the weather." },
  { role: "user", content: "What is the weather in Paris?" },
];
const tools = [{ type: "function", function: { name: "get_weather", description: "Weather for a city", parameters: { type: "object", properties: { city: { type: "string" } } } } }];

const post = (route: string, body: unknown) => postJson(`${served.server.url}${route}`, body);

need.test("llama-server /tokenize: the engine's tokens (special text parsed, no BOS unless add_special), with pieces; /detokenize gives the text back", async (t) => {
  const engine = served.engine;
  const expected = engine.tokenize(TEXT, { addSpecial: false, parseSpecial: true });
  const plain = await post("/tokenize", { content: TEXT });
  t.is(plain.status, 200);
  t.deepEqual(plain.json, { tokens: expected });
  t.true(expected.includes(engine.tokenId("<|im_start|>")!), "special-token text is the special token");
  const literal = await post("/tokenize", { content: TEXT, parse_special: false });
  t.deepEqual(literal.json.tokens, engine.tokenize(TEXT, { addSpecial: false, parseSpecial: false }));
  t.notDeepEqual(literal.json.tokens, expected);
  const withBos = await post("/tokenize", { content: TEXT, add_special: true });
  t.deepEqual(withBos.json.tokens, engine.tokenize(TEXT, { addSpecial: true, parseSpecial: true }));
  t.is(withBos.json.tokens[0], engine.info().bosToken);

  const pieces = await post("/tokenize", { content: TEXT, with_pieces: true });
  const entries = pieces.json.tokens as { id: number; piece: string | number[] }[];
  t.deepEqual(
    entries.map((e) => e.id),
    expected,
  );
  // A piece is its text when whole UTF-8, else its bytes (llama-server): together, the text's bytes.
  const bytes = entries.flatMap((e) => (typeof e.piece === "string" ? [...Buffer.from(e.piece)] : e.piece));
  t.is(Buffer.from(bytes).toString(), TEXT);
  t.true(entries.every((e) => typeof e.piece !== "string" || !e.piece.includes("\uFFFD")));
  t.true(
    entries.some((e) => Array.isArray(e.piece)),
    "this vocabulary splits ü and 日 into byte tokens",
  );

  const back = await post("/detokenize", { tokens: expected });
  t.is(back.status, 200);
  t.deepEqual(back.json, { content: TEXT, prompt: TEXT }, "llama-server's `content` and vLLM's `prompt`");
});

need.test("vLLM /tokenize with a prompt: {count, max_model_len, tokens}, the tokenizer's specials by default; token_strs when asked", async (t) => {
  const engine = served.engine;
  const res = await post("/tokenize", { model: "anything", prompt: TEXT });
  t.is(res.status, 200);
  const tokens = engine.tokenize(TEXT, { addSpecial: true, parseSpecial: true });
  t.deepEqual(res.json, { count: tokens.length, max_model_len: engine.info().contextSize, tokens });
  const bare = await post("/tokenize", { prompt: TEXT, add_special_tokens: false, return_token_strs: true });
  t.deepEqual(bare.json.tokens, engine.tokenize(TEXT, { addSpecial: false, parseSpecial: true }));
  const strs = bare.json.token_strs as string[];
  t.is(strs.length, bare.json.tokens.length);
  t.deepEqual(
    strs.map((str) => engine.tokenId(str)),
    bare.json.tokens,
    "each as the vocabulary spells it",
  );
  t.true(strs.includes("Ġworld"), strs.join(" "));
  const back = await post("/detokenize", { model: "anything", tokens: bare.json.tokens });
  t.is(back.json.prompt, TEXT);
});

need.test("a chat's tokens (vLLM /tokenize messages) and text (/apply-template) are the prompt /v1/chat/completions renders and counts", async (t) => {
  for (const withTools of [false, true]) {
    const extra = withTools ? { tools } : {};
    const applied = await post("/apply-template", { messages, ...extra });
    t.is(applied.status, 200);
    const prompt = applied.json.prompt as string;
    t.true(prompt.includes("<|im_start|>user\nWhat is the weather in Paris?<|im_end|>"), prompt);
    t.true(prompt.endsWith("<|im_start|>assistant\n"), "with the generation prompt");
    t.is(prompt.includes("get_weather"), withTools, "the tools are in the prompt when given");

    const counted = await post("/tokenize", { model: "m", messages, ...extra });
    const chat = await post("/v1/chat/completions", { model: "m", messages, max_tokens: 1, temperature: 0, ...extra });
    t.is(chat.status, 200);
    t.is(counted.json.count, chat.json.usage.prompt_tokens, "the count chat bills");
    const engine = served.engine;
    const ids = engine.tokenize(prompt, { addSpecial: false, parseSpecial: true });
    const bos = engine.info().bosToken!;
    t.deepEqual(counted.json.tokens, ids[0] === bos ? ids : [bos, ...ids], "the template's text tokenized, exactly one BOS");
  }
});

need.test("bad input: 400 in OpenAI's shape naming the field, and the server keeps serving", async (t) => {
  const cases: [string, unknown, string | null][] = [
    ["/tokenize", {}, "content"],
    ["/tokenize", { content: 5 }, "content"],
    ["/tokenize", { messages: [] }, "messages"],
    ["/tokenize", { messages: [{ role: "wizard", content: "x" }] }, "messages[0].role"],
    ["/detokenize", {}, "tokens"],
    ["/detokenize", { tokens: ["a"] }, "tokens[0]"],
    ["/detokenize", { tokens: [1, 10_000_000] }, "tokens[1]"],
    ["/apply-template", { messages: [] }, "messages"],
    ["/apply-template", "{not json", null],
  ];
  for (const [route, body, param] of cases) {
    const res = await post(route, body);
    t.is(res.status, 400, `${route} ${JSON.stringify(body)}: ${res.text}`);
    t.is(res.json.error.type, "invalid_request_error", route);
    t.is(res.json.error.param, param, `${route} ${JSON.stringify(body)}`);
  }
  t.is((await post("/tokenize", { content: "still here" })).status, 200);
});
