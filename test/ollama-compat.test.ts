/**
 * What Ollama and OpenAI clients see of a `wick serve -m file.gguf` server, against a real one on
 * 127.0.0.1 (a store beside it, as `wick serve` has): the `-m` model in /api/tags, /api/ps and
 * /api/show under its served name, and GET /v1/models/{id} for every name that picks it;
 * `logprobs`/`top_logprobs` on /api/chat and /api/generate in Ollama's shape; and an answer cut
 * inside a multi-byte character never ending in U+FFFD. The model is the scripted LFM2 fixture
 * whose greedy answer is fixed by its weights (`scripted-lfm2.json`).
 */
import { promises as fsp, readFileSync } from "node:fs";
import path from "node:path";
import test from "ava";
import { Engine } from "../ts/engine/index.ts";
import { fixture, fixturesDir, needs } from "./helpers/assets.ts";
import { ndjson, send, startStoreServer, type StoreServer } from "./helpers/store-server.ts";

const need = needs(fixture("scripted-lfm2-plain-answer.gguf"), fixture("scripted-lfm2.json"));
const file = need.path ?? "";
const NAME = "scripted-lfm2-plain-answer";
const script = () => (JSON.parse(readFileSync(path.join(fixturesDir, "scripted-lfm2.json"), "utf8")) as Record<string, { text: string; ids: number[] }>)[`${NAME}.gguf`];
const messages = [{ role: "user", content: "What is the weather in Paris?" }];

let s: StoreServer;
test.before(async () => {
  if (!need.path) return;
  s = await startStoreServer();
  s.models.setDefault({ path: file });
  await s.models.loadDefault();
});
test.after.always(async () => s?.close());

need.serial("the -m model is in /api/tags, /api/ps and /api/show under its served name", async (t) => {
  const { models } = await s.ollama.list();
  const tag = models.find((m) => m.name === NAME);
  t.truthy(tag, JSON.stringify(models.map((m) => m.name)));
  t.is(tag!.model, NAME);
  t.is(tag!.size, (await fsp.stat(file)).size);
  t.regex(tag!.digest, /^[0-9a-f]{64}$/);
  t.like(tag!.details, { format: "gguf", family: "lfm2", families: ["lfm2"] });
  t.truthy(tag!.details.quantization_level);
  const ps = (await s.ollama.ps()).models.find((m) => m.name === NAME);
  t.truthy(ps);
  t.is(ps!.digest, tag!.digest, "the same digest in /api/ps");
  for (const name of [NAME, `${NAME}:latest`]) {
    const shown = await s.ollama.show({ model: name });
    t.is(shown.details.family, "lfm2", name);
    t.truthy(shown.template, name);
  }
  const chat = await s.ollama.chat({ model: NAME, messages, options: { temperature: 0 } });
  t.is(chat.message.content, script().text);
});

need.serial("GET /v1/models/{id}: the model object for every name that picks the -m model; 404 in OpenAI's shape for an unknown id", async (t) => {
  for (const id of [NAME, `${NAME}:latest`]) {
    const res = await fetch(`${s.url}/v1/models/${id}`);
    t.is(res.status, 200, id);
    t.like(await res.json(), { id: NAME, object: "model", owned_by: "wick" });
  }
  const listed = (await (await fetch(`${s.url}/v1/models`)).json()) as { data: { id: string }[] };
  t.deepEqual(
    listed.data.map((m) => m.id),
    [NAME],
  );
  for (const id of ["no-such-model", "hf.co/nobody/nothing:Q4_K_M", "bad name!"]) {
    const res = await fetch(`${s.url}/v1/models/${encodeURIComponent(id)}`);
    t.is(res.status, 404, id);
    const body = (await res.json()) as { error: { message: string; type: string; code: string } };
    t.like(body.error, { type: "invalid_request_error", code: "model_not_found" }, id);
  }
});

need.serial("logprobs on /api/chat: one entry per answer token with its top_logprobs, streamed and not; none unless asked", async (t) => {
  const { text, ids } = script();
  const vocab = await Engine.load({ modelPath: file, vocabOnly: true });
  const pieces = ids.slice(0, -1).map((id) => vocab.detokenize([id]));
  await vocab.unload();
  const whole = await s.ollama.chat({ model: NAME, messages, options: { temperature: 0 }, logprobs: true, top_logprobs: 3 });
  t.is(whole.message.content, text);
  const lps = whole.logprobs!;
  t.deepEqual(
    lps.map((l) => l.token),
    pieces,
    "the answer's tokens, the end token left out",
  );
  for (const l of lps) {
    t.true(l.logprob <= 0);
    t.is(l.top_logprobs!.length, 3);
    t.is(l.top_logprobs![0].token, l.token, "greedy: the chosen token is the most likely");
    t.deepEqual((l as { bytes?: number[] }).bytes, [...Buffer.from(l.token, "utf8")]);
  }
  const streamed: typeof lps = [];
  for await (const part of await s.ollama.chat({ model: NAME, messages, options: { temperature: 0 }, logprobs: true, top_logprobs: 3, stream: true })) streamed.push(...(part.logprobs ?? []));
  t.deepEqual(streamed, lps, "the chunks' entries add up to the whole answer's");

  const plain = (await (await send(`${s.url}/api/chat`, { model: NAME, messages, stream: false, options: { temperature: 0 } })).json()) as Record<string, unknown>;
  t.false("logprobs" in plain, "not asked, not sent");
  const noTop = await s.ollama.chat({ model: NAME, messages, options: { temperature: 0 }, logprobs: true });
  t.true(noTop.logprobs!.every((l) => l.top_logprobs === undefined));
  const bad = await send(`${s.url}/api/chat`, { model: NAME, messages, logprobs: true, top_logprobs: 21 });
  t.is(bad.status, 400);
});

need.serial("logprobs on /api/generate, streamed and not", async (t) => {
  const whole = await s.ollama.generate({ model: NAME, prompt: "Weather?", options: { temperature: 0, num_predict: 4 }, logprobs: true, top_logprobs: 2 });
  t.is(whole.eval_count, 4);
  t.is(whole.logprobs!.map((l) => l.token).join(""), whole.response ?? "");
  t.true(whole.logprobs!.every((l) => l.top_logprobs!.length === 2));
  const lines = await ndjson(await send(`${s.url}/api/generate`, { model: NAME, prompt: "Weather?", options: { temperature: 0, num_predict: 4 }, logprobs: true, top_logprobs: 2 }));
  t.deepEqual(
    lines.flatMap((l: { logprobs?: unknown[] }) => l.logprobs ?? []),
    whole.logprobs,
  );
});

need.serial("an answer cut inside a multi-byte character does not end in U+FFFD, whole or streamed", async (t) => {
  const vocab = await Engine.load({ modelPath: file, vocabOnly: true });
  // "Â" is byte 0xC2 in a byte-level BPE vocabulary: the first byte of "°" (C2 B0), never a whole character.
  const lead = vocab.tokenId("Â")!;
  t.deepEqual(vocab.tokenize("°", { addSpecial: false }).length, 1, "° is one token of two bytes");
  await vocab.unload();
  const body = { model: NAME, messages, temperature: 0, max_tokens: 1, logit_bias: { [lead]: 100 } };
  const whole = (await (await send(`${s.url}/v1/chat/completions`, body)).json()) as { choices: { message: { content: string }; finish_reason: string }[]; usage: { completion_tokens: number } };
  t.is(whole.choices[0].finish_reason, "length");
  t.is(whole.usage.completion_tokens, 1, "the token was generated");
  t.is(whole.choices[0].message.content, "", "its lone lead byte is not shown as U+FFFD");
  const sse = await (await send(`${s.url}/v1/chat/completions`, { ...body, stream: true })).text();
  t.false(sse.includes("\uFFFD") || sse.includes("\\ufffd"), sse);
  const native = await s.ollama.chat({ model: NAME, messages, options: { temperature: 0, num_predict: 8 } });
  t.is(native.message.content, script().text.slice(0, script().text.indexOf("°") + 2), "whole characters are kept: the answer up to °C");
});
