/**
 * Model inspection: `wick show` as users run it (the real CLI in a child process) and
 * `POST /api/show` through the real `ollama` client against a real server on 127.0.0.1. Every
 * number is checked against llama.cpp's own reading of the same file (node-llama-cpp's
 * `readGgufFileInfo`), never against constants.
 */
import test, { type ExecutionContext } from "ava";
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { GgmlType, GgufFileType, readGgufFileInfo } from "node-llama-cpp";
import { Ollama } from "ollama";
import { Engine, WickError, type GgufInfo } from "../ts/engine/index.ts";
import { engineCodes } from "../ts/engine/errors.ts";
import { toApiError, toOllamaError } from "../ts/server/errors.ts";
import type { ModelRegistry } from "../ts/service/registry.ts";
import { humanCount } from "../ts/service/show.ts";
import { fixture, needs, realModel, repoRoot, smollm2 } from "./helpers/assets.ts";
import { loadModel, postJson, startServer, type RunningServer } from "./helpers/server.ts";

const BIN = path.join(repoRoot, "bin/wick.js");
const moeFixture = fixture("tiny-lfm2moe-e8-lead2-q8_0.gguf");
const withMoe = needs(moeFixture);
const MOE = withMoe.path!;
const withSmol = needs(smollm2());
const smol = withSmol.path;
const withGemma = needs(realModel("gemma3-270m"));
const truncated = needs(fixture("bad-truncated.gguf"));
// POST /api/show serves SmolLM2 and the lfm2moe fixture together.
const { serial } = needs(smollm2(), moeFixture);

function wick(args: string[]) {
  const r = spawnSync(process.execPath, [BIN, ...args], { cwd: repoRoot, encoding: "utf8", timeout: 60_000 });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr, errLines: r.stderr.split("\n").filter(Boolean) };
}

/** The "Model" rows of the text block: label → value. */
function modelRows(stdout: string): Map<string, string> {
  const section = stdout.split("\n\n")[0].split("\n").slice(1);
  return new Map(section.map((l) => /^ {4}(\S.*?) {2,}(\S.*)$/.exec(l)!.slice(1, 3) as [string, string]));
}

/** What llama.cpp reads from the file: architecture, hyperparameters, file type, tensors. */
async function reference(file: string) {
  const info = await readGgufFileInfo(file, { readTensorInfo: true });
  const meta = info.metadata as unknown as Record<string, Record<string, unknown>> & { general: Record<string, unknown> };
  const arch = String(meta.general.architecture);
  const hp = meta[arch];
  const tensors = info.fullTensorInfo ?? [];
  const mix = new Map<string, number>();
  let params = 0;
  for (const t of tensors) {
    params += t.dimensions.reduce<number>((a, d) => a * Number(d), 1);
    const name = GgmlType[t.ggmlType];
    mix.set(name, (mix.get(name) ?? 0) + 1);
  }
  const ftype = meta.general.file_type as number | undefined;
  return {
    arch,
    params,
    mix,
    nTensors: tensors.length,
    fileType: ftype === undefined ? undefined : GgufFileType[ftype].replace(/^(MOSTLY|ALL)_/, ""),
    contextLength: hp.context_length as number,
    embeddingLength: hp.embedding_length as number,
    blockCount: hp.block_count as number,
    expertCount: hp.expert_count as number | undefined,
    expertUsedCount: hp.expert_used_count as number | undefined,
    chatTemplate: (meta.tokenizer as Record<string, unknown> | undefined)?.chat_template as string | undefined,
    nVocab: ((meta.tokenizer as { ggml: { tokens: unknown[] } }).ggml.tokens ?? []).length,
  };
}

type Ref = Awaited<ReturnType<typeof reference>>;

function checkJson(t: import("ava").ExecutionContext, info: GgufInfo, ref: Ref) {
  t.is(info.architecture, ref.arch);
  t.is(info.parameterCount, ref.params);
  t.is(info.contextLength, ref.contextLength);
  t.is(info.embeddingLength, ref.embeddingLength);
  t.is(info.blockCount, ref.blockCount);
  t.is(info.expertCount, ref.expertCount);
  t.is(info.expertUsedCount, ref.expertUsedCount);
  t.is(info.vocabSize, ref.nVocab);
  t.is(info.chatTemplate, ref.chatTemplate);
  const sorted = (m: Map<string, number>) => Object.fromEntries([...m].sort());
  t.deepEqual(sorted(new Map(info.quantMix.map((q) => [q.dtype, q.tensors]))), sorted(ref.mix));
  t.is(
    info.quantMix.reduce((a, q) => a + q.tensors, 0),
    ref.nTensors,
  );
  for (let i = 1; i < info.quantMix.length; i++) t.true(info.quantMix[i - 1].bytes >= info.quantMix[i].bytes, "most bytes first");
  // With general.file_type the label is llama.cpp's name for it; without, the type with most bytes.
  t.is(info.quantization, ref.fileType ?? info.quantMix[0].dtype);
}

test("humanCount formats as Ollama's HumanNumber", (t) => {
  t.is(humanCount(134_515_008), "135M");
  t.is(humanCount(1_190_000_000), "1.19B");
  t.is(humanCount(8_744_608), "8.74M");
  t.is(humanCount(12_345), "12.3K");
  t.is(humanCount(999), "999");
});

test("native API errors keep the OpenAI table's status with Ollama's {error} body", (t) => {
  for (const code of engineCodes()) {
    const err = new WickError(code, `engine said ${code}`);
    const o = toOllamaError(err);
    t.is(o.status, toApiError(err).status, code);
    t.deepEqual(o.body, { error: `engine said ${code}` });
  }
});

withMoe.test("wick show on an lfm2moe fixture: experts, per-layer KV heads, quantization from the tensors", async (t) => {
  const ref = await reference(MOE);
  t.is(ref.expertCount, 8);
  t.is(ref.expertUsedCount, 2);
  const r = wick(["show", MOE]);
  t.is(r.status, 0, r.stderr);
  const rows = modelRows(r.stdout);
  t.is(rows.get("architecture"), "lfm2moe");
  t.is(rows.get("parameters"), humanCount(ref.params));
  t.is(rows.get("context length"), String(ref.contextLength));
  t.is(rows.get("embedding length"), String(ref.embeddingLength));
  t.is(rows.get("experts"), "8 (2 used)");
  t.is(ref.fileType, undefined, "the fixture has no general.file_type");
  t.is(rows.get("quantization"), "Q8_0");
  t.regex(r.stdout, /\n {2}Quantization mix\n {4}Q8_0 +35 tensors +[\d.]+ MiB\n {4}F32 +29 tensors +[\d.]+ KiB\n$/);

  const json = wick(["show", MOE, "--json"]);
  t.is(json.status, 0, json.stderr);
  const info = JSON.parse(json.stdout) as GgufInfo;
  checkJson(t, info, ref);
  t.is(info.headCountKv, 2, "largest entry of the per-layer head_count_kv");
  t.is(info.metadata["lfm2moe.expert_count"], 8);
  t.deepEqual(info.metadata["tokenizer.ggml.tokens"], [], "vocabulary arrays are left out");
});

/** `wick show` (text and --json) on a real model matches llama.cpp's reading of it. */
async function showsAsLlamaCppReads(t: ExecutionContext, file: string) {
  const ref = await reference(file);
  const r = wick(["show", file]);
  t.is(r.status, 0, r.stderr);
  const rows = modelRows(r.stdout);
  t.is(rows.get("architecture"), ref.arch);
  t.is(rows.get("parameters"), humanCount(ref.params));
  t.is(rows.get("context length"), String(ref.contextLength));
  t.is(rows.get("quantization"), ref.fileType);
  t.false(rows.has("experts"));
  const info = JSON.parse(wick(["show", file, "--json"]).stdout) as GgufInfo;
  checkJson(t, info, ref);
  t.log(`${path.basename(file)}: ${ref.arch}, ${ref.params} params, ${ref.fileType}, ctx ${ref.contextLength}`);
}

withSmol.test("wick show on the real SmolLM2 matches llama.cpp's reading", async (t) => {
  await showsAsLlamaCppReads(t, smol!);
  const ref = await reference(smol!);
  // SmolLM2-135M-Instruct.Q4_1 as llama.cpp reads it.
  t.like(ref, { arch: "llama", fileType: "Q4_1", contextLength: 8192 });
  t.is(wick(["show", smol!, "--template"]).stdout, `${ref.chatTemplate}\n`);
  t.regex(wick(["show", smol!, "--modelfile"]).stdout, new RegExp(`\nFROM ${smol!.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}\n`));
});

withGemma.test("wick show on the real Gemma 3 matches llama.cpp's reading", (t) => showsAsLlamaCppReads(t, withGemma.path!));

truncated.test("wick show: a missing file, a directory, a non-GGUF and a truncated GGUF exit 1 with one line", (t) => {
  const dir = mkdtempSync(path.join(tmpdir(), "wick-show-"));
  try {
    const text = path.join(dir, "notes.gguf");
    writeFileSync(text, "not a model, just text\n");
    const cases: [string, RegExp][] = [
      [path.join(dir, "absent.gguf"), /No such file/],
      [dir, /is not a file/],
      [text, /not a GGUF file/],
      [truncated.path!, /truncated or corrupt/],
      // Store names are asked of a server (test/cli-models.test.ts); a name that is not one fails here.
      ["bad name", /invalid model name "bad name"/],
    ];
    for (const [arg, pattern] of cases) {
      const r = wick(["show", arg]);
      t.is(r.status, 1, arg);
      t.is(r.stdout, "", arg);
      t.is(r.errLines.length, 1, r.stderr);
      t.regex(r.errLines[0], /^wick( show)?: /);
      t.regex(r.errLines[0], pattern);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

// --- POST /api/show against a real server serving SmolLM2 and the lfm2moe fixture ---

const SMOL_ID = "SmolLM2-135M-Instruct.Q4_1";
const MOE_ID = "tiny-lfm2moe-e8-lead2-q8_0";
let registry: ModelRegistry;
let server: RunningServer;
let ollama: Ollama;

test.before(async () => {
  if (!smol || !MOE) return;
  ({ registry } = await loadModel(smol));
  registry.add(await Engine.load({ modelPath: MOE, contextSize: 256, maxSequences: 1 }), { path: MOE });
  server = await startServer({ registry });
  ollama = new Ollama({ host: server.url });
});
test.after.always(async () => {
  await server?.close();
  await registry?.unloadAll();
});

serial("POST /api/show with the ollama client: details and model_info from the GGUF", async (t) => {
  const ref = await reference(smol!);
  const res = await ollama.show({ model: SMOL_ID });
  t.like(res.details, { parent_model: "", format: "gguf", family: "llama", quantization_level: ref.fileType, parameter_size: humanCount(ref.params) });
  t.deepEqual(res.details.families, ["llama"]);
  t.is(res.details.parameter_size, "135M");
  t.is(res.template, ref.chatTemplate!);
  t.deepEqual(res.capabilities, ["completion"]);
  t.false(Number.isNaN(new Date(res.modified_at).getTime()));
  t.true(res.modelfile.includes(`FROM ${smol}`));
  const info = res.model_info as unknown as Record<string, unknown>;
  t.like(info, {
    "general.architecture": "llama",
    "general.parameter_count": ref.params,
    "llama.context_length": ref.contextLength,
    "llama.embedding_length": ref.embeddingLength,
    "llama.block_count": ref.blockCount,
  });
  t.false("llama.expert_count" in info);
  t.false("general.name" in info, "name and template have their own fields, as in Ollama");
  t.false("tokenizer.chat_template" in info);
  t.deepEqual(info["tokenizer.ggml.tokens"], []);
  t.deepEqual(Object.keys(info), Object.keys(info).sort());

  const moe = await ollama.show({ model: MOE_ID });
  t.is(moe.details.family, "lfm2moe");
  t.like(moe.model_info as unknown, { "lfm2moe.expert_count": 8, "lfm2moe.expert_used_count": 2, "lfm2moe.context_length": 4096 });
  t.is(moe.details.quantization_level, "Q8_0");
});

serial("POST /api/show: legacy name, :latest, the model's path and verbose", async (t) => {
  const byName = await postJson(`${server.url}/api/show`, { name: SMOL_ID });
  t.is(byName.status, 200);
  t.is(byName.json.details.family, "llama");
  t.is((await postJson(`${server.url}/api/show`, { model: `${SMOL_ID}:latest` })).json.details.family, "llama");
  t.is((await postJson(`${server.url}/api/show`, { model: MOE })).json.details.family, "lfm2moe");
  const verbose = await postJson(`${server.url}/api/show`, { model: SMOL_ID, verbose: true });
  t.is(verbose.json.model_info["tokenizer.ggml.tokens"].length, (await reference(smol!)).nVocab);
});

serial("POST /api/show: unknown model is 404, bad bodies are 400 in Ollama's shape, and the server keeps serving", async (t) => {
  const err = await t.throwsAsync(ollama.show({ model: "no-such-model" }));
  t.is((err as Error & { status_code?: number }).status_code, 404);
  t.is(err.message, "model 'no-such-model' not found");
  const raw = await postJson(`${server.url}/api/show`, { model: "no-such-model" });
  t.is(raw.status, 404);
  t.deepEqual(raw.json, { error: "model 'no-such-model' not found" });

  const bad: [string, unknown, RegExp][] = [
    ["malformed JSON", '{"model": "x"', /parse the JSON body/],
    ["no model", {}, /^model is required$/],
    ["empty model", { model: "" }, /^model is required$/],
    ["model not a string", { model: 5 }, /'model'.*string/],
    ["verbose not a boolean", { model: SMOL_ID, verbose: "yes" }, /'verbose'/],
    ["body an array", [1, 2], /expected an object/],
  ];
  for (const [name, body, pattern] of bad) {
    const r = await postJson(`${server.url}/api/show`, body);
    t.is(r.status, 400, name);
    t.deepEqual(Object.keys(r.json ?? {}), ["error"], name);
    t.is(typeof r.json.error, "string", name);
    t.regex(r.json.error, pattern, name);
  }
  // /v1 keeps OpenAI's error shape.
  const v1 = await postJson(`${server.url}/v1/chat/completions`, '{"model"');
  t.is(v1.status, 400);
  t.is(v1.json.error.code, "invalid_json");

  t.is((await ollama.show({ model: SMOL_ID })).details.family, "llama");
});
