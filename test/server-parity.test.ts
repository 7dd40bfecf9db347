/**
 * /v1/completions at temperature 0 returns exactly llama.cpp's greedy text for the same
 * prompt, on a synthetic fixture (random weights, a real tokenizer): the HTTP path adds
 * nothing and drops nothing between the prompt, the engine and the text. llama.cpp is the
 * prebuilt CPU build inside node-llama-cpp.
 */
import test from "ava";
import { getLlama, LlamaLogLevel, type Llama, type LlamaModel, type Token } from "node-llama-cpp";
import type { Engine } from "../ts/engine/index.ts";
import { fixture } from "./helpers/assets.ts";
import { loadModel, openaiClient, startServer, type RunningServer } from "./helpers/server.ts";
import type OpenAI from "openai";

const FIXTURE = fixture("tiny-llama-q8_0.gguf");
const N = 32;
const PROMPTS = ["Hello", "The quick brown fox jumps over the lazy dog.", "In 1492, Columbus sailed", "def fib(n):\n    return"];

let llama: Llama;
let reference: LlamaModel;
let engine: Engine;
let server: RunningServer;
let client: OpenAI;

test.before(async () => {
  let registry;
  ({ registry, engine } = await loadModel(FIXTURE, { contextSize: 256 }));
  server = await startServer({ registry });
  client = openaiClient(server.url);
  llama = await getLlama({ gpu: false, build: "never", usePrebuiltBinaries: true, skipDownload: true, logLevel: LlamaLogLevel.error });
  reference = await llama.loadModel({ modelPath: FIXTURE });
});
test.after.always(async () => {
  await server?.close();
  await engine?.unload();
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
  const promptTokens = reference.tokenize(prompt, true);
  const bos = reference.tokens.bos;
  if (reference.tokens.shouldPrependBosToken && bos != null && promptTokens[0] !== bos) promptTokens.unshift(bos);
  // One thread: ggml's workers spin-wait, which starves a second busy process on a small machine.
  const ctx = await reference.createContext({ contextSize: 256, sequences: 1, threads: 1, flashAttention: false });
  const out: Token[] = [];
  const margins: number[] = [];
  try {
    for await (const step of ctx.getSequence().evaluateWithMetadata(promptTokens, { probabilities: true }, { temperature: 0 })) {
      out.push(step.token);
      const [p1 = 0, p2 = 0] = [...step.probabilities.values()].sort((a, b) => b - a);
      margins.push(p1 - p2);
      if (out.length >= N) break;
    }
  } finally {
    await ctx.dispose();
  }
  return { promptTokens, ids: out as number[], margins, text: reference.detokenize(out, false, promptTokens) };
}

/** Wick's engine directly, on the same prompt ids: tells a server-path bug from an engine difference. */
async function engineGreedy(promptTokens: number[]): Promise<{ ids: number[]; text: string }> {
  const ids: number[] = [];
  let text = "";
  for await (const ev of engine.generate({ promptTokens, maxTokens: N, temperature: 0, ignoreEos: true })) {
    if (ev.type === "token") {
      ids.push(...ev.ids);
      text += ev.text;
    }
  }
  return { ids, text };
}

for (const prompt of PROMPTS) {
  test.serial(`completions at temperature 0 equal llama.cpp's greedy text: ${JSON.stringify(prompt)}`, async (t) => {
    const want = await llamaCppGreedy(prompt);
    const got = await client.completions.create({ model: "tiny", prompt, temperature: 0, max_tokens: N, ignore_eos: true } as OpenAI.CompletionCreateParamsNonStreaming);
    t.is(got.usage!.prompt_tokens, want.promptTokens.length, "same prompt tokens");
    t.is(got.usage!.completion_tokens, N);
    const direct = await engineGreedy(want.promptTokens as number[]);
    t.is(got.choices[0]!.text, direct.text, "the HTTP text is exactly the engine's text");
    const at = direct.ids.findIndex((id, i) => id !== want.ids[i]);
    t.is(at, -1, `the engine's greedy ids leave llama.cpp's at step ${at} (llama.cpp's top-1 margin there: ${want.margins[at]?.toExponential(2)})`);
    t.is(got.choices[0]!.text, want.text);
    t.log(JSON.stringify(want.text));
  });
}
