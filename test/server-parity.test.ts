/**
 * /v1/completions at temperature 0 returns exactly llama.cpp's greedy text for the same
 * prompt, on a synthetic fixture (random weights, a real tokenizer): the HTTP path adds
 * nothing and drops nothing between the prompt, the engine and the text. llama.cpp is the
 * prebuilt CPU build inside node-llama-cpp.
 */
import test from "ava";
import type { Llama, LlamaModel, Token } from "node-llama-cpp";
import type OpenAI from "openai";
import { fixture, needs } from "./helpers/assets.ts";
import { inContext, referenceLlama, withBos } from "./helpers/llama.ts";
import { serveModel } from "./helpers/server.ts";

const tinyLlama = needs(fixture("tiny-llama-q8_0.gguf"));
const N = 32;
const PROMPTS = ["Hello", "The quick brown fox jumps over the lazy dog.", "In 1492, Columbus sailed", "def fib(n):\n    return"];

const served = serveModel(tinyLlama.path, { contextSize: 256 });
let llama: Llama;
let reference: LlamaModel;

test.before(async () => {
  if (!tinyLlama.path) return;
  llama = await referenceLlama();
  reference = await llama.loadModel({ modelPath: tinyLlama.path });
});
test.after.always(async () => {
  await reference?.dispose();
  await llama?.dispose();
});

interface Greedy {
  promptTokens: Token[];
  ids: number[];
  /** llama.cpp's top-1 minus top-2 probability at each step: how close each choice was. */
  margins: number[];
  text: string;
}

/** llama.cpp: the prompt with BOS as the vocabulary asks, then N greedy tokens (end tokens included, as ignore_eos). */
async function llamaCppGreedy(prompt: string): Promise<Greedy> {
  const promptTokens = withBos(reference, reference.tokenize(prompt, true));
  const out: Token[] = [];
  const margins: number[] = [];
  await inContext(reference, 256, async (seq) => {
    for await (const step of seq.evaluateWithMetadata(promptTokens, { probabilities: true }, { temperature: 0 })) {
      out.push(step.token);
      const [p1 = 0, p2 = 0] = [...step.probabilities.values()].sort((a, b) => b - a);
      margins.push(p1 - p2);
      if (out.length >= N) break;
    }
  });
  return { promptTokens, ids: out, margins, text: reference.detokenize(out, false, promptTokens) };
}

/** Wick's engine directly, on the same prompt ids: tells a server-path bug from an engine difference. */
async function engineGreedy(promptTokens: number[]): Promise<{ ids: number[]; text: string }> {
  const ids: number[] = [];
  let text = "";
  for await (const ev of served.engine.generate({ promptTokens, maxTokens: N, temperature: 0, ignoreEos: true })) {
    if (ev.type === "token") {
      ids.push(...ev.ids);
      text += ev.text;
    }
  }
  return { ids, text };
}

for (const prompt of PROMPTS) {
  tinyLlama.serial(`completions at temperature 0 equal llama.cpp's greedy text: ${JSON.stringify(prompt)}`, async (t) => {
    const want = await llamaCppGreedy(prompt);
    const got = await served.client.completions.create({ model: "tiny", prompt, temperature: 0, max_tokens: N, ignore_eos: true } as OpenAI.CompletionCreateParamsNonStreaming);
    t.is(got.usage!.prompt_tokens, want.promptTokens.length, "same prompt tokens");
    t.is(got.usage!.completion_tokens, N);
    const direct = await engineGreedy(want.promptTokens);
    t.is(got.choices[0].text, direct.text, "the HTTP text is exactly the engine's text");
    const at = direct.ids.findIndex((id, i) => id !== want.ids[i]);
    t.is(at, -1, `the engine's greedy ids leave llama.cpp's at step ${at} (llama.cpp's top-1 margin there: ${want.margins[at]?.toExponential(2)})`);
    t.is(got.choices[0].text, want.text);
    t.log(JSON.stringify(want.text));
  });
}
