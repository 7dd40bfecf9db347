/**
 * Quantized KV caches (`--cache-type-k/-v q8_0|q4_0`):
 * - quantized keys with f16 values are what llama.cpp computes with flash attention off (the
 *   prebuilt build inside node-llama-cpp, `experimentalKvCacheKeyType`): greedy tokens equal;
 * - q8_0 keys and values keep the greedy text of an f16 cache on SmolLM2 and Gemma3; q4_0 keys
 *   and values stay within the tolerance stated below (llama.cpp reads quantized values only
 *   with flash attention, in another order: no token-for-token peer);
 * - the pool sized in bytes holds ~1.9× (q8_0) and ~3.6× (q4_0) the tokens of f16.
 */
import test from "ava";
import type { Llama } from "node-llama-cpp";
import { Engine, type LoadOptions } from "../ts/engine/index.ts";
import { fixture, needs, realModel, writeFixtures, type Asset } from "./helpers/assets.ts";
import { llamaGreedy, referenceLlama, withBos } from "./helpers/llama.ts";

const PROMPTS = ["Hello", "The quick brown fox jumps over the lazy dog.", "In 1492, Columbus sailed", "def fib(n):\n    return", "Wick serves models: éàü 日本語 🙂"];
const N = 64;
// Heads of 64 (the 64-wide fixtures have heads of 16, off the 32-value blocks).
const FIXTURES = ["tiny-llama-q4_k.gguf", "tiny-lfm2-q4_k.gguf"];
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

/**
 * Where Wick's greedy tokens part from llama.cpp's, by (model, key type, prompt). One: Gemma3
 * with q8_0 keys on this prompt has next-token probabilities 0.036 from llama.cpp's from the
 * first token (every other prompt, and this one with q4_0 keys, agree to 1e-5). This prompt is
 * hypersensitive: nudging every key by one ulp before it is quantized moves Wick's own
 * probabilities here by 0.02 (and not on "Hello"), so ulp-level differences upstream of the
 * cache, which f16 keys round away, are the likely cause; not traced further.
 */
const KNOWN_DEPARTURES: Record<string, number> = { "Gemma3-270M Q4_K_M q8_0 In 1492, Columbus sailed": 11 };

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
            const known = KNOWN_DEPARTURES[`${label} ${k} ${text}`];
            if (known !== undefined) t.is(at, known, `${JSON.stringify(text)}: the known departure moved`);
            else t.is(at, -1, `${JSON.stringify(text)}: greedy ids leave llama.cpp's at step ${at}`);
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

/**
 * Next-token agreement with an f16 cache: along each prompt's f16 greedy text, every step
 * fed the same tokens to both caches (teacher-forced, prefix cache off so both compute the
 * same way), how often the quantized cache picks f16's next token, and by how much that
 * token's probability moves.
 */
async function agreement(where: string, types: Partial<LoadOptions>) {
  const forced = async (opts: Partial<LoadOptions>, texts: number[][]) =>
    withEngine(where, { prefixCache: false, ...opts }, async (e) => {
      const out = [];
      for (const [i, text] of PROMPTS.entries()) {
        const prompt = e.tokenize(text);
        for (let s = 0; s < N; s++) out.push(await greedy(e, [...prompt, ...texts[i].slice(0, s)], 1));
      }
      return out;
    });
  const texts = await withEngine(where, {}, async (e) => Promise.all(PROMPTS.map(async (p) => (await greedy(e, e.tokenize(p))).ids)));
  const [base, quant] = [await forced({}, texts), await forced(types, texts)];
  let [same, sum, worst] = [0, 0, 0];
  base.forEach((b, i) => {
    if (quant[i].ids[0] !== b.ids[0]) return;
    same++;
    const dp = Math.abs(Math.exp(quant[i].logprobs[0]) - Math.exp(b.logprobs[0]));
    [sum, worst] = [sum + dp, Math.max(worst, dp)];
  });
  return { rate: same / base.length, mean: sum / same, worst };
}

/** Stated tolerances (measured on this machine: see the closing note / benches/RESULTS.md). */
const AGREEMENT = { q8_0: 0.93, q4_0: 0.85 } as const;

for (const [name, label] of [
  ["smollm2-135m", "SmolLM2-135M-Instruct Q4_1"],
  ["gemma3-270m", "Gemma3-270M Q4_K_M"],
] as const) {
  const gate = needs(realModel(name));
  for (const ty of ["q8_0", "q4_0"] as const) {
    gate.serial(`${ty} keys and values: next-token agreement with an f16 cache ≥ ${AGREEMENT[ty]}: ${label}`, async (t) => {
      const a = await agreement(gate.path!, { cacheTypeK: ty, cacheTypeV: ty });
      t.log(
        `${label} ${ty}/${ty}: ${(a.rate * 100).toFixed(1)} % of ${PROMPTS.length} × ${N} next tokens agree; |Δp| of the agreed token mean ${a.mean.toExponential(2)}, max ${a.worst.toExponential(2)}`,
      );
      t.true(a.rate >= AGREEMENT[ty], `${a.rate}`);
    });
  }
}

const tiny = needs(fixture("tiny-lfm2-q4_k.gguf"));
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
  t.regex(err.message, /unsupported KV cache type 'q5_1'/);
  // And the engine still serves afterwards in this process.
  await withEngine(modelPath, { cacheTypeK: "q4_0", cacheTypeV: "q8_0" }, async (e) => {
    t.is((await greedy(e, [1, 2, 3], 4)).ids.length, 4);
  });
});
