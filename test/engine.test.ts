/**
 * The engine through its public TS API: load failures, memory, generation, stop strings,
 * cancellation and concurrency, on real files (SmolLM2 from PyPI, synthetic fixtures).
 */
import test from "ava";
import { execFileSync } from "node:child_process";
import { readdirSync, statSync } from "node:fs";
import path from "node:path";
import { Engine, inspectModel, WickError, type EngineEvent } from "../ts/engine/index.ts";
import { fixture, fixturesDir, needs, repoRoot, smollm2 } from "./helpers/assets.ts";

async function collect(gen: AsyncGenerator<EngineEvent>) {
  let text = "";
  const ids: number[] = [];
  let done: Extract<EngineEvent, { type: "done" }> | undefined;
  for await (const ev of gen) {
    if (ev.type === "token") {
      text += ev.text;
      ids.push(...ev.ids);
    } else done = ev;
  }
  return { text, ids, done: done! };
}

const tinyLlama = needs(fixture("tiny-llama-q8_0.gguf"));

tinyLlama.test("every malformed model file fails to load with a clear error, and the process keeps working", async (t) => {
  const bad = readdirSync(fixturesDir).filter((f) => f.startsWith("bad-") && f.endsWith(".gguf"));
  t.true(bad.length >= 5, `expected the broken fixtures in ${fixturesDir}`);
  for (const f of bad) {
    const err = await t.throwsAsync(Engine.load({ modelPath: path.join(fixturesDir, f) }), { instanceOf: WickError });
    t.true(["MODEL_LOAD_FAILED", "UNSUPPORTED_ARCHITECTURE"].includes(err.code), `${f}: ${err.code}`);
    t.log(`${f}: ${err.code}: ${err.message}`);
  }
  const missing = await t.throwsAsync(Engine.load({ modelPath: path.join(fixturesDir, "nope.gguf") }), { instanceOf: WickError });
  t.regex(missing.message, /cannot open/);
  const ok = await Engine.load({ modelPath: tinyLlama.path! });
  t.is(ok.info().architecture, "llama");
  await ok.unload();
});

tinyLlama.test("async failures reject with the engine's code on the error, not in its message", async (t) => {
  const missing = path.join(fixturesDir, "nope.gguf");
  const load = await t.throwsAsync(Engine.load({ modelPath: missing }), { instanceOf: WickError });
  t.is(load.code, "MODEL_LOAD_FAILED");
  t.notRegex(load.message, /^[A-Z_]+: /);
  const inspect = await t.throwsAsync(inspectModel(missing), { instanceOf: WickError });
  t.is(inspect.code, "MODEL_LOAD_FAILED");
});

tinyLlama.test("the threads option: validated, and fixed process-wide by the first load", async (t) => {
  const tiny = tinyLlama.path!;
  const zero = await t.throwsAsync(Engine.load({ modelPath: tiny, threads: 0 }), { instanceOf: WickError });
  t.is(zero.code, "INVALID_REQUEST");
  const first = await Engine.load({ modelPath: tiny, vocabOnly: true });
  const n = first.info().threads;
  t.true(n >= 1);
  const same = await Engine.load({ modelPath: tiny, vocabOnly: true, threads: n });
  t.is(same.info().threads, n);
  const other = await t.throwsAsync(Engine.load({ modelPath: tiny, vocabOnly: true, threads: n + 1 }), { instanceOf: WickError });
  t.is(other.code, "INVALID_REQUEST");
  t.regex(other.message, new RegExp(`already runs ${n} threads`));
  await Promise.all([first.unload(), same.unload()]);
  // A fresh process: the first load's option sets the size, and generation runs on it.
  const script = `
    import { Engine } from ${JSON.stringify(path.join(repoRoot, "ts/engine/index.ts"))};
    const e = await Engine.load({ modelPath: ${JSON.stringify(tiny)}, threads: 3 });
    let n = 0;
    for await (const ev of e.generate({ promptTokens: [1, 2, 3], maxTokens: 4, ignoreEos: true })) if (ev.type === "token") n += ev.ids.length;
    console.log(JSON.stringify({ threads: e.info().threads, tokens: n }));
    await e.unload();`;
  const out = execFileSync(process.execPath, ["--import=tsx", "--input-type=module", "-e", script], {
    cwd: repoRoot,
    encoding: "utf8",
    env: { ...process.env, WICK_THREADS: "1" },
  });
  t.deepEqual(JSON.parse(out.trim().split("\n").at(-1)!), { threads: 3, tokens: 4 });
});

const { path: smol, serial: withSmol } = needs(smollm2());

let engine: Engine | undefined;
test.before(async () => {
  if (smol) engine = await Engine.load({ modelPath: smol, contextSize: 1024, maxSequences: 4 });
});
test.after.always(async () => engine?.unload());

withSmol("weights are not held twice: RSS after load stays within file size + 100 MiB", async (t) => {
  const before = process.memoryUsage().rss;
  const e = await Engine.load({ modelPath: smol!, contextSize: 1024 });
  const after = process.memoryUsage().rss;
  const file = statSync(smol!).size;
  const grew = after - before;
  t.log(`RSS grew ${(grew / 2 ** 20).toFixed(1)} MiB loading a ${(file / 2 ** 20).toFixed(1)} MiB file (the KV pool is mapped, not touched, at load)`);
  t.true(grew <= file + 100 * 2 ** 20);
  await e.unload();
});

withSmol("greedy generation is deterministic and reports usage", async (t) => {
  const prompt = engine!.tokenize("The capital of France is");
  const a = await collect(engine!.generate({ promptTokens: prompt, maxTokens: 16, temperature: 0, ignoreEos: true }));
  const b = await collect(engine!.generate({ promptTokens: prompt, maxTokens: 16, temperature: 0, ignoreEos: true }));
  t.deepEqual(a.ids, b.ids);
  t.is(a.ids.length, 16);
  t.is(a.text, engine!.detokenize(a.ids));
  t.is(a.done.finishReason, "length");
  t.deepEqual(a.done.usage, { promptTokens: prompt.length, completionTokens: 16, cachedTokens: 0 });
});

withSmol("same seed gives the same sample, another seed another", async (t) => {
  const prompt = engine!.tokenize("Once upon a time");
  const run = (seed: number) => collect(engine!.generate({ promptTokens: prompt, maxTokens: 24, temperature: 1, seed, ignoreEos: true }));
  const [a, b, c] = [await run(42), await run(42), await run(43)];
  t.deepEqual(a.ids, b.ids);
  t.notDeepEqual(a.ids, c.ids);
});

withSmol("stop strings end generation and are never emitted", async (t) => {
  const prompt = engine!.tokenize("List the numbers from one to twenty: one, two,");
  const full = await collect(engine!.generate({ promptTokens: prompt, maxTokens: 24, temperature: 0, ignoreEos: true }));
  const stop = full.text.slice(6, 9);
  t.true(stop.length === 3, `generated text too short: ${JSON.stringify(full.text)}`);
  const cut = await collect(engine!.generate({ promptTokens: prompt, maxTokens: 24, temperature: 0, stop: [stop], ignoreEos: true }));
  t.is(cut.text, full.text.slice(0, full.text.indexOf(stop)));
  t.is(cut.done.finishReason, "stop");
});

withSmol("cancelling mid-stream frees the sequence within 100 ms", async (t) => {
  const ac = new AbortController();
  const prompt = engine!.tokenize("Write a long story about a lighthouse keeper.");
  let n = 0;
  let finish = "";
  for await (const ev of engine!.generate({ promptTokens: prompt, maxTokens: 500, temperature: 0, ignoreEos: true }, ac.signal)) {
    if (ev.type === "token" && ++n === 3) ac.abort();
    if (ev.type === "done") finish = ev.finishReason;
  }
  const t0 = Date.now();
  while (engine!.metrics().running > 0 && Date.now() - t0 < 1000) await new Promise((r) => setTimeout(r, 5));
  const took = Date.now() - t0;
  t.log(`running=0 after ${took} ms; finish=${finish}`);
  t.is(engine!.metrics().running, 0);
  t.true(took <= 100);
  t.is(finish, "cancelled");
});

withSmol("concurrent requests each get the tokens they get alone", async (t) => {
  const prompts = ["Hello, my name is", "The best way to learn Rust is", "1, 2, 3,", "def fibonacci(n):"].map((p) => engine!.tokenize(p));
  const gen = (p: number[]) => collect(engine!.generate({ promptTokens: p, maxTokens: 20, temperature: 0, ignoreEos: true }));
  const alone = [];
  for (const p of prompts) alone.push((await gen(p)).ids);
  const together = await Promise.all(prompts.map(gen));
  t.deepEqual(
    together.map((r) => r.ids),
    alone,
  );
});

withSmol("bad requests are rejected before generation with typed errors", (t) => {
  const ctx = engine!.info().contextSize;
  const long = new Array(ctx + 5).fill(1);
  t.is(t.throws(() => engine!.generate({ promptTokens: long }), { instanceOf: WickError }).code, "CONTEXT_LENGTH_EXCEEDED");
  t.is(t.throws(() => engine!.generate({ promptTokens: [1, 2], maxTokens: ctx }), { instanceOf: WickError }).code, "CONTEXT_LENGTH_EXCEEDED");
  t.is(t.throws(() => engine!.generate({ promptTokens: [] }), { instanceOf: WickError }).code, "INVALID_REQUEST");
  t.is(t.throws(() => engine!.generate({ promptTokens: [10_000_000] }), { instanceOf: WickError }).code, "INVALID_REQUEST");
  t.is(t.throws(() => engine!.generate({ promptTokens: [1], topP: 0 }), { instanceOf: WickError }).code, "INVALID_REQUEST");
});

tinyLlama.test("pause holds the scheduler: submissions queue, a cancel still ends its request, resume runs the rest unchanged", async (t) => {
  const e = await Engine.load({ modelPath: tinyLlama.path!, maxSequences: 4 });
  try {
    const req = { promptTokens: [5, 6, 7, 8, 9], maxTokens: 16, temperature: 0, ignoreEos: true };
    const solo = await collect(e.generate(req));
    const steps = e.metrics().stepsTotal;
    e.pause();
    const kept = collect(e.generate(req));
    const ac = new AbortController();
    const dropped = collect(e.generate(req, ac.signal));
    await new Promise((r) => setTimeout(r, 150));
    t.like(e.metrics(), { running: 0, waiting: 2, stepsTotal: steps }, "nothing ran while paused");
    ac.abort();
    t.is((await dropped).done.finishReason, "cancelled", "a cancel is served while paused");
    t.is(e.metrics().waiting, 1);
    e.resume();
    const out = await kept;
    t.deepEqual(out.ids, solo.ids);
    t.is(out.done.finishReason, "length");
  } finally {
    await e.unload();
  }
  t.is(t.throws(() => e.pause(), { instanceOf: WickError }).code, "ENGINE_STOPPED");
});
