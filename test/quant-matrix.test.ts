/**
 * Quantization matrix: llama.cpp's own `llama-quantize` turns F32 synthetic llama and lfm2
 * models (d=256, ff=512, so every K-quant applies) into each GGUF type, and Wick's 64 greedy
 * tokens must equal llama.cpp's (the prebuilt CPU build inside node-llama-cpp) on the same
 * prompt ids. llama-quantize's mixes put several types in one file (Q6_K output, Q5_K/Q6_K
 * attn_v and ffn_down in the _M mixes), so each test logs the types it exercised.
 *
 * Types whose matmul Wick does not yet round as llama.cpp does (they run on candle's
 * kernels) are marked "not exact yet": only their first 8 greedy tokens must match, and the
 * number of matching tokens out of 64 is logged.
 *
 * llama.cpp runs with flash attention off, one thread (see test/parity.test.ts).
 */
import test, { type ExecutionContext } from "ava";
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, readFileSync } from "node:fs";
import path from "node:path";
import { readGgufFileInfo, type Llama, type LlamaModel } from "node-llama-cpp";
import { Engine } from "../ts/engine/index.ts";
import { fixture, fixturesDir, localFile, needs, realModel, repoRoot, writeFixtures } from "./helpers/assets.ts";
import { llamaGreedy, referenceLlama, withBos } from "./helpers/llama.ts";

/** Whether the CPU reports every flag in `flags` (/proc/cpuinfo names). */
function cpuHas(...flags: string[]): boolean {
  try {
    const info = readFileSync("/proc/cpuinfo", "utf8");
    return flags.every((f) => new RegExp(`\\b${f}\\b`).test(info));
  } catch {
    return false;
  }
}

const PROMPTS = ["Hello", "The quick brown fox jumps over the lazy dog.", "def fib(n):\n    return"];
const N = 64;
/** Greedy tokens that must match for the types without an exact kernel yet. */
const LOOSE = 8;

/** llama-quantize type names; `exact` when every matmul type the mix uses has an exact kernel. */
const TYPES: { type: string; exact: boolean }[] = [
  { type: "F16", exact: true },
  // Wick follows the AVX512-BF16 builds of llama.cpp (vdpbf16ps); other CPUs stay on candle.
  { type: "BF16", exact: cpuHas("avx512_bf16") },
  { type: "Q8_0", exact: true },
  { type: "Q4_0", exact: true },
  { type: "Q4_1", exact: true },
  { type: "Q5_0", exact: true },
  { type: "Q5_1", exact: true },
  // Wick follows the repacked Q2_K kernels of llama.cpp's AVX-512 builds.
  { type: "Q2_K", exact: cpuHas("avx512f", "avx512bw", "avx512dq", "avx512vl") },
  { type: "Q3_K_M", exact: true },
  { type: "Q4_K_M", exact: true },
  { type: "Q5_K_M", exact: true },
  { type: "Q6_K", exact: true },
];
const ARCHS = ["llama", "lfm2"];

const quantize = path.join(repoRoot, ".cache/llama-build/bin/llama-quantize");
const quantDir = path.join(fixturesDir, "quant");
const source = (arch: string) => path.join(fixturesDir, `tiny-${arch}-f32.gguf`);

/** ggml_type ids → names, for logging what a file holds. */
const GGML_TYPES: Record<number, string> = {
  0: "F32",
  1: "F16",
  2: "Q4_0",
  3: "Q4_1",
  6: "Q5_0",
  7: "Q5_1",
  8: "Q8_0",
  10: "Q2_K",
  11: "Q3_K",
  12: "Q4_K",
  13: "Q5_K",
  14: "Q6_K",
  30: "BF16",
};

function quantized(arch: string, type: string): string {
  const out = path.join(quantDir, `tiny-${arch}-${type.toLowerCase()}.gguf`);
  if (!existsSync(out)) {
    mkdirSync(quantDir, { recursive: true });
    execFileSync(quantize, [source(arch), out, type], { stdio: ["ignore", "ignore", "pipe"] });
  }
  return out;
}

async function typesIn(file: string): Promise<string> {
  const info = await readGgufFileInfo(file, { readTensorInfo: true });
  const count = new Map<string, number>();
  for (const t of info.fullTensorInfo ?? []) {
    if (t.dimensions.length < 2) continue;
    const name = GGML_TYPES[t.ggmlType] ?? `type${t.ggmlType}`;
    count.set(name, (count.get(name) ?? 0) + 1);
  }
  return [...count].map(([k, v]) => `${k}×${v}`).join(" ");
}

const quantizer = localFile(quantize, "build it with: npm run bench:build-llama, or WICK_LLAMA_ONLY=llama-quantize bash scripts/build-llama-server.sh");
if ("path" in quantizer)
  writeFixtures(
    ARCHS.map((a) => path.basename(source(a))),
    ["--quant-sources"],
  );
const matrix = needs(quantizer, ...ARCHS.map((a) => fixture(path.basename(source(a)))));

let llama: Llama;

test.before(async () => {
  if (!matrix.path && !smollm2.path) return;
  llama = await referenceLlama();
});
test.after.always(async () => llama?.dispose());

async function reference(model: LlamaModel, text: string): Promise<{ promptTokens: number[]; ids: number[] }> {
  const promptTokens = withBos(model, model.tokenize(text));
  return { promptTokens: promptTokens, ids: await llamaGreedy(model, promptTokens, N) };
}

async function wick(engine: Engine, promptTokens: number[]): Promise<number[]> {
  const ids: number[] = [];
  for await (const ev of engine.generate({ promptTokens, maxTokens: N, temperature: 0, ignoreEos: true })) {
    if (ev.type === "token") ids.push(...ev.ids);
  }
  return ids;
}

/** Wick's and llama.cpp's 64 greedy tokens on `file` for every prompt: all equal when `exact`, else the first `LOOSE`. */
async function compareGreedy(t: ExecutionContext, file: string, exact: boolean): Promise<void> {
  t.log(`${path.basename(file)}: ${await typesIn(file)}`);
  const model = await llama.loadModel({ modelPath: file });
  const engine = await Engine.load({ modelPath: file, contextSize: 512 });
  try {
    for (const text of PROMPTS) {
      const want = await reference(model, text);
      const got = await wick(engine, want.promptTokens);
      t.is(got.length, N);
      const at = got.findIndex((id, i) => id !== want.ids[i]);
      const same = at === -1 ? N : at;
      if (exact) {
        t.is(at, -1, `${JSON.stringify(text)}: greedy ids leave llama.cpp's at step ${at}`);
      } else {
        const equal = got.filter((id, i) => id === want.ids[i]).length;
        t.log(`${JSON.stringify(text)}: ${equal}/${N} greedy tokens match (first difference at ${at})`);
        t.true(same >= LOOSE, `${JSON.stringify(text)}: greedy ids leave llama.cpp's at step ${at}`);
      }
    }
  } finally {
    await engine.unload();
    await model.dispose();
  }
}

for (const { type, exact } of TYPES) {
  for (const arch of ARCHS) {
    const name = exact ? `quant matrix: ${arch} ${type}: 64 greedy tokens match llama.cpp` : `quant matrix (not exact yet): ${arch} ${type}: first ${LOOSE} greedy tokens match llama.cpp`;
    matrix.serial(name, (t) => compareGreedy(t, quantized(arch, type), exact));
  }
}

// A real model at full width (k = 576 and 1536: the F16 / BF16 kernels' 4 × 4 tiles and
// 64-value steps over many chunks): SmolLM2-135M's Q4_1 weights requantized by llama-quantize.
const smollm2 = needs(realModel("smollm2-135m"), quantizer);
for (const type of ["F16", ...(cpuHas("avx512_bf16") ? ["BF16"] : [])]) {
  smollm2.serial(`quant matrix: SmolLM2-135M requantized to ${type}: 64 greedy tokens match llama.cpp`, async (t) => {
    const file = path.join(quantDir, `smollm2-135m-${type.toLowerCase()}.gguf`);
    if (!existsSync(file)) {
      mkdirSync(quantDir, { recursive: true });
      execFileSync(quantize, ["--allow-requantize", smollm2.path!, file, type], { stdio: ["ignore", "ignore", "pipe"] });
    }
    await compareGreedy(t, file, true);
  });
}
