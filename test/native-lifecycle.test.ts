/**
 * When models load and unload, against real servers on 127.0.0.1 with temp stores: keep_alive 0
 * gives the memory back (RSS measured), `--max-loaded-models` evicts the least recently used
 * idle model, concurrent requests share one load, a model with sequences running is never
 * unloaded (an unload or an eviction waits for it), a model that fails to load fails only its
 * own requests. Plus keep_alive parsing.
 */
import test from "ava";
import { defaultKeepAliveMs, keepAliveMs, parseDuration } from "../ts/service/keep-alive.ts";
import { fixture, needs, realModel, smollm2 } from "./helpers/assets.ts";
import { ndjson, send, startStoreServer } from "./helpers/store-server.ts";
import { waitFor } from "./helpers/server.ts";

const gemma = needs(realModel("gemma3-270m"));
const tinyA = fixture("tiny-llama-q8_0.gguf");
const tinyB = fixture("tiny-qwen3-q8_0.gguf");
const broken = fixture("bad-missing-tensor.gguf");
const { serial } = needs(smollm2(), tinyA, tinyB, broken);
const smolPath = "path" in smollm2() ? (smollm2() as { path: string }).path : "";
const pathOf = (a: typeof tinyA) => ("path" in a ? a.path : "");
const mib = (n: number) => (n / 2 ** 20).toFixed(1);

test("keep_alive values: Go durations, seconds, negative = forever, 0; env defaults; bad values name the field", (t) => {
  t.is(parseDuration("10m"), 600_000);
  t.is(parseDuration("1h30m"), 5_400_000);
  t.is(parseDuration("300ms"), 300);
  t.is(parseDuration("1.5h"), 5_400_000);
  t.is(parseDuration("2m3.5s"), 123_500);
  t.is(parseDuration("0"), 0);
  t.is(parseDuration("ten minutes"), undefined);
  t.is(keepAliveMs(30), 30_000);
  t.is(keepAliveMs("30"), 30_000);
  t.is(keepAliveMs(0), 0);
  t.is(keepAliveMs("0s"), 0);
  t.is(keepAliveMs(-1), Infinity);
  t.is(keepAliveMs("-5m"), Infinity);
  t.is(defaultKeepAliveMs({}), 300_000);
  t.is(defaultKeepAliveMs({ OLLAMA_KEEP_ALIVE: "1h" }), 3_600_000);
  t.is(defaultKeepAliveMs({ OLLAMA_KEEP_ALIVE: "1h", WICK_KEEP_ALIVE: "-1" }), Infinity);
  t.throws(() => keepAliveMs("soon"), { message: /Invalid keep_alive "soon": expected a duration/ });
  t.throws(() => defaultKeepAliveMs({ WICK_KEEP_ALIVE: "x" }), { message: /WICK_KEEP_ALIVE/ });
});

// First in this process: the allocator has not been warmed by other models, so RSS reads true.
gemma.serial("keep_alive 0 gives the model's memory back: the process's RSS drops by more than its weights' file", async (t) => {
  const s = await startStoreServer();
  try {
    await s.ollama.create({ model: "gemma", modelfile: `FROM ${gemma.path}` } as never);
    const size = (await s.ollama.list()).models[0].size;
    const before = process.memoryUsage().rss;
    const g = await s.ollama.generate({ model: "gemma", prompt: "Hello", options: { num_predict: 4 } });
    t.is(g.eval_count, 4);
    const loaded = process.memoryUsage().rss;
    const r = await s.ollama.generate({ model: "gemma", prompt: "", keep_alive: 0 });
    t.is(r.done_reason, "unload");
    t.deepEqual((await s.ollama.ps()).models, []);
    const after = process.memoryUsage().rss;
    t.log(`gemma-3-270m (${mib(size)} MiB file) RSS: ${mib(before)} MiB before, ${mib(loaded)} MiB loaded, ${mib(after)} MiB after keep_alive 0 (−${mib(loaded - after)} MiB)`);
    t.true(loaded - before > size * 0.8, "loading took about the file's size");
    t.true(loaded - after > size * 0.8, "and unloading gave it back");
  } finally {
    await s.close();
  }
});

serial("--max-loaded-models 1: the least recently used idle model is unloaded to make room; concurrent requests share one load", async (t) => {
  const s = await startStoreServer({ maxLoaded: 1 });
  try {
    for (const [name, file] of [
      ["a", tinyA],
      ["b", tinyB],
    ] as const) {
      t.is((await send(`${s.url}/api/create`, { model: name, from: pathOf(file), stream: false })).status, 200);
    }
    const gen = (model: string) => s.ollama.generate({ model, prompt: "hi", options: { num_predict: 2 } });
    await gen("a");
    t.deepEqual(
      (await s.ollama.ps()).models.map((m) => m.name),
      ["a:latest"],
    );
    await gen("b");
    t.deepEqual(
      (await s.ollama.ps()).models.map((m) => m.name),
      ["b:latest"],
      "a was evicted",
    );
    const before = s.loads();
    const all = await Promise.all([gen("a"), gen("a"), gen("a"), gen("a")]);
    t.true(all.every((r) => r.eval_count === 2));
    t.is(s.loads(), before + 1, "four requests, one load");
    t.deepEqual(
      (await s.ollama.ps()).models.map((m) => m.name),
      ["a:latest"],
    );
  } finally {
    await s.close();
  }
});

serial("a model with sequences running is never unloaded: keep_alive 0 and an eviction both wait until it is idle", async (t) => {
  const s = await startStoreServer({ maxLoaded: 1 });
  try {
    await send(`${s.url}/api/create`, { model: "smol", from: smolPath, stream: false });
    await send(`${s.url}/api/create`, { model: "a", from: pathOf(tinyA), stream: false });
    const long = { model: "smol", prompt: "Tell me a long story.", stream: true, options: { num_predict: 48, temperature: 0 } };
    // keep_alive 0 while a stream runs: answered at once, applied when the stream ends.
    const running = send(`${s.url}/api/generate`, long);
    await waitFor(() => (s.registry.get("smol:latest")?.engine.metrics().running ?? 0) > 0, 30_000);
    const unload = await s.ollama.generate({ model: "smol", prompt: "", keep_alive: 0 });
    t.is(unload.done_reason, "unload");
    t.truthy(s.registry.get("smol:latest"), "still loaded while its sequence runs");
    const lines = await ndjson(await running);
    t.like(lines.at(-1), { done: true, done_reason: "length", eval_count: 48 });
    t.true(lines.every((l) => !("error" in l)));
    t.true((await waitFor(() => !s.registry.get("smol:latest"), 5000)) >= 0, "unloaded once idle");

    // An eviction (max 1 loaded) waits for the running stream instead of cutting it.
    const stream = send(`${s.url}/api/generate`, { ...long, keep_alive: -1 });
    await waitFor(() => (s.registry.get("smol:latest")?.engine.metrics().running ?? 0) > 0, 30_000);
    let streamEnded = 0;
    const streamed = stream.then(async (r) => {
      const l = await ndjson(r);
      streamEnded = performance.now();
      return l;
    });
    const other = await s.ollama.generate({ model: "a", prompt: "hi", options: { num_predict: 2 } });
    const otherDone = performance.now();
    const l2 = await streamed;
    t.like(l2.at(-1), { done: true, eval_count: 48 }, "the stream ran to its end");
    t.is(other.eval_count, 2);
    t.true(streamEnded > 0 && streamEnded <= otherDone, "the other model loaded only after the stream finished");
    t.deepEqual(
      (await s.ollama.ps()).models.map((m) => m.name),
      ["a:latest"],
    );
  } finally {
    await s.close();
  }
});

serial("a model that fails to load fails its own requests (500, both APIs), is retried, and the server keeps serving", async (t) => {
  const s = await startStoreServer();
  try {
    t.is((await send(`${s.url}/api/create`, { model: "broken", from: pathOf(broken), stream: false })).status, 200);
    t.is((await send(`${s.url}/api/create`, { model: "a", from: pathOf(tinyA), stream: false })).status, 200);
    const native = await send(`${s.url}/api/chat`, { model: "broken", messages: [{ role: "user", content: "hi" }] });
    t.is(native.status, 500);
    const body = await native.json();
    t.deepEqual(Object.keys(body), ["error"]);
    t.regex(body.error, /tensor|missing|load/i);
    t.log(body.error);
    const openai = await send(`${s.url}/v1/chat/completions`, { model: "broken", messages: [{ role: "user", content: "hi" }] });
    t.is(openai.status, 500);
    t.is((await openai.json()).error.code, "model_load_failed");
    t.is(s.loads(), 2, "a failed load is not remembered as loaded: the next request tries again");
    t.deepEqual((await s.ollama.ps()).models, []);
    const ok = await s.ollama.generate({ model: "a", prompt: "hi", options: { num_predict: 2 } });
    t.is(ok.eval_count, 2);
  } finally {
    await s.close();
  }
});

serial("with a -m model, store names reach their own models and any other name reaches the -m model", async (t) => {
  const s = await startStoreServer();
  try {
    await send(`${s.url}/api/create`, { model: "qwen", from: pathOf(tinyB), stream: false });
    s.models.setDefault({ path: pathOf(tinyA) });
    await s.models.loadDefault();
    const hi = [{ role: "user", content: "hi" }];
    const chat = async (model: string) => (await send(`${s.url}/v1/chat/completions`, { model, messages: hi, max_tokens: 2 })).json();
    t.is((await chat("gpt-4o")).model, "tiny-llama-q8_0", "an unknown name: the -m model");
    t.is((await chat("meta-llama/Llama-3.2-1B")).model, "tiny-llama-q8_0", "a hub-looking name the store lacks: the -m model");
    t.is((await chat("qwen")).model, "qwen:latest", "a store name: its own model, loaded on demand");
    t.is((await s.ollama.generate({ model: "anything", prompt: "hi", options: { num_predict: 1 } })).model, "anything", "Ollama echoes the name asked for");
    t.deepEqual((await s.ollama.ps()).models.map((m) => m.name).sort(), ["qwen:latest", "tiny-llama-q8_0"]);
    // keep_alive 0 unloads the -m model too; the next request loads it again.
    await s.ollama.generate({ model: "tiny-llama-q8_0", prompt: "", keep_alive: 0 });
    t.deepEqual(
      (await s.ollama.ps()).models.map((m) => m.name),
      ["qwen:latest"],
    );
    t.is((await chat("gpt-4o")).model, "tiny-llama-q8_0");
    t.is((await s.ollama.show({ model: "tiny-llama-q8_0" })).details.family, "llama");
  } finally {
    await s.close();
  }
});

serial("the memory budget: a model that does not fit in free RAM first evicts idle models, least recently used first", async (t) => {
  // Free RAM as a machine with room for two of these models would report it.
  let limited = false;
  const s = await startStoreServer({ freeMemory: () => (limited && s.registry.list().length >= 2 ? 0 : Number.MAX_SAFE_INTEGER) });
  try {
    for (const [name, file] of [
      ["a", tinyA],
      ["b", tinyB],
      ["c", tinyA],
    ] as const)
      await send(`${s.url}/api/create`, { model: name, from: pathOf(file), stream: false });
    const gen = (model: string) => s.ollama.generate({ model, prompt: "hi", options: { num_predict: 1 } });
    await gen("a");
    await gen("b");
    await gen("a"); // b is now the least recently used
    limited = true;
    await gen("c");
    t.deepEqual((await s.ollama.ps()).models.map((m) => m.name).sort(), ["a:latest", "c:latest"], "b made way, a stayed");
  } finally {
    await s.close();
  }
});
