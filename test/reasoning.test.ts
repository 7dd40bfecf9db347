/**
 * Thinking split from the answer, end to end, with the real `openai` and `ollama` clients on a
 * server on loopback. The model is a scripted LFM2 reasoning fixture (crates/wick-fixtures,
 * `scripted-lfm2-thinking.gguf`: greedy decoding writes `<think>Let me check the weather</think>`,
 * a blank line, then `It is sunny today.`) with LFM2.5's thinking template, whose think tokens
 * are control tokens as in the real LFM2.5 vocabulary.
 */
import { readFileSync } from "node:fs";
import path from "node:path";
import test from "ava";
import type OpenAI from "openai";
import { Engine } from "../ts/engine/index.ts";
import { ModelManager } from "../ts/service/models.ts";
import { ModelRegistry } from "../ts/service/registry.ts";
import { GoTemplate } from "../ts/store/index.ts";
import { fixture, fixturesDir, needs } from "./helpers/assets.ts";
import { openaiClient, postJson, startServer, type RunningServer } from "./helpers/server.ts";

const THINKING = "scripted-lfm2-thinking.gguf";
const need = needs(fixture(THINKING), fixture("scripted-lfm2-plain-answer.gguf"), fixture("scripted-lfm2.json"));
const { test: t_ } = need;

const THOUGHT = "Let me check the weather";
const ANSWER = "It is sunny today.";

/**
 * An Ollama-style Go template that closes an empty think block when `think` is false, as
 * Ollama's Qwen3 template does; the scripted model then answers straight away.
 */
const GO_TEMPLATE = `{{- range .Messages }}<|im_start|>{{ .Role }}
{{ .Content }}<|im_end|>
{{ end }}<|im_start|>assistant
{{ if and .IsThinkSet (not .Think) }}<think>

</think>

{{ end }}`;

let server: RunningServer;
/** The same model served with `--reasoning-format none`, through the serve flags' plumbing. */
let noneServer: RunningServer;
let client: OpenAI;
const engines: Engine[] = [];
const registry = new ModelRegistry();
const noneModels = new ModelManager({ load: { contextSize: 512, maxSequences: 2, reasoning: { format: "none" } } });
/** `--reasoning-budget 2` and `--reasoning-budget 0`, through the same plumbing. */
const budgetModels = [2, 0].map((reasoningBudget) => new ModelManager({ load: { contextSize: 512, maxSequences: 2, reasoningBudget } }));
let budgetServers: RunningServer[] = [];

test.before(async () => {
  if (!need.path) return;
  const load = async (file: string) => {
    const engine = await Engine.load({ modelPath: path.join(fixturesDir, file), contextSize: 512, maxSequences: 2 });
    engines.push(engine);
    return engine;
  };
  registry.add(await load(THINKING), { path: THINKING, id: "thinking" });
  const goTemplate = GoTemplate.parse(GO_TEMPLATE);
  registry.add(await load(THINKING), { path: THINKING, id: "thinking-go", profile: { params: {}, messages: [], goTemplate } });
  registry.add(await load("scripted-lfm2-plain-answer.gguf"), { path: "plain.gguf", id: "plain" });
  server = await startServer({ registry });
  client = openaiClient(server.url);
  noneModels.setDefault({ path: path.join(fixturesDir, THINKING) }, { id: "thinking-none" });
  await noneModels.loadDefault();
  noneServer = await startServer({ models: noneModels });
  budgetServers = await Promise.all(
    budgetModels.map(async (m) => {
      m.setDefault({ path: path.join(fixturesDir, THINKING) }, { id: "thinking-budget" });
      await m.loadDefault();
      return startServer({ models: m });
    }),
  );
});
test.after.always(async () => {
  await server?.close();
  await noneServer?.close();
  await noneModels.close();
  await Promise.all(budgetServers.map((b) => b.close()));
  await Promise.all(budgetModels.map((m) => m.close()));
  await Promise.all(engines.map((e) => e.unload()));
});

const ask = [{ role: "user" as const, content: "What is the weather in Paris?" }];

type Message = OpenAI.ChatCompletionMessage & { reasoning_content?: string };
type Delta = OpenAI.ChatCompletionChunk.Choice.Delta & { reasoning_content?: string };

async function chat(c: OpenAI, model: string, extra: Record<string, unknown> = {}) {
  const r = await c.chat.completions.create({ model, messages: ask, temperature: 0, ...extra } as never);
  return r as OpenAI.ChatCompletion;
}

/** The stream folded: reasoning and content as their deltas concatenate, and which chunks carried which. */
async function chatStream(c: OpenAI, model: string, extra: Record<string, unknown> = {}) {
  const stream = (await c.chat.completions.create({ model, messages: ask, temperature: 0, stream: true, ...extra } as never)) as unknown as AsyncIterable<OpenAI.ChatCompletionChunk>;
  let reasoning = "";
  let content = "";
  let finish: string | null = null;
  const kinds: string[] = [];
  for await (const chunk of stream) {
    const choice = chunk.choices[0];
    if (!choice) continue;
    const delta = choice.delta as Delta;
    if (delta.reasoning_content) kinds.push("reasoning");
    if (delta.content) kinds.push("content");
    reasoning += delta.reasoning_content ?? "";
    content += delta.content ?? "";
    if (choice.finish_reason) finish = choice.finish_reason;
  }
  return { reasoning, content, finish, kinds };
}

t_("the fixture writes a think block, then the answer", (t) => {
  const scripts = JSON.parse(readFileSync(path.join(fixturesDir, "scripted-lfm2.json"), "utf8")) as Record<string, { text: string }>;
  t.is(scripts[THINKING].text, `<think>${THOUGHT}</think>\n\n${ANSWER}`);
});

t_("OpenAI chat: thinking in message.reasoning_content, the answer in content", async (t) => {
  const r = await chat(client, "thinking");
  const message = r.choices[0].message as Message;
  t.is(message.reasoning_content, THOUGHT);
  t.is(message.content, ANSWER);
  t.is(r.choices[0].finish_reason, "stop");
  t.is(r.usage!.completion_tokens, 14, "13 script tokens and EOS");
  t.is(r.usage!.completion_tokens_details?.reasoning_tokens, 7, "<think>, five thought tokens, </think>");
});

t_("OpenAI chat streamed: reasoning_content deltas first, then content; they concatenate to the whole answer", async (t) => {
  const whole = (await chat(client, "thinking")).choices[0].message as Message;
  const s = await chatStream(client, "thinking");
  t.deepEqual([s.reasoning, s.content], [whole.reasoning_content, whole.content]);
  t.deepEqual([s.reasoning, s.content], [THOUGHT, ANSWER]);
  t.is(s.finish, "stop");
  t.true(s.kinds.filter((k) => k === "reasoning").length > 1, "thinking is streamed, not sent whole");
  t.is(s.kinds.indexOf("content"), s.kinds.lastIndexOf("reasoning") + 1, s.kinds.join(","));
});

t_("cut inside the think block: all of it is reasoning, finish length, streamed and not", async (t) => {
  const r = await chat(client, "thinking", { max_tokens: 4 });
  const message = r.choices[0].message as Message;
  t.is(message.reasoning_content, "Let me check");
  t.is(message.content, "");
  t.is(r.choices[0].finish_reason, "length");
  const s = await chatStream(client, "thinking", { max_tokens: 4 });
  t.deepEqual([s.reasoning, s.content, s.finish], ["Let me check", "", "length"]);
});

t_("a model whose template never thinks gets no reasoning field", async (t) => {
  const message = (await chat(client, "plain")).choices[0].message as Message;
  t.is(message.content, "It is sunny in Paris, 21°C.");
  t.false("reasoning_content" in message);
});

t_("--reasoning-format none leaves the thinking in content, markers included, streamed and not", async (t) => {
  const none = openaiClient(noneServer.url);
  const message = (await chat(none, "thinking-none")).choices[0].message as Message;
  t.is(message.content, `<think>${THOUGHT}</think>\n\n${ANSWER}`);
  t.false("reasoning_content" in message);
  const s = await chatStream(none, "thinking-none");
  t.deepEqual([s.reasoning, s.content], ["", message.content]);
});

t_("Ollama /api/chat with think: message.thinking and message.content, streamed and not", async (t) => {
  const { Ollama } = await import("ollama");
  const ollama = new Ollama({ host: server.url });
  const r = await ollama.chat({ model: "thinking", messages: ask, think: true, options: { temperature: 0 } });
  t.is(r.message.thinking, THOUGHT);
  t.is(r.message.content, ANSWER);
  let thinking = "";
  let content = "";
  for await (const part of await ollama.chat({ model: "thinking", messages: ask, think: true, options: { temperature: 0 }, stream: true })) {
    thinking += part.message.thinking ?? "";
    content += part.message.content;
  }
  t.deepEqual([thinking, content], [THOUGHT, ANSWER]);
});

t_("Ollama /api/generate: thinking in `thinking`, streamed and not", async (t) => {
  const { Ollama } = await import("ollama");
  const ollama = new Ollama({ host: server.url });
  const r = await ollama.generate({ model: "thinking", prompt: "What is the weather in Paris?", think: true, options: { temperature: 0 } });
  t.deepEqual([r.thinking, r.response], [THOUGHT, ANSWER]);
  let thinking = "";
  let response = "";
  for await (const part of await ollama.generate({ model: "thinking", prompt: "What is the weather in Paris?", think: true, options: { temperature: 0 }, stream: true })) {
    thinking += part.thinking ?? "";
    response += part.response;
  }
  t.deepEqual([thinking, response], [THOUGHT, ANSWER]);
});

t_("think: false renders the template with thinking off: the model answers at once, and the prompt holds the empty block", async (t) => {
  const { Ollama } = await import("ollama");
  const ollama = new Ollama({ host: server.url });
  const on = await ollama.chat({ model: "thinking-go", messages: ask, think: true, options: { temperature: 0 } });
  t.deepEqual([on.message.thinking, on.message.content], [THOUGHT, ANSWER]);
  const off = await ollama.chat({ model: "thinking-go", messages: ask, think: false, options: { temperature: 0 } });
  t.deepEqual([off.message.thinking, off.message.content], [undefined, ANSWER]);
  t.is(off.prompt_eval_count, on.prompt_eval_count + 4, "<think>, a blank line, </think>, a blank line");
  // OpenAI's reasoning_effort "none" is the same switch.
  const r = await chat(client, "thinking-go", { reasoning_effort: "none" });
  t.deepEqual([(r.choices[0].message as Message).reasoning_content, r.choices[0].message.content], [undefined, ANSWER]);
  t.is(r.usage!.prompt_tokens, off.prompt_eval_count);
});

t_("bad think and reasoning_effort values are 400s naming the field", async (t) => {
  const ollama = await postJson(`${server.url}/api/chat`, { model: "thinking", messages: ask, think: "loud" });
  t.is(ollama.status, 400);
  t.regex(ollama.json.error, /think/);
  const openai = await postJson(`${server.url}/v1/chat/completions`, { model: "thinking", messages: ask, reasoning_effort: "extreme" });
  t.is(openai.status, 400);
  t.is(openai.json.error.param, "reasoning_effort");
});

t_("a reasoning budget closes the think block after its tokens: the closing marker is forced and the answer follows", async (t) => {
  const [two, zero] = budgetServers.map((b) => openaiClient(b.url));
  const r = await chat(two, "thinking-budget");
  const message = r.choices[0].message as Message;
  t.is(message.reasoning_content, "Let me");
  t.is(message.content, ANSWER);
  t.is(r.usage!.completion_tokens, 11, "<think>, 2 thought tokens, the forced </think>, the answer and EOS");
  const s = await chatStream(two, "thinking-budget");
  t.deepEqual([s.reasoning, s.content], ["Let me", ANSWER]);
  // 0: thinking off; the block this template opens anyway is closed at once.
  const off = (await chat(zero, "thinking-budget")).choices[0].message as Message;
  t.is(off.reasoning_content ?? "", "");
  t.is(off.content, ANSWER);
  // Without a budget the same file thinks its whole thought.
  t.is(((await chat(client, "thinking")).choices[0].message as Message).reasoning_content, THOUGHT);
});

t_("Anthropic thinking.budget_tokens is the request's own budget", async (t) => {
  const r = await postJson(`${server.url}/v1/messages`, { model: "thinking", max_tokens: 64, messages: ask, thinking: { type: "enabled", budget_tokens: 1 } });
  t.is(r.status, 200, r.text);
  const blocks = (r.json as { content: { type: string; thinking?: string; text?: string }[] }).content;
  t.deepEqual(
    blocks.map((b) => [b.type, b.thinking ?? b.text]),
    [
      ["thinking", "Let"],
      ["text", ANSWER],
    ],
  );
});

t_("/apply-template and /tokenize render the prompt chat would, thinking switch included", async (t) => {
  const body = { model: "thinking-go", messages: ask };
  const on = await postJson(`${server.url}/apply-template`, body);
  const off = await postJson(`${server.url}/apply-template`, { ...body, chat_template_kwargs: { enable_thinking: false } });
  const offEffort = await postJson(`${server.url}/apply-template`, { ...body, reasoning_effort: "none" });
  t.is(on.status, 200, on.text);
  const prompt = (r: typeof on) => (r.json as { prompt: string }).prompt;
  t.false(prompt(on).includes("</think>"));
  t.true(prompt(off).endsWith("<think>\n\n</think>\n\n"), JSON.stringify(prompt(off)));
  t.is(prompt(offEffort), prompt(off));
  const tokens = await postJson(`${server.url}/tokenize`, { ...body, chat_template_kwargs: { enable_thinking: false } });
  const chatOff = await chat(client, "thinking-go", { chat_template_kwargs: { enable_thinking: false }, max_tokens: 1 });
  t.is((tokens.json as { count: number }).count, chatOff.usage!.prompt_tokens);
});
