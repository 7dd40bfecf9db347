/**
 * Gemma 3's local layers attend to the last `sliding_window` (512) positions only. On a prompt
 * past the window, the real Gemma3-270M must continue as llama.cpp does; attending to the
 * whole context instead derails it from the first token.
 */
import { Engine } from "../ts/engine/index.ts";
import { needs, realModel } from "./helpers/assets.ts";
import { llamaGreedy, referenceLlama, withBos } from "./helpers/llama.ts";

const gemma = needs(realModel("gemma3-270m"));

gemma.test("a prompt past the sliding window continues as in llama.cpp", async (t) => {
  const modelPath = gemma.path!;
  const llama = await referenceLlama();
  const ref = await llama.loadModel({ modelPath });
  const text = Array.from({ length: 160 }, (_, i) => `item ${i} is ${["red", "blue", "green"][i % 3]}.`).join(" ") + " The color of item 7 is";
  const prompt = withBos(ref, ref.tokenize(text, false));
  t.true(prompt.length > 1024, `prompt of ${prompt.length} tokens, twice the 512 window`);
  // Two threads, as this reference was taken with.
  const expected = await llamaGreedy(ref, prompt, 4, 2048, 2);
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
