/**
 * The real `openai` npm client against a real Wick server on 127.0.0.1 serving SmolLM2-135M:
 * models, chat (stream and not), completions, usage, stop strings, length limits, seeds,
 * n > 1, logprobs and the API key.
 */
import OpenAI from "openai";
import { needs, smollm2 } from "./helpers/assets.ts";
import { openaiClient, serveModel, startServer } from "./helpers/server.ts";

const { path: smol, serial } = needs(smollm2());
const MODEL = "SmolLM2-135M-Instruct.Q4_1";
const ASK = [{ role: "user" as const, content: "What is the capital of France? Answer in one sentence." }];

const served = serveModel(smol);

serial("models.list and models.retrieve describe the served model; unknown ids are 404", async (t) => {
  const list = await served.client.models.list();
  t.deepEqual(
    list.data.map((m) => m.id),
    [MODEL],
  );
  t.is(list.data[0].object, "model");
  t.is(typeof list.data[0].created, "number");
  const one = await served.client.models.retrieve(MODEL);
  t.is(one.id, MODEL);
  const err = await t.throwsAsync(served.client.models.retrieve("no-such-model"), { instanceOf: OpenAI.NotFoundError });
  t.is(err.code, "model_not_found");
});

serial("chat at temperature 0: the concatenated stream equals the non-stream text", async (t) => {
  const body = { model: MODEL, messages: ASK, temperature: 0, max_tokens: 48 };
  const full = await served.client.chat.completions.create(body);
  const text = full.choices[0].message.content!;
  t.true(text.length > 0);
  t.is(full.object, "chat.completion");
  t.is(full.choices[0].message.role, "assistant");
  t.true(["stop", "length"].includes(full.choices[0].finish_reason));
  t.true(full.usage!.prompt_tokens > 10);
  t.is(full.usage!.total_tokens, full.usage!.prompt_tokens + full.usage!.completion_tokens);
  t.is(typeof full.usage!.prompt_tokens_details?.cached_tokens, "number");

  const stream = await served.client.chat.completions.create({ ...body, stream: true });
  const chunks = [];
  for await (const chunk of stream) chunks.push(chunk);
  t.is(chunks.map((c) => c.choices[0]?.delta.content ?? "").join(""), text);
  t.is(chunks[0].choices[0].delta.role, "assistant");
  t.is(new Set(chunks.map((c) => c.id)).size, 1, "one id for every chunk");
  t.is(new Set(chunks.map((c) => c.created)).size, 1, "one created for every chunk");
  t.true(chunks.every((c) => c.object === "chat.completion.chunk"));
  t.true(
    chunks.slice(0, -1).every((c) => c.choices[0].finish_reason === null),
    "finish_reason null until the end",
  );
  t.is(chunks.at(-1)!.choices[0].finish_reason, full.choices[0].finish_reason);
  t.true(
    chunks.every((c) => c.usage === undefined || c.usage === null),
    "no usage without include_usage",
  );
  t.log(JSON.stringify(text));
});

serial("stream_options.include_usage adds one final usage chunk with no choices", async (t) => {
  const stream = await served.client.chat.completions.create({
    model: MODEL,
    messages: ASK,
    temperature: 0,
    max_tokens: 12,
    stream: true,
    stream_options: { include_usage: true },
  });
  const chunks = [];
  for await (const chunk of stream) chunks.push(chunk);
  const last = chunks.at(-1)!;
  t.deepEqual(last.choices, []);
  t.truthy(last.usage);
  t.is(last.usage!.total_tokens, last.usage!.prompt_tokens + last.usage!.completion_tokens);
  t.true(last.usage!.completion_tokens > 0 && last.usage!.completion_tokens <= 12);
  t.is(typeof last.usage!.prompt_tokens_details?.cached_tokens, "number");
  t.true(
    chunks.slice(0, -1).every((c) => c.usage === null),
    "usage is null on every other chunk",
  );
});

serial("completions: raw prompt, stream equals non-stream, usage counted", async (t) => {
  const body = { model: MODEL, prompt: "The three primary colors are", temperature: 0, max_tokens: 16 };
  const full = await served.client.completions.create(body);
  t.is(full.object, "text_completion");
  const text = full.choices[0].text;
  t.true(text.length > 0);
  t.true(full.usage!.prompt_tokens >= 5);
  const stream = await served.client.completions.create({ ...body, stream: true, stream_options: { include_usage: true } });
  let streamed = "";
  let usage;
  for await (const chunk of stream) {
    streamed += chunk.choices[0]?.text ?? "";
    if (chunk.usage) usage = chunk.usage;
  }
  t.is(streamed, text);
  t.deepEqual(usage, full.usage);
});

serial("stop strings end the text before the stop string, with finish_reason stop", async (t) => {
  const body = { model: MODEL, messages: ASK, temperature: 0, max_tokens: 40 };
  const free = (await served.client.chat.completions.create(body)).choices[0].message.content!;
  // A stop string from the middle of the free answer: the stopped answer is everything before it.
  const words = free.split(" ");
  t.true(words.length >= 4, free);
  const stop = ` ${words[3]}`;
  const cut = free.slice(0, free.indexOf(stop));
  for (const s of [stop, [stop, "never-appears-xyz"]]) {
    const res = await served.client.chat.completions.create({ ...body, stop: s });
    t.is(res.choices[0].message.content, cut);
    t.is(res.choices[0].finish_reason, "stop");
  }
  const streamed = await served.client.chat.completions.create({ ...body, stop, stream: true });
  let text = "";
  let finish;
  for await (const c of streamed) {
    text += c.choices[0]?.delta.content ?? "";
    finish = c.choices[0]?.finish_reason ?? finish;
  }
  t.is(text, cut);
  t.is(finish, "stop");
  const comp = await served.client.completions.create({ model: MODEL, prompt: "1, 2, 3, 4, 5,", temperature: 0, max_tokens: 20, stop: [" 7"] });
  t.false(comp.choices[0].text.includes(" 7"));
  t.is(comp.choices[0].finish_reason, "stop");
});

serial("max_tokens and max_completion_tokens cut with finish_reason length", async (t) => {
  const a = await served.client.chat.completions.create({ model: MODEL, messages: ASK, max_tokens: 3, ignore_eos: true } as OpenAI.ChatCompletionCreateParamsNonStreaming);
  t.is(a.choices[0].finish_reason, "length");
  t.is(a.usage!.completion_tokens, 3);
  const b = await served.client.chat.completions.create({ model: MODEL, messages: ASK, max_completion_tokens: 5, max_tokens: 50, ignore_eos: true } as OpenAI.ChatCompletionCreateParamsNonStreaming);
  t.is(b.choices[0].finish_reason, "length");
  t.is(b.usage!.completion_tokens, 5, "max_completion_tokens wins over max_tokens");
  const c = await served.client.completions.create({ model: MODEL, prompt: "Once upon a time", max_tokens: 4, ignore_eos: true } as OpenAI.CompletionCreateParamsNonStreaming);
  t.is(c.choices[0].finish_reason, "length");
  t.is(c.usage!.completion_tokens, 4);
});

serial("a seed makes sampling reproducible; different seeds differ", async (t) => {
  const body = { model: MODEL, messages: [{ role: "user" as const, content: "Write a short poem about the sea." }], temperature: 1.0, max_tokens: 24, ignore_eos: true };
  const run = async (seed: number) => (await served.client.chat.completions.create({ ...body, seed } as OpenAI.ChatCompletionCreateParamsNonStreaming)).choices[0].message.content ?? "";
  const first = await run(1234);
  t.is(await run(1234), first);
  const others = [await run(1), await run(2), await run(3)];
  t.true(
    others.some((o) => o !== first),
    "three other seeds all gave the same text",
  );
  // The same seed streamed gives the same text.
  const stream = await served.client.chat.completions.create({ ...body, seed: 1234, stream: true } as OpenAI.ChatCompletionCreateParamsStreaming);
  let text = "";
  for await (const c of stream) text += c.choices[0]?.delta.content ?? "";
  t.is(text, first);
});

serial("n > 1 runs n sequences; with a seed, choice 0 equals the n = 1 answer", async (t) => {
  const body = { model: MODEL, messages: ASK, temperature: 0.9, max_tokens: 12, seed: 7 };
  const one = await served.client.chat.completions.create(body);
  const three = await served.client.chat.completions.create({ ...body, n: 3 });
  t.deepEqual(
    three.choices.map((c) => c.index),
    [0, 1, 2],
  );
  t.is(three.choices[0].message.content, one.choices[0].message.content);
  t.is(three.usage!.prompt_tokens, one.usage!.prompt_tokens, "the shared prompt counts once");
  const stream = await served.client.chat.completions.create({ ...body, n: 3, stream: true });
  const texts = ["", "", ""];
  const finished = new Set<number>();
  for await (const c of stream) {
    for (const ch of c.choices) {
      texts[ch.index] += ch.delta.content ?? "";
      if (ch.finish_reason) finished.add(ch.index);
    }
  }
  t.deepEqual(
    texts,
    three.choices.map((c) => c.message.content),
  );
  t.is(finished.size, 3);
});

serial("logprobs: one entry per generated token, the greedy token is the most likely", async (t) => {
  const res = await served.client.chat.completions.create({ model: MODEL, messages: ASK, temperature: 0, max_tokens: 8, logprobs: true, top_logprobs: 3 });
  const content = res.choices[0].logprobs!.content!;
  t.true(content.length > 0 && content.length <= 8);
  t.is(content.map((c) => c.token).join(""), res.choices[0].message.content!);
  for (const c of content) {
    t.is(c.top_logprobs.length, 3);
    t.true(c.logprob <= 0);
    t.true(Math.abs(c.logprob - c.top_logprobs[0].logprob) < 1e-4, "greedy picks the top token");
    t.deepEqual(c.bytes, [...Buffer.from(c.token)]);
  }
  const comp = await served.client.completions.create({
    model: MODEL,
    prompt: "The sky is",
    temperature: 0,
    max_tokens: 4,
    logprobs: 2,
    ignore_eos: true,
  } as OpenAI.CompletionCreateParamsNonStreaming);
  const lp = comp.choices[0].logprobs!;
  t.is(lp.tokens!.length, 4);
  t.is(lp.tokens!.join(""), comp.choices[0].text);
  t.is(Object.keys(lp.top_logprobs![0]).length, 2);
  t.deepEqual(
    lp.text_offset,
    lp.tokens!.map((_, i) => lp.tokens!.slice(0, i).join("").length),
  );
});

serial("API key: accepted as Bearer or X-Api-Key, rejected with a 401 OpenAI error; /health stays open", async (t) => {
  const locked = await startServer({ registry: served.registry, apiKey: "sekrit-key" });
  try {
    const good = openaiClient(locked.url, "sekrit-key");
    t.is((await good.models.list()).data[0].id, MODEL);
    const chat = await good.chat.completions.create({ model: MODEL, messages: ASK, max_tokens: 2 });
    t.is(chat.choices.length, 1);

    const bad = openaiClient(locked.url, "wrong-key");
    const err = await t.throwsAsync(bad.chat.completions.create({ model: MODEL, messages: ASK, max_tokens: 2 }), { instanceOf: OpenAI.AuthenticationError });
    t.is(err.status, 401);
    t.is(err.code, "invalid_api_key");
    t.is(err.type, "invalid_request_error");

    const raw = await fetch(`${locked.url}/v1/models`);
    t.is(raw.status, 401);
    const body = (await raw.json()) as { error: Record<string, unknown> };
    t.deepEqual(Object.keys(body.error).sort(), ["code", "message", "param", "type"]);
    t.regex(body.error.message as string, /API key/);

    t.is((await fetch(`${locked.url}/v1/models`, { headers: { "X-Api-Key": "sekrit-key" } })).status, 200);
    t.is((await fetch(`${locked.url}/v1/models`, { headers: { "X-Api-Key": "sekrit-kez" } })).status, 401);
    t.is((await fetch(`${locked.url}/health`)).status, 200);
  } finally {
    await locked.close();
  }
});
