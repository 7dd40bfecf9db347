// Reference outputs from llama.cpp (the prebuilt CPU build inside node-llama-cpp) for
// comparing Wick's forward passes: greedy token ids and the top next-token probabilities.
//
//   node scripts/greedy-ref.mjs <model.gguf> <out.json> [--n 64] [--probs 8] [--top 10] [--fa off|on|auto] [--threads 1]
//
// Flash attention is off by default: Wick's CPU kernels round as that llama.cpp path does
// (with it on, llama.cpp accumulates attention values in f16).
// One thread by default: ggml's worker threads spin-wait, and on a small shared machine a
// second busy process makes that hundreds of times slower.
//
// Each of the fixed prompts is tokenized by llama.cpp, with BOS prepended when the model asks
// for it (tokenizer.ggml.add_bos_token), as llama.cpp's own tokenize(add_special) does. The
// file lists, per prompt, the prompt ids, `n` greedy ids, and for the first `probs` steps
// the `top` most likely next tokens with their probabilities (softmax of the raw logits).
import { writeFileSync } from "node:fs";
import { getLlama } from "node-llama-cpp";
import { PROMPTS } from "./greedy-ref-prompts.mjs";

const args = process.argv.slice(2);
const opt = (name, dflt) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? args[i + 1] : dflt;
};
const [modelPath, outPath] = args.filter((a, i) => !a.startsWith("--") && !(i > 0 && args[i - 1].startsWith("--")));
if (!modelPath || !outPath) {
  console.error("usage: greedy-ref.mjs <model.gguf> <out.json> [--n 64] [--probs 8] [--top 10] [--fa auto|on|off] [--threads 1]");
  process.exit(2);
}
const n = Number(opt("n", 64));
const nProbs = Number(opt("probs", 8));
const nTop = Number(opt("top", 10));
const fa = { auto: "auto", on: true, off: false }[opt("fa", "off")];
const threads = Number(opt("threads", 1));

const llama = await getLlama({ gpu: false, build: "never", usePrebuiltBinaries: true, skipDownload: true, logLevel: "error" });
const model = await llama.loadModel({ modelPath });

async function run(prompt, withProbs) {
  const ctx = await model.createContext({ contextSize: 512, sequences: 1, flashAttention: fa, threads });
  const seq = ctx.getSequence();
  const tokens = [];
  const steps = [];
  try {
    const gen = withProbs
      ? seq.evaluateWithMetadata(prompt, { probabilities: true }, { temperature: 0 })
      : seq.evaluate(prompt, { temperature: 0 });
    for await (const out of gen) {
      if (withProbs) {
        tokens.push(out.token);
        const top = [...out.probabilities.entries()].sort((a, b) => b[1] - a[1]).slice(0, nTop);
        steps.push(top);
        if (steps.length >= nProbs) break;
      } else {
        tokens.push(out);
        if (tokens.length >= n) break;
      }
    }
  } finally {
    await ctx.dispose();
  }
  return { tokens, steps };
}

const results = [];
for (const text of PROMPTS) {
  const prompt = model.tokenize(text);
  if (model.tokens.shouldPrependBosToken && model.tokens.bos != null) prompt.unshift(model.tokens.bos);
  const greedy = await run(prompt, false);
  const probs = nProbs > 0 ? await run(prompt, true) : { tokens: [], steps: [] };
  results.push({ text, prompt, tokens: greedy.tokens, probTokens: probs.tokens, steps: probs.steps });
}
writeFileSync(outPath, JSON.stringify({ model: modelPath, flashAttention: String(fa), n, results }, null, 1));
await model.dispose();
console.log(`${outPath}: ${results.length} prompts`);
