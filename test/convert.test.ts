/**
 * `wick convert` end to end: synthetic Hugging Face checkpoints (one per architecture, written
 * by `wick-fixtures --hf`: random weights, tokenizers rebuilt from llama.cpp's vocab files)
 * converted through the addon to every output type; llama.cpp (node-llama-cpp) loads each
 * file and its greedy tokens equal Wick's on the same file and prompt ids. The F32 files'
 * logits, as llama.cpp computes them with an f32 KV cache, equal an independent numpy forward
 * pass of the Hugging Face weights (scripts/hf-reference.py) within 1e-4. Then the CLI: the
 * progress output, the summary line, bad input, and a cancel that leaves no file.
 *
 * (That llama-quantize writes the same types and bytes from the float files is checked in
 * crates/wick-convert/tests/quantize_parity.rs; names, vocabulary and general.* keys against
 * llama.cpp's gguf-py in crates/wick-convert/tests/convert_reference.rs.)
 */
import test from "ava";
import { execFileSync, spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import type { Llama, LlamaModel } from "node-llama-cpp";
import { CONVERT_OUT_TYPES, convertModel, nativeOutTypes } from "../ts/engine/convert.ts";
import { Engine, WickError } from "../ts/engine/index.ts";
import { fixturesDir, llamaVocab, localFile, needs, repoRoot, type Asset } from "./helpers/assets.ts";
import { inContext, llamaGreedy, referenceLlama, withBos } from "./helpers/llama.ts";
import { llamaServerBin, startLlamaServer } from "./helpers/llama-server.ts";
import { ModelRegistry } from "../ts/service/registry.ts";
import { postJson, startServer } from "./helpers/server.ts";

const HF_DIR = path.join(fixturesDir, "hf");
const SMALL = ["llama", "qwen2", "qwen3", "gemma3", "lfm2", "lfm2moe"];
/** d=256 checkpoints, where the K-quants apply (the small ones fall back to Q5_0/Q5_1/Q8_0). */
const KQUANT = ["llama-k", "lfm2-k", "lfm2moe-k"];
/** The PEFT adapters the fixture writer makes beside those checkpoints (`hf-<arch>-lora`). */
const PEFT = ["llama", "lfm2"];
const PROMPTS = ["Hello", "The quick brown fox jumps over the lazy dog.", "def fib(n):\n    return"];
const N = 16;

/** Writes the checkpoints with the wick-fixtures binary when some are missing. */
function writeCheckpoints(): void {
  const all = [...SMALL, ...KQUANT].every((a) => existsSync(path.join(HF_DIR, `hf-${a}`, "config.json")));
  if (all && PEFT.every((a) => existsSync(path.join(HF_DIR, `hf-${a}-lora`, "adapter_config.json")))) return;
  const triple = execFileSync("rustc", ["-vV"], { encoding: "utf8" }).match(/^host: (.*)$/m)?.[1];
  try {
    execFileSync("cargo", ["run", "--release", ...(triple ? ["--target", triple] : []), "-q", "-p", "wick-fixtures", "--", HF_DIR, "--hf"], {
      cwd: repoRoot,
      stdio: ["ignore", "ignore", "inherit"],
    });
  } catch {
    // Reported by the tests that need them.
  }
}

const checkpoint = (arch: string): Asset => localFile(path.join(HF_DIR, `hf-${arch}`, "config.json"), "cargo run -p wick-fixtures -- .cache/fixtures/hf --hf");

if ("path" in llamaVocab("llama-bpe")) writeCheckpoints();
const all = needs(llamaVocab("llama-bpe"), ...[...SMALL, ...KQUANT].map(checkpoint));

let llama: Llama;
let outDir: string;

test.before(async () => {
  outDir = mkdtempSync(path.join(os.tmpdir(), "wick-convert-"));
  if (all.path) llama = await referenceLlama();
});
test.after.always(async () => {
  await llama?.dispose();
  if (outDir) rmSync(outDir, { recursive: true, force: true });
});

test("the output types the CLI offers are the converter's", (t) => {
  t.deepEqual([...CONVERT_OUT_TYPES], nativeOutTypes());
});

async function convertTo(arch: string, outtype: string): Promise<string> {
  const outfile = path.join(outDir, `${arch}-${outtype}.gguf`);
  await convertModel({ input: path.join(HF_DIR, `hf-${arch}`), outfile, outtype });
  return outfile;
}

async function wickGreedy(engine: Engine, promptTokens: number[]): Promise<number[]> {
  const ids: number[] = [];
  for await (const ev of engine.generate({ promptTokens, maxTokens: N, temperature: 0, ignoreEos: true })) {
    if (ev.type === "token") ids.push(...ev.ids);
  }
  return ids;
}

/** llama.cpp loads `file`, and Wick's greedy tokens equal its own for every prompt. */
async function sameGreedy(t: { is: (a: unknown, b: unknown, m?: string) => void; log: (...a: unknown[]) => void }, file: string): Promise<void> {
  const model: LlamaModel = await llama.loadModel({ modelPath: file });
  const engine = await Engine.load({ modelPath: file, contextSize: 256 });
  try {
    for (const text of PROMPTS) {
      const promptTokens = withBos(model, model.tokenize(text)) as number[];
      const want = await llamaGreedy(model, promptTokens as never, N, 256);
      const got = await wickGreedy(engine, promptTokens);
      const at = got.findIndex((id, i) => id !== want[i]);
      t.is(at, -1, `${path.basename(file)} ${JSON.stringify(text)}: Wick leaves llama.cpp's greedy tokens at step ${at}`);
    }
    t.log(`${path.basename(file)}: ${PROMPTS.length} prompts × ${N} greedy tokens equal`);
  } finally {
    await engine.unload();
    await model.dispose();
  }
}

for (const arch of SMALL) {
  all.serial(`convert: ${arch} in every output type loads in llama.cpp, and Wick's greedy tokens equal llama.cpp's`, async (t) => {
    for (const outtype of CONVERT_OUT_TYPES) await sameGreedy(t, await convertTo(arch, outtype));
  });
}

for (const arch of KQUANT) {
  all.serial(`convert: ${arch} (K-quant rows) in q4_k_m, q5_k_m, q6_k: Wick's greedy tokens equal llama.cpp's`, async (t) => {
    for (const outtype of ["q4_k_m", "q5_k_m", "q6_k"]) await sameGreedy(t, await convertTo(arch, outtype));
  });
}

/** A Python with numpy (scripts/py-venv.sh, or WICK_PYTHON). */
function python(): Asset {
  const candidates = process.env.WICK_PYTHON ? [process.env.WICK_PYTHON] : [path.join(repoRoot, ".cache/py/bin/python"), "python3"];
  for (const p of candidates) {
    if (spawnSync(p, ["-c", "import numpy"], { stdio: "ignore" }).status === 0) return { path: p };
  }
  return { missing: "no Python with numpy (bash scripts/py-venv.sh, or set WICK_PYTHON)" };
}

const withNumpy = needs(python(), llamaVocab("llama-bpe"), ...SMALL.map(checkpoint));
const REF_IDS = [1, 15, 300, 4021, 17, 9, 1200, 5, 77];

/**
 * Gemma 3's GELU in llama.cpp's CPU backend is a lookup table of f16 inputs and outputs
 * (GGML_GELU_FP16). The reference models the table (--ggml-gelu), but f32 rounding
 * differences upstream flip an f16 table index now and then, which moves the logits by up to
 * ~5e-3: no reference computed in another order can be closer than that.
 */
const TOLERANCE: Record<string, number> = { gemma3: 1e-2 };

for (const arch of SMALL) {
  withNumpy.serial(`convert: ${arch} f32 logits (llama.cpp, f32 KV cache) equal an independent numpy forward of the HF weights`, async (t) => {
    const file = await convertTo(arch, "f32");
    const py = withNumpy.path!;
    const args = [path.join(repoRoot, "scripts/hf-reference.py"), path.join(HF_DIR, `hf-${arch}`), REF_IDS.join(",")];
    if (arch === "gemma3") args.push("--ggml-gelu");
    const want = JSON.parse(execFileSync(py, args, { encoding: "utf8", maxBuffer: 64 << 20 })) as number[];
    const model = await llama.loadModel({ modelPath: file });
    try {
      const probs = await inContext(
        model,
        64,
        async (seq) => {
          // The f32 cache keeps llama.cpp's attention in f32, as the reference is.
          for await (const r of seq.evaluateWithMetadata(REF_IDS as never, { probabilities: true }, { temperature: 1, topK: 1 << 30, topP: 1, minP: 0 })) {
            return (r as { probabilities: Map<number, number> }).probabilities;
          }
          throw new Error("no output");
        },
        1,
        { experimentalKvCacheKeyType: "F32", experimentalKvCacheValueType: "F32" },
      );
      t.is(probs.size, want.length, "llama.cpp's distribution covers the vocabulary");
      // Logits are known up to a constant from probabilities: compare differences to the top token.
      const [top] = probs.keys();
      let worst = 0;
      for (const [tok, p] of probs) {
        const d = Math.abs(Math.log(p) - Math.log(probs.get(top)!) - (want[tok] - want[top]));
        worst = Math.max(worst, d);
      }
      const tol = TOLERANCE[arch] ?? 1e-4;
      t.log(`${arch}: max |Δlogit| = ${worst.toExponential(2)} over ${probs.size} tokens (tolerance ${tol})`);
      t.true(worst < tol, `${arch}: logits differ by ${worst}`);
    } finally {
      await model.dispose();
    }
  });
}

const wickBin = path.join(repoRoot, "bin/wick.js");
const run = (args: string[]) => spawnSync(process.execPath, [wickBin, ...args], { encoding: "utf8", cwd: repoRoot });

all.serial("wick convert: progress lines on stderr, a summary on stdout, the file in place", (t) => {
  const outfile = path.join(outDir, "cli-lfm2moe.gguf");
  const r = run(["convert", path.join(HF_DIR, "hf-lfm2moe-k"), "--outfile", outfile, "--outtype", "q4_k_m"]);
  t.is(r.status, 0, r.stderr);
  t.regex(r.stderr, /100% .*\[64\/64\]/);
  t.regex(r.stdout, /^wrote .*cli-lfm2moe\.gguf: lfm2moe q4_k_m, 64 tensors \(.*Q4_K×\d+.*\)/);
  t.true(existsSync(outfile));
});

test("wick convert: bad input is one line naming the problem, with no file left behind", (t) => {
  const dir = mkdtempSync(path.join(os.tmpdir(), "wick-convert-bad-"));
  try {
    mkdirSync(path.join(dir, "empty"));
    const out = path.join(dir, "out.gguf");
    const cases: [string[], RegExp][] = [
      [["convert", path.join(dir, "nope"), "--outfile", out], /wick convert: .*is invalid for argument 'dir'\. No such directory/],
      [["convert", path.join(dir, "empty"), "--outfile", out], /wick: convert: .*config\.json: missing/],
      [["convert", path.join(dir, "empty"), "--outfile", out, "--outtype", "q3_k"], /Expected one of: f32, f16, bf16, q8_0, q4_0, q4_k_m, q5_k_m, q6_k/],
      [["convert", path.join(dir, "empty"), "--outfile", path.join(dir, "no-dir", "x.gguf")], /No such directory/],
      [["convert", path.join(dir, "empty")], /required option '-o, --outfile <file.gguf>'/],
    ];
    for (const [args, re] of cases) {
      const r = run(args);
      t.not(r.status, 0, args.join(" "));
      t.regex(r.stderr, re, args.join(" "));
    }
    t.deepEqual(readdirSync(dir), ["empty"]);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

all.serial("convertModel: an aborted signal cancels with CANCELLED and leaves no file", async (t) => {
  const dir = mkdtempSync(path.join(os.tmpdir(), "wick-convert-cancel-"));
  try {
    const abort = new AbortController();
    abort.abort();
    const err = await t.throwsAsync(convertModel({ input: path.join(HF_DIR, "hf-llama"), outfile: path.join(dir, "x.gguf"), outtype: "q8_0" }, { signal: abort.signal }));
    t.true(err instanceof WickError);
    t.is((err as WickError).code, "CANCELLED");
    t.deepEqual(readdirSync(dir), []);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

// A PEFT adapter (adapter_config.json + adapter_model.safetensors) converted by `wick convert`
// loads in llama.cpp and in Wick, beside the converted base, with the same greedy tokens.
for (const arch of PEFT) {
  const peer = llamaServerBin();
  const { serial } = needs(checkpoint(arch), localFile(path.join(HF_DIR, `hf-${arch}-lora`, "adapter_config.json"), "cargo run -p wick-fixtures -- .cache/fixtures/hf --hf"), peer);
  serial(`wick convert of a PEFT adapter (hf-${arch}-lora) gives llama-server --lora's greedy tokens in Wick`, async (t) => {
    const dir = mkdtempSync(path.join(os.tmpdir(), "wick-peft-"));
    const base = path.join(dir, "base.gguf");
    const adapter = path.join(dir, "adapter.gguf");
    await convertModel({ input: path.join(HF_DIR, `hf-${arch}`), outfile: base, outtype: "q8_0" });
    await convertModel({ input: path.join(HF_DIR, `hf-${arch}-lora`), outfile: adapter, outtype: "f16" });
    const engine = await Engine.load({ modelPath: base, contextSize: 256, lora: [{ path: adapter, scale: 0 }] });
    const server = await startLlamaServer((peer as { path: string }).path, [
      "-m",
      base,
      "--lora",
      adapter,
      "--lora-init-without-apply",
      "-c",
      "256",
      "-np",
      "1",
      "-t",
      "2",
      "-fa",
      "off",
      "--no-warmup",
    ]);
    try {
      for (const text of PROMPTS) {
        const prompt = engine.tokenize(text, { addSpecial: true });
        const greedy = async (lora: { id: number; scale: number }[]) => {
          const ids: number[] = [];
          for await (const ev of engine.generate({ promptTokens: prompt, maxTokens: N, temperature: 0, ignoreEos: true, lora })) if (ev.type === "token") ids.push(...ev.ids);
          return ids;
        };
        // repeat_penalty 1: the converted base carries its generation_config as
        // general.sampling.* (penalty_repeat 1.05), which llama-server takes as its defaults.
        const want = await postJson(`${server.url}/completion`, { prompt, n_predict: N, temperature: 0, repeat_penalty: 1, return_tokens: true, cache_prompt: false, lora: [{ id: 0, scale: 1 }] });
        t.is(want.status, 200, want.text);
        const got = await greedy([{ id: 0, scale: 1 }]);
        t.deepEqual(got, want.json.tokens, JSON.stringify(text));
        t.notDeepEqual(got, await greedy([]), `${JSON.stringify(text)}: the adapter changes the answer`);
      }
    } finally {
      server.stop();
      await engine.unload();
      rmSync(dir, { recursive: true, force: true });
    }
  });
}

// A converted model carries its generation_config.json as general.sampling.*; llama-server takes
// those as its default sampling, and so does Wick on the OpenAI-shaped routes (a request's own
// fields still win). top_k 1 keeps both deterministic; the repetition penalty changes the answer.
{
  const peer = llamaServerBin();
  const { serial } = needs(checkpoint("llama"), peer);
  serial("a converted model's generation_config is the default sampling on /v1, as llama-server applies it", async (t) => {
    const dir = mkdtempSync(path.join(os.tmpdir(), "wick-gencfg-"));
    const src = path.join(dir, "hf-llama");
    mkdirSync(src);
    for (const f of readdirSync(path.join(HF_DIR, "hf-llama"))) if (f !== "generation_config.json") symlinkSync(path.join(HF_DIR, "hf-llama", f), path.join(src, f));
    writeFileSync(path.join(src, "generation_config.json"), JSON.stringify({ top_k: 1, repetition_penalty: 1.3 }));
    const model = path.join(dir, "m.gguf");
    await convertModel({ input: src, outfile: model, outtype: "q8_0" });
    const registry = new ModelRegistry();
    const served = await registry.load({ modelPath: model, contextSize: 256, id: "m" });
    t.deepEqual(Object.keys(served.profile?.modelDefaults ?? {}).sort(), ["repeat_penalty", "top_k"]);
    const wick = await startServer({ registry });
    const server = await startLlamaServer((peer as { path: string }).path, ["-m", model, "-c", "256", "-np", "1", "-t", "2", "-fa", "off", "--no-warmup"]);
    try {
      for (const prompt of PROMPTS) {
        const want = await postJson(`${server.url}/completion`, { prompt, n_predict: N, cache_prompt: false });
        t.is(want.status, 200, want.text);
        const got = await postJson(`${wick.url}/v1/completions`, { model: "m", prompt, max_tokens: N });
        t.is(got.status, 200, got.text);
        t.is(got.json.choices[0].text, want.json.content, JSON.stringify(prompt));
        const plain = await postJson(`${wick.url}/v1/completions`, { model: "m", prompt, max_tokens: N, top_k: 1, repetition_penalty: 1 });
        if (prompt === PROMPTS[2]) t.not(plain.json.choices[0].text, got.json.choices[0].text, "the request's own fields win (and the penalty mattered)");
      }
    } finally {
      server.stop();
      await wick.close();
      await served.engine.unload();
      rmSync(dir, { recursive: true, force: true });
    }
  });
}
