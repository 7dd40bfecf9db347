/**
 * The flag tables as commander reads them (through runCli with the commands stubbed, so no
 * server or model is touched): every flag and alias of `wick serve` and `wick run` lands under
 * its table key with its parsed value; each command rewrites only its own aliases (`wick bench
 * -n` is not `wick run -n`); and the helpers the client commands print with.
 */
import test from "ava";
import { readFileSync } from "node:fs";
import path from "node:path";
import { FOREIGN_FLAGS, RUN_FLAGS, SERVE_FLAGS, normalizeArgv, type FlagSpec } from "../ts/cli/flags.ts";
import { humanBytes, humanTime, shortDuration, table } from "../ts/cli/format.ts";
import { runCli, type Commands } from "../ts/cli/program.ts";
import { closest } from "../ts/cli/suggest.ts";
import { repoRoot } from "./helpers/assets.ts";

const aFile = path.join(repoRoot, "package.json");

/** A valid value for each flag, and what the parser makes of it. */
const SAMPLES: Record<string, [string, unknown] | undefined> = {
  model: ["lfm2:350m", "lfm2:350m"],
  hfRepo: ["org/repo:Q4_0", "hf.co/org/repo:Q4_0"],
  mmproj: [aFile, aFile],
  lora: [aFile, [[{ path: aFile, scale: 1 }]]],
  loraScaled: [`${aFile}:0.5`, [[{ path: aFile, scale: 0.5 }]]],
  loraModules: [`sql=${aFile}`, [[{ path: aFile, scale: 0, name: "sql" }]]],
  specType: ["ngram-simple", "ngram-simple"],
  draftMax: ["12", 12],
  draftMin: ["2", 2],
  specNgramSize: ["3", 3],
  speculativeConfig: ['{"method":"ngram","num_speculative_tokens":4}', { method: "ngram", num_speculative_tokens: 4 }],
  modelDraft: [aFile, aFile],
  draftPMin: ["0.25", 0.25],
  imageMinTokens: ["64", 64],
  imageMaxTokens: ["256", 256],
  imageMaxPixels: ["1000000", 1000000],
  imageMaxBytes: ["1048576", 1048576],
  imageTimeout: ["5000", 5000],
  alias: ["smol", "smol"],
  maxLoadedModels: ["2", 2],
  keepAlive: ["5m", 300_000],
  host: ["0.0.0.0", "0.0.0.0"],
  port: ["8080", 8080],
  ctxSize: ["1024", 1024],
  apiKey: ["k", "k"],
  threads: ["2", 2],
  parallel: ["3", 3],
  chunkedPrefillSize: ["-1", -1],
  maxBatchedTokens: ["256", 256],
  maxTotalTokens: ["4096", 4096],
  kvCacheMemoryBytes: ["1073741824", 1073741824],
  cacheTypeK: ["q8_0", "q8_0"],
  cacheTypeV: ["q4_0", "q4_0"],
  device: ["CUDA:1", "cuda:1"],
  nGpuLayers: ["all", 99],
  gpuMemoryUtilization: ["0.9", 0.9],
  dtype: ["auto", "auto"],
  toolCallParser: ["lfm2", "lfm2"],
  reasoningFormat: ["none", "none"],
  reasoningParser: ["deepseek-r1", "deepseek-r1"],
  reasoningBudget: ["256", 256],
  logLevel: ["INFO", "info"],
  timeout: ["30", 30],
  maxConnections: ["64", 64],
  shutdownTimeout: ["5", 5],
  cors: ["https://a.example, http://localhost:3000/", ["https://a.example", "http://localhost:3000"]],
};
const RUN_SAMPLES: Record<string, [string, unknown] | undefined> = {
  model: ["smol", "smol"],
  prompt: ["hi", "hi"],
  system: ["be brief", "be brief"],
  temperature: ["0", 0],
  topP: ["0.9", 0.9],
  topK: ["40", 40],
  minP: ["0.05", 0.05],
  repeatPenalty: ["1.1", 1.1],
  repeatLastN: ["64", 64],
  presencePenalty: ["0.5", 0.5],
  frequencyPenalty: ["-0.5", -0.5],
  nPredict: ["-1", -1],
  seed: ["-1", -1],
  stop: ["END", ["END"]],
  image: [aFile, [aFile]],
  imageMaxTokens: ["64", 64],
  keepAlive: ["10m", "10m"],
  format: ["json", "json"],
};

/** Runs the CLI with stubbed commands; resolves with what the command was called with. */
async function parse(argv: string[]): Promise<{ name: string; args: unknown[] }> {
  let called: { name: string; args: unknown[] } | undefined;
  const stub = new Proxy({} as Commands, {
    get:
      (_, name: string) =>
      async (...args: unknown[]) =>
        void (called = { name, args }),
  });
  // eslint-disable-next-line @typescript-eslint/unbound-method -- saved to be put back as it was
  const write = process.stderr.write;
  process.stderr.write = () => true; // notices
  try {
    await runCli(argv, stub);
  } finally {
    process.stderr.write = write;
  }
  if (!called) throw new Error(`nothing ran for ${argv.join(" ")}`);
  return called;
}

function eachFlag<F>(specs: FlagSpec<F>[], samples: Record<string, [string, unknown] | undefined>) {
  return specs.flatMap((spec) => spec.flags.map((flag) => ({ spec, flag, sample: samples[spec.key] })));
}

test("every serve flag and alias lands under its table key with its parsed value", async (t) => {
  for (const { spec, flag, sample } of eachFlag(SERVE_FLAGS, SAMPLES)) {
    const args = spec.value ? [flag, sample![0]] : [flag];
    const {
      name,
      args: [flags],
    } = await parse(["serve", ...args]);
    t.is(name, "serve");
    // A `--no-x` switch sets its key false (commander's negation; the key names what it negates).
    const on = !spec.flags[0].startsWith("--no-");
    t.deepEqual((flags as Record<string, unknown>)[spec.key], spec.value ? sample![1] : on, `${flag} → ${spec.key}`);
  }
});

test("every run flag and alias lands under its table key with its parsed value", async (t) => {
  for (const { spec, flag, sample } of eachFlag(RUN_FLAGS, RUN_SAMPLES)) {
    const args = spec.value ? [flag, sample![0]] : [flag];
    const {
      name,
      args: [model, prompt, flags],
    } = await parse(["run", "smol", ...args, "the", "prompt"]);
    t.is(name, "run");
    t.deepEqual((flags as Record<string, unknown>)[spec.key], spec.value ? sample![1] : true, `${flag} → ${spec.key}`);
    if (spec.key === "model") {
      t.is(model, "smol");
      t.deepEqual(prompt, ["smol", "the", "prompt"], "with -m every argument is prompt");
    } else {
      t.is(model, "smol");
      t.deepEqual(prompt, ["the", "prompt"]);
    }
  }
  const repeated = await parse(["run", "m", "--stop", "a", "--stop", "b", "--image", aFile, "--image", aFile]);
  t.deepEqual((repeated.args[2] as { stop: string[] }).stop, ["a", "b"]);
  t.is((repeated.args[2] as { image: string[] }).image.length, 2);
});

test("serve takes the model as vLLM's positional, -m, or -hf", async (t) => {
  t.is(((await parse(["serve", "org/repo:Q4_0", "--max-model-len", "4096"])).args[0] as { model: string }).model, "org/repo:Q4_0");
  t.is(((await parse(["start", "-m", "org/repo"])).args[0] as { model: string }).model, "org/repo", "Ollama's alias start");
  t.is(((await parse(["serve", "-hf", "org/repo"])).args[0] as { model: string }).model, "hf.co/org/repo");
});

test("each command rewrites its own aliases only", (t) => {
  t.deepEqual(normalizeArgv(["run", "m", "-n", "5", "-p", "x"]).args, ["run", "m", "--n-predict", "5", "--prompt", "x"]);
  t.deepEqual(normalizeArgv(["bench", "-m", "x.gguf", "-n", "5", "-p", "8"]).args, ["bench", "-m", "x.gguf", "-n", "5", "-p", "8"]);
  t.deepEqual(normalizeArgv(["run", "m", "--temp", "0", "--enable-torch-compile"]).args, ["run", "m", "--temp", "0", "--enable-torch-compile"], "foreign flags are serve's");
  // A flag's value is taken as typed, even one that looks like a flag.
  t.deepEqual(normalizeArgv(["run", "m", "-p", "-m", "-s", "-1"]).args, ["run", "m", "--prompt", "-m", "--seed", "-1"]);
  const serve = normalizeArgv(["serve", "--temp", "0.7", "--chat-template", "chatml", "-m", "x.gguf"]);
  t.deepEqual(serve.args, ["serve", "--model", "x.gguf"]);
  t.regex(serve.notices[0], /^wick: ignoring --temp \(mlx-lm \/ llama-server flag, no server-wide sampling defaults: send them per request, or set them as PARAMETERs in a Modelfile\)$/);
});

test("closest: the suggestion for a mistyped flag or command", (t) => {
  const flags = [...SERVE_FLAGS.flatMap((f) => f.flags)];
  t.is(closest("--max-model-length", flags), "--max-model-len");
  t.is(closest("--ctx-siz", flags), "--ctx-size");
  t.is(closest("--gpu-memory-utilisation", flags), "--gpu-memory-utilization");
  t.is(closest("--hf-rpeo", flags), "--hf-repo");
  t.is(closest("--frobnicate", flags), undefined);
});

test("tables, sizes and times as Ollama prints them", (t) => {
  t.is(
    table(
      ["NAME", "ID", "SIZE"],
      [
        ["smol:latest", "a6f52c33c92a", "98 MB"],
        ["x", "", "1 GB"],
      ],
    ),
    "NAME           ID              SIZE\nsmol:latest    a6f52c33c92a    98 MB\nx                              1 GB\n",
  );
  t.is(humanBytes(98_362_432), "98 MB");
  t.is(humanBytes(1_500_000_000), "1.5 GB");
  t.is(humanBytes(2_000_000_000), "2 GB");
  t.is(humanBytes(512), "512 B");
  const now = Date.parse("2025-01-01T00:00:00Z");
  t.is(humanTime(new Date(now - 500), now), "Less than a second ago");
  t.is(humanTime(new Date(now - 90_000), now), "About a minute ago");
  t.is(humanTime(new Date(now + 4.5 * 60_000), now), "4 minutes from now");
  t.is(humanTime(new Date(now - 3 * 86_400_000), now), "3 days ago");
  t.is(humanTime(new Date(now + 292 * 365 * 86_400_000), now), "Forever");
  t.is(shortDuration(850), "850ms");
  t.is(shortDuration(125_000), "2m05s");
});

test("docs/cli.md names every flag of serve and run, and every flag serve drops", (t) => {
  const doc = readFileSync(path.join(repoRoot, "docs/cli.md"), "utf8").replace(/```[\s\S]*?```/g, "");
  const named = new Set(
    [...doc.matchAll(/`([^`]+)`/g)]
      .flatMap((m) => m[1].split(/[\s,/()|[\]]+/))
      .filter((w) => w.startsWith("-"))
      .map((w) => w.replace(/[=:].*$/, "")),
  );
  const flags = [...SERVE_FLAGS, ...RUN_FLAGS].flatMap((f) => f.flags).concat(FOREIGN_FLAGS.flatMap((f) => f.flags));
  t.deepEqual(
    flags.filter((f) => !named.has(f)),
    [],
  );
});
