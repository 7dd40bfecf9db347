/** Which files of a hub repo a quant picks: names as people write them, defaults, projectors, and the errors. */
import test from "ava";
import { pickFiles, quantOf, type HubFile } from "../ts/store/hub-files.ts";

const quants: [string, string | undefined][] = [
  ["Llama-3.2-1B-Instruct-Q4_K_M.gguf", "Q4_K_M"],
  ["qwen2.5-0.5b-instruct-q4_k_m.gguf", "Q4_K_M"],
  ["SmolLM2-135M-Instruct.Q4_1.gguf", "Q4_1"],
  ["gemma-3-270m-it-UD-Q4_K_XL.gguf", "Q4_K_XL"],
  ["Model-IQ4_XS.gguf", "IQ4_XS"],
  ["model-bf16.gguf", "BF16"],
  ["mmproj-model-f16.gguf", "F16"],
  ["Model-Q8_0-00001-of-00003.gguf", "Q8_0"],
  ["Q4_K_M/Model-00001-of-00002.gguf", "Q4_K_M"],
  ["LFM2-350M.gguf", undefined],
];
for (const [file, want] of quants) {
  test(`quant of ${file} is ${want}`, (t) => t.is(quantOf(file), want));
}

const f = (p: string, size = 100): HubFile => ({ path: p, size, sha256: "0".repeat(64) });
const repo = [f("README.md"), f("Model-Q8_0.gguf"), f("Model-Q4_K_M.gguf"), f("Model-q5_k_m.gguf"), f("mmproj-Model-Q8_0.gguf"), f("mmproj-Model-F16.gguf")];

test("no quant picks Q4_K_M and the F16 projector", (t) => {
  const c = pickFiles("o/r", repo);
  t.is(c.model.path, "Model-Q4_K_M.gguf");
  t.is(c.quant, "Q4_K_M");
  t.is(c.projector?.path, "mmproj-Model-F16.gguf");
});

test("a quant matches case-insensitively, and a file name picks that file", (t) => {
  t.is(pickFiles("o/r", repo, "Q5_K_M").model.path, "Model-q5_k_m.gguf");
  t.is(pickFiles("o/r", repo, "q8_0").model.path, "Model-Q8_0.gguf");
  t.is(pickFiles("o/r", repo, "model-q8_0.GGUF").model.path, "Model-Q8_0.gguf");
});

test("without Q4_K_M the default falls back in order, then to the first GGUF", (t) => {
  t.is(pickFiles("o/r", [f("a-Q8_0.gguf"), f("a-Q6_K.gguf")]).model.path, "a-Q6_K.gguf");
  t.is(pickFiles("o/r", [f("b.gguf"), f("a.gguf")]).model.path, "a.gguf");
});

test("a projector other than F16 is taken when it is the only one; none when absent", (t) => {
  t.is(pickFiles("o/r", [f("m-Q4_K_M.gguf"), f("mmproj-m-Q8_0.gguf")]).projector?.path, "mmproj-m-Q8_0.gguf");
  t.is(pickFiles("o/r", [f("m-Q4_K_M.gguf")]).projector, undefined);
});

test("an unknown quant is an error listing the quants the repo has", (t) => {
  const err = t.throws(() => pickFiles("o/r", repo, "Q3_K_L"));
  t.is((err as { code?: string }).code, "HUB_QUANT_NOT_FOUND");
  t.is(err?.message, "hf.co/o/r has no Q3_K_L GGUF; quants available: Q4_K_M, Q5_K_M, Q8_0 (files: Model-Q4_K_M.gguf, Model-Q8_0.gguf, Model-q5_k_m.gguf)");
});

test("a repo without GGUF files is an error listing what it has", (t) => {
  const err = t.throws(() => pickFiles("o/r", [f("config.json"), f("model.safetensors")]));
  t.is((err as { code?: string }).code, "HUB_NO_GGUF");
  t.is(err?.message, "hf.co/o/r has no GGUF model files (it has: config.json, model.safetensors)");
});

test("a quant only present as shards is refused naming the shards; a whole file is preferred", (t) => {
  const shards = [f("Q4_K_M/M-Q4_K_M-00001-of-00002.gguf"), f("Q4_K_M/M-Q4_K_M-00002-of-00002.gguf"), f("M-Q8_0.gguf")];
  const err = t.throws(() => pickFiles("o/r", shards, "Q4_K_M"));
  t.is((err as { code?: string }).code, "UNSUPPORTED");
  t.regex(err?.message ?? "", /split into shards \(Q4_K_M\/M-Q4_K_M-00001-of-00002\.gguf, Q4_K_M\/M-Q4_K_M-00002-of-00002\.gguf\)/);
  t.is(pickFiles("o/r", shards).model.path, "M-Q8_0.gguf", "the default skips the sharded Q4_K_M");
});
