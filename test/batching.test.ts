/**
 * Continuous batching must not change results: each of 16 concurrent greedy requests (different
 * prompts and lengths, some longer than one prefill chunk) gets exactly the tokens it gets alone.
 */
import { Engine, type EngineEvent, type LoadOptions } from "../ts/engine/index.ts";
import { fixture, needs, smollm2 } from "./helpers/assets.ts";

async function ids(gen: AsyncGenerator<EngineEvent>): Promise<number[]> {
  const out: number[] = [];
  for await (const ev of gen) if (ev.type === "token") out.push(...ev.ids);
  return out;
}

/** 16 prompts from 3 to ~330 tokens: chunked prefill (chunk 64 here) meets running decodes. */
function prompts(engine: Engine): number[][] {
  const words = "the quick brown fox jumps over a lazy dog while seven wizards quietly judge boxing matches".split(" ");
  return Array.from({ length: 16 }, (_, i) => {
    const n = 3 + ((i * 37) % 17) * (i % 3 === 0 ? 20 : 2);
    const text = Array.from({ length: n }, (_, j) => words[(i * 7 + j * 3) % words.length]).join(" ");
    return engine.tokenize(text);
  });
}

const cases: [string, ReturnType<typeof fixture>, Partial<LoadOptions>][] = [
  ["SmolLM2-135M Q4_1", smollm2(), {}],
  ["tiny lfm2 Q8_0", fixture("tiny-lfm2-q8_0.gguf"), {}],
  // MoE: tokens of different requests routed to experts together in one step.
  ["tiny lfm2moe Q8_0 (8 experts top-2, 2 dense layers first)", fixture("tiny-lfm2moe-e8-lead2-q8_0.gguf"), {}],
  // Quantized KV caches (their attention reads every row the same way, alone or batched).
  ["SmolLM2-135M Q4_1, q8_0 keys / q4_0 values", smollm2(), { cacheTypeK: "q8_0", cacheTypeV: "q4_0" }],
  ["tiny lfm2 Q4_K, q4_0 keys and values", fixture("tiny-lfm2-q4_k.gguf"), { cacheTypeK: "q4_0", cacheTypeV: "q4_0" }],
];
for (const [name, asset, cache] of cases) {
  const model = needs(asset);
  model.serial(`${name}: 16 concurrent greedy requests equal their solo runs`, async (t) => {
    const modelPath = model.path!;
    const engine = await Engine.load({ modelPath, contextSize: 1024, maxSequences: 16, prefillChunk: 64, stepTokens: 128, ...cache });
    try {
      const ps = prompts(engine);
      const opts = (p: number[]) => ({ promptTokens: p, maxTokens: 12, temperature: 0, ignoreEos: true });
      const alone: number[][] = [];
      for (const p of ps) alone.push(await ids(engine.generate(opts(p))));
      const stepsAlone = engine.metrics().stepsTotal;
      // Submitted while paused, so all sixteen share the schedule however fast the model is.
      engine.pause();
      const pending = ps.map((p) => ids(engine.generate(opts(p))));
      engine.resume();
      const together = await Promise.all(pending);
      const stepsTogether = engine.metrics().stepsTotal - stepsAlone;
      t.log(`prompt lengths: ${ps.map((p) => p.length).join(", ")}; steps alone ${stepsAlone}, together ${stepsTogether}`);
      t.true(stepsTogether * 4 < stepsAlone, "batched: far fewer steps than one request at a time");
      for (let i = 0; i < ps.length; i++) t.deepEqual(together[i], alone[i], `request ${i} (${ps[i].length} prompt tokens)`);
    } finally {
      await engine.unload();
    }
  });
}
