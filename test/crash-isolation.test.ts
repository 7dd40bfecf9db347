/**
 * Crash isolation through a real server on loopback, with the engine's `WICK_FAULT` test hook
 * (read at each engine load, so it is set in this process before the model loads):
 * - a panic inside a model step: that request gets a 500 naming the panic (or, streamed, an
 *   in-band error frame) while a concurrent request is answered, and the server serves on;
 * - the scheduler thread dying: `/health` answers 503 naming the model and the reason, the
 *   next chat request reloads the model and is answered, and `/health` is 200 again.
 */
import { Engine } from "../ts/engine/index.ts";
import { ModelManager } from "../ts/service/models.ts";
import { needs, smollm2 } from "./helpers/assets.ts";
import { postJson, startServer, type RunningServer } from "./helpers/server.ts";

const { path: smol, serial } = needs(smollm2());

const POISON_WORD = " quokka";
const poisoned = { role: "user", content: `Tell me about the quokka${POISON_WORD.repeat(3)}.` };
const clean = { role: "user", content: "What is the capital of France?" };
const chat = (message: object, extra: object = {}) => ({ messages: [message], max_tokens: 12, temperature: 0, ...extra });

/** A token of the poisoned word that the clean request (template text included) never has. */
async function poisonToken(modelPath: string): Promise<number> {
  const vocab = await Engine.load({ modelPath, vocabOnly: true });
  try {
    const cleanText = `<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\n${clean.content}<|im_end|>\n<|im_start|>assistant\n`;
    const cleanIds = new Set(vocab.tokenize(cleanText, { addSpecial: true, parseSpecial: true }));
    const id = vocab.tokenize(POISON_WORD, { addSpecial: false }).find((t) => !cleanIds.has(t));
    if (id === undefined) throw new Error(`every token of '${POISON_WORD}' is also in the clean prompt`);
    return id;
  } finally {
    await vocab.unload();
  }
}

/** A server whose `-m` model loads with `WICK_FAULT=<fault>` (and reloads with it). */
async function faultyServer(modelPath: string, fault: string): Promise<{ server: RunningServer; models: ModelManager }> {
  process.env.WICK_FAULT = fault;
  const models = new ModelManager({ load: { contextSize: 1024, maxSequences: 4 } });
  models.setDefault({ path: modelPath });
  await models.loadDefault();
  return { server: await startServer({ models }), models };
}

serial("a panic in a model step: that request gets a 500 naming it, a concurrent one is answered, the server serves on", async (t) => {
  const token = await poisonToken(smol!);
  const { server, models } = await faultyServer(smol!, `step-panic:${token}`);
  try {
    const url = `${server.url}/v1/chat/completions`;
    const alone = await postJson(url, chat(clean));
    t.is(alone.status, 200, alone.text);
    const [bad, good] = await Promise.all([postJson(url, chat(poisoned)), postJson(url, chat(clean))]);
    t.is(bad.status, 500, bad.text);
    t.is(bad.json.error.type, "server_error");
    t.is(bad.json.error.code, "internal_error");
    t.regex(bad.json.error.message, /model step panicked: injected fault \(WICK_FAULT=step-panic:\d+\)/);
    t.is(good.status, 200, good.text);
    t.is(good.json.choices[0].message.content, alone.json.choices[0].message.content, "the concurrent request answers as alone");

    // The native API: the same status, Ollama's error shape.
    const native = await postJson(`${server.url}/api/chat`, { model: "m", messages: [poisoned], stream: false, options: { temperature: 0, num_predict: 12 } });
    t.is(native.status, 500, native.text);
    t.regex(native.json.error, /model step panicked: injected fault/);

    // Streamed: headers are out before the step runs, so the error comes in-band.
    const streamed = await fetch(url, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(chat(poisoned, { stream: true })) });
    const body = await streamed.text();
    t.is(streamed.status, 200);
    t.regex(body, /data: \{"error":\{"message":"[^"]*injected fault/);
    t.false(body.includes("[DONE]"));

    // Nothing leaked, the engine is healthy, and later requests are answered.
    const engine = models.registry.list()[0].engine;
    const m = engine.metrics();
    t.deepEqual([m.running, m.waiting, m.kvBlocksUsed], [0, 0, 0]);
    t.true(m.stepFailuresTotal >= 2);
    const scraped = await (await fetch(`${server.url}/metrics`)).text();
    t.regex(scraped, new RegExp(`wick:step_failures_total\\{model_name="[^"]+"\\} ${m.stepFailuresTotal}\\n`), "exported for Prometheus");
    t.true(engine.health().ok);
    const health = await fetch(`${server.url}/health`);
    t.is(health.status, 200);
    const after = await postJson(url, chat(clean));
    t.is(after.status, 200, after.text);
    t.is(after.json.choices[0].message.content, alone.json.choices[0].message.content);
  } finally {
    await server.close();
    await models.close();
    delete process.env.WICK_FAULT;
  }
});

serial("the scheduler thread dies: /health 503 with the reason, the next chat request reloads the model, /health 200", async (t) => {
  const token = await poisonToken(smol!);
  const { server, models } = await faultyServer(smol!, `scheduler-exit:${token}`);
  try {
    const url = `${server.url}/v1/chat/completions`;
    const first = models.registry.list()[0];
    t.is((await fetch(`${server.url}/health`)).status, 200);

    const killed = await postJson(url, chat(poisoned));
    t.is(killed.status, 503, killed.text);
    t.is(killed.headers.get("retry-after"), "1");
    t.is(killed.json.error.code, "engine_dead");
    t.regex(killed.json.error.message, /scheduler thread panicked: injected fault \(WICK_FAULT=scheduler-exit:\d+\)/);

    const down = await fetch(`${server.url}/health`);
    t.is(down.status, 503);
    const body = (await down.json()) as { status: string; reason: string; unhealthy: { model: string; reason: string }[]; error: { code: number; type: string } };
    t.is(body.status, "error");
    t.regex(body.reason, new RegExp(`model '${first.id}': .*scheduler thread panicked: injected fault`));
    t.deepEqual(
      body.unhealthy.map((u) => u.model),
      [first.id],
    );
    t.deepEqual([body.error.code, body.error.type], [503, "unavailable_error"]);
    t.false(first.engine.health().ok);

    // Two requests at once: both wait for one reload and are answered.
    const [next, other] = await Promise.all([postJson(url, chat(clean)), postJson(url, chat(clean, { max_tokens: 4 }))]);
    t.is(next.status, 200, next.text);
    t.is(other.status, 200, other.text);
    t.true(next.json.choices[0].message.content.length > 0);
    t.is(models.registry.list().length, 1);
    const reloaded = models.registry.list()[0];
    t.not(reloaded.engine, first.engine, "a new engine serves the model");
    const up = await fetch(`${server.url}/health`);
    t.is(up.status, 200);
    t.like(await up.json(), { status: "ok", models: [first.id] });
  } finally {
    await server.close();
    await models.close();
    delete process.env.WICK_FAULT;
  }
});
