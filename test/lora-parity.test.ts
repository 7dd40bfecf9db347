/**
 * LoRA adapters give llama.cpp's greedy tokens: the fixture writer's adapters for the llama
 * and lfm2 fixtures (attention targets in F16 with r=4, alpha=8; FFN and short-conv targets in
 * F32 with r=8, alpha=4; everything in Q8_0 with r=32, alpha=16) loaded in Wick's engine and
 * in llama-server (`--lora` each, `--lora-init-without-apply`, flash attention off), the same
 * prompt ids, greedy, with per-request adapter scales (llama-server's `lora` field): one
 * adapter at 1 and at 0.5, two together, and all at 0 (the base model).
 */
import { Engine } from "../ts/engine/index.ts";
import { fixture, needs } from "./helpers/assets.ts";
import { llamaServerBin, startLlamaServer } from "./helpers/llama-server.ts";
import { postJson } from "./helpers/server.ts";

const bin = llamaServerBin();
const N = 16;
const KINDS = ["attn-f16", "ffn-f32", "all-q8_0"];
const MIXES: { id: number; scale: number }[][] = [
  [{ id: 0, scale: 1 }],
  [{ id: 1, scale: 1 }],
  [{ id: 2, scale: 1 }],
  [{ id: 0, scale: 0.5 }],
  [
    { id: 0, scale: 1 },
    { id: 1, scale: 0.5 },
  ],
  [],
];

for (const base of ["tiny-llama-q8_0", "tiny-lfm2-q8_0"]) {
  const adapters = KINDS.map((k) => fixture(`lora-${base}-${k}.gguf`));
  const { serial, path: model } = needs(fixture(`${base}.gguf`), ...adapters, bin);
  serial(`greedy tokens with LoRA adapters equal llama-server --lora: ${base}`, async (t) => {
    const paths = adapters.map((a) => (a as { path: string }).path);
    const engine = await Engine.load({ modelPath: model!, contextSize: 512, lora: paths.map((path) => ({ path, scale: 0 })) });
    const args = ["-m", model!, ...paths.flatMap((p) => ["--lora", p]), "--lora-init-without-apply", "-c", "512", "-np", "1", "-t", "2", "-fa", "off", "--no-warmup"];
    const peer = await startLlamaServer((bin as { path: string }).path, args);
    try {
      const listed = await fetch(`${peer.url}/lora-adapters`).then((r) => r.json());
      t.is(listed.length, 3, "llama-server loaded the three adapters");
      for (const text of ["hello", "The capital of France is"]) {
        const prompt = engine.tokenize(text, { addSpecial: true });
        const base = await greedy(engine, prompt, []);
        for (const lora of MIXES) {
          // llama-server keeps a slot's previous adapters for an empty list: name every one at 0.
          const peerLora = lora.length > 0 ? lora : KINDS.map((_, id) => ({ id, scale: 0 }));
          const want = await postJson(`${peer.url}/completion`, { prompt, n_predict: N, temperature: 0, return_tokens: true, cache_prompt: false, lora: peerLora });
          t.is(want.status, 200, want.text);
          const got = await greedy(engine, prompt, lora);
          t.deepEqual(got, want.json.tokens, `${JSON.stringify(text)} with ${JSON.stringify(lora)}`);
          if (lora.length > 0) t.notDeepEqual(got, base, `${JSON.stringify(lora)} changes the answer`);
        }
      }
    } finally {
      peer.stop();
      await engine.unload();
    }
  });
}

async function greedy(engine: Engine, promptTokens: number[], lora: { id: number; scale: number }[]): Promise<number[]> {
  const ids: number[] = [];
  for await (const ev of engine.generate({ promptTokens, maxTokens: N, temperature: 0, ignoreEos: true, lora })) {
    if (ev.type === "token") ids.push(...ev.ids);
  }
  return ids;
}
