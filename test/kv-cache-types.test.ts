/**
 * Quantized KV caches (`--cache-type-k/-v q8_0|q4_0`):
 * - quantized keys with f16 values are what llama.cpp computes with flash attention off (the
 *   prebuilt build inside node-llama-cpp, `experimentalKvCacheKeyType`): greedy tokens equal;
 * - q8_0 keys and values keep the greedy text of an f16 cache on SmolLM2 and Gemma3; q4_0 keys
 *   and values stay within the tolerance stated below (llama.cpp reads quantized values only
 *   with flash attention, in another order: no token-for-token peer);
 * - the pool sized in bytes holds ~1.9× (q8_0) and ~3.6× (q4_0) the tokens of f16.
 */
import path from "node:path";
import test from "ava";
import type { Llama } from "node-llama-cpp";
import { Engine, type LoadOptions } from "../ts/engine/index.ts";
import { fixture, needs, realModel, writeFixtures, type Asset } from "./helpers/assets.ts";
import { llamaGreedy, referenceLlama, withBos } from "./helpers/llama.ts";

const PROMPTS = ["Hello", "The quick brown fox jumps over the lazy dog.", "In 1492, Columbus sailed", "def fib(n):\n    return", "Wick serves models: éàü 日本語 🙂"];
const N = 64;
const FIXTURES = ["tiny-llama-q8_0.gguf", "tiny-lfm2-q8_0.gguf", "tiny-qwen3-q8_0.gguf", "tiny-gemma3-q8_0.gguf"];
writeFixtures(FIXTURES);

let llama: Llama;
test.before(async () => {
  llama = await referenceLlama();
});
test.after.always(async () => llama?.dispose());

async function greedy(engine: Engine, promptTokens: number[], n = N) {
  const ids: number[] = [];
  const logprobs: number[] = [];
  for await (const ev of engine.generate({ promptTokens, maxTokens: n, temperature: 0, topLogprobs: 1, ignoreEos: true })) {
    if (ev.type === "token") {
      ids.push(...ev.ids);
      logprobs.push(...(ev.logprobs ?? []).map((l) => l.logprob));
    }
  }
  return { ids, logprobs };
}

async function withEngine<T>(modelPath: string, opts: Partial<LoadOptions>, body: (e: Engine) => Promise<T>): Promise<T> {
  const engine = await Engine.load({ modelPath, contextSize: 512, ...opts });
  try {
    return await body(engine);
  } finally {
    await engine.unload();
  }
}

/** q4_0's stated tolerance: greedy tokens equal for the first FIRST steps, the chosen token's probability within Q4_PROB_TOL. */
const FIRST = 8;
const Q4_PROB_TOL = 0.05;

const GGML_TYPE = { q8_0: "Q8_0", q4_0: "Q4_0" } as const;

function keyParity(label: string, asset: Asset) {
  const gate = needs(asset);
  for (const k of ["q8_0", "q4_0"] as const) {
    gate.serial(`${k} keys, f16 values: greedy tokens equal llama.cpp's (flash attention off): ${label}`, async (t) => {
      const where = gate.path!;
      const model = await llama.loadModel({ modelPath: where });
      try {
        await withEngine(where, { cacheTypeK: k }, async (engine) => {
          t.is(engine.info().cacheTypeK, k);
          for (const text of PROMPTS) {
            const promptTokens = withBos(model, model.tokenize(text));
            const want = await llamaGreedy(model, promptTokens, N, 512, 1, { experimentalKvCacheKeyType: GGML_TYPE[k] });
            const got = await greedy(engine, promptTokens);
            const at = got.ids.findIndex((id, i) => id !== want[i]);
            t.is(at, -1, `${JSON.stringify(text)}: greedy ids leave llama.cpp's at step ${at}`);
          }
        });
      } finally {
        await model.dispose();
      }
    });
  }
}

for (const f of FIXTURES) keyParity(f, fixture(f));
keyParity("SmolLM2-135M-Instruct Q4_1", realModel("smollm2-135m"));
keyParity("Gemma3-270M Q4_K_M", realModel("gemma3-270m"));

/** Greedy runs of every prompt with an f16 cache and with `types`: tokens and chosen log-probs. */
async function againstF16(where: string, types: Partial<LoadOptions>) {
  const runs = async (opts: Partial<LoadOptions>) =>
    withEngine(where, opts, async (e) => {
      const out = [];
      for (const text of PROMPTS) out.push(await greedy(e, e.tokenize(text)));
      return out;
    });
  return { base: await runs({}), quant: await runs(types) };
}

for (const [name, label] of [
  ["smollm2-135m", "SmolLM2-135M-Instruct Q4_1"],
  ["gemma3-270m", "Gemma3-270M Q4_K_M"],
] as const) {
  const gate = needs(realModel(name));
  gate.serial(`q8_0 keys and values keep the f16 cache's greedy text: ${label}`, async (t) => {
    const { base, quant } = await againstF16(gate.path!, { cacheTypeK: "q8_0", cacheTypeV: "q8_0" });
    base.forEach((b, i) => t.deepEqual(quant[i].ids, b.ids, `${JSON.stringify(PROMPTS[i])}`));
  });
  gate.serial(`q4_0 keys and values: the first ${FIRST} greedy tokens of every prompt equal f16's, their probabilities within ${Q4_PROB_TOL}: ${label}`, async (t) => {
    const { base, quant } = await againstF16(gate.path!, { cacheTypeK: "q4_0", cacheTypeV: "q4_0" });
    let worst = 0;
    base.forEach((b, i) => {
      t.deepEqual(quant[i].ids.slice(0, FIRST), b.ids.slice(0, FIRST), `${JSON.stringify(PROMPTS[i])}`);
      for (let s = 0; s < FIRST; s++) worst = Math.max(worst, Math.abs(Math.exp(quant[i].logprobs[s]) - Math.exp(b.logprobs[s])));
      const same = b.ids.findIndex((id, s) => id !== quant[i].ids[s]);
      t.log(`${path.basename(gate.path!)} ${JSON.stringify(PROMPTS[i])}: equal for ${same === -1 ? N : same} of ${N} tokens`);
    });
    t.log(`max |Δp| of the chosen token over the first ${FIRST} steps: ${worst.toExponential(2)}`);
    t.true(worst <= Q4_PROB_TOL, `|Δp| ${worst}`);
  });
}

const tiny = needs(fixture("tiny-lfm2-q8_0.gguf"));
tiny.serial("the pool sized in bytes holds more tokens with quantized types; bad types are refused", async (t) => {
  const modelPath = tiny.path!;
  const bytes = 8 << 20;
  const tokens = async (cacheTypeK?: string, cacheTypeV?: string) =>
    withEngine(modelPath, { kvCacheMemoryBytes: bytes, cacheTypeK, cacheTypeV }, async (e) => {
      const i = e.info();
      t.true(i.kvTokens * i.kvBytesPerToken <= bytes + 64 * i.kvBytesPerToken, "whole blocks within the budget");
      return i.kvTokens;
    });
  const f16 = await tokens();
  const q8 = await tokens("q8_0", "q8_0");
  const q4 = await tokens("q4_0", "q4_0");
  t.log(`${bytes} bytes hold ${f16} tokens in f16, ${q8} in q8_0, ${q4} in q4_0`);
  t.true(q8 / f16 > 1.8 && q4 / f16 > 3.4, `${f16} → ${q8} → ${q4}`);
  const err = await t.throwsAsync(Engine.load({ modelPath, cacheTypeK: "q5_1" }));
  t.regex(err!.message, /unsupported KV cache type 'q5_1'/);
  // And the engine still serves afterwards in this process.
  await withEngine(modelPath, { cacheTypeK: "q4_0", cacheTypeV: "q8_0" }, async (e) => {
    t.is((await greedy(e, [1, 2, 3], 4)).ids.length, 4);
  });
});
