// greedy-ref.mjs's reference file, from a running llama-server instead of node-llama-cpp's
// prebuilt: for a llama.cpp built here for another machine (e.g. aarch64, run under qemu-user),
// whose build node-llama-cpp does not ship.
//
//   node scripts/greedy-ref-server.mjs <server-url> <model.gguf> <out.json> [--n 64] [--probs 8] [--top 10]
//
// The server must have been started on <model.gguf> with flash attention off (`-fa off`, as
// greedy-ref.mjs's default). Same prompts as greedy-ref.mjs, tokenized by the server with BOS
// when the model asks for it; greedy ids from /completion at temperature 0, and for the first
// `probs` steps the `top` most likely next tokens with their probabilities (llama-server's
// n_probs: the softmax of the raw logits, as node-llama-cpp's).
import { writeFileSync } from "node:fs";
import { PROMPTS } from "./greedy-ref-prompts.mjs";

const args = process.argv.slice(2);
const opt = (name, dflt) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? args[i + 1] : dflt;
};
const [url, modelPath, outPath] = args.filter((a, i) => !a.startsWith("--") && !(i > 0 && args[i - 1].startsWith("--")));
if (!url || !modelPath || !outPath) {
  console.error("usage: greedy-ref-server.mjs <server-url> <model.gguf> <out.json> [--n 64] [--probs 8] [--top 10]");
  process.exit(2);
}
const n = Number(opt("n", 64));
const nProbs = Number(opt("probs", 8));
const nTop = Number(opt("top", 10));

async function post(path, body) {
  const res = await fetch(`${url}${path}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  if (!res.ok) throw new Error(`${path}: ${res.status} ${await res.text()}`);
  return res.json();
}

async function complete(prompt, nPredict, withProbs) {
  const body = { prompt, n_predict: nPredict, temperature: 0, cache_prompt: false, return_tokens: true, n_probs: withProbs ? nTop : 0 };
  const out = await post("/completion", body);
  const tokens = out.tokens ?? [];
  const steps = withProbs ? (out.completion_probabilities ?? []).map((s) => s.top_logprobs.map((p) => [p.id, Math.exp(p.logprob)])) : [];
  return { tokens, steps };
}

const results = [];
for (const text of PROMPTS) {
  const { tokens: prompt } = await post("/tokenize", { content: text, add_special: true });
  const greedy = await complete(prompt, n, false);
  const probs = nProbs > 0 ? await complete(prompt, nProbs, true) : { tokens: [], steps: [] };
  results.push({ text, prompt, tokens: greedy.tokens, probTokens: probs.tokens, steps: probs.steps });
}
writeFileSync(outPath, JSON.stringify({ model: modelPath, flashAttention: "false", n, results }, null, 1));
console.log(`${outPath}: ${results.length} prompts`);
