/**
 * `wick bench`, like llama-bench: prefill tokens/s of an n-token prompt and decode tokens/s of
 * n generated tokens, repeated, reported as median and min–max, as a table or JSON.
 * `measureEngine` is also what benches/compare.ts runs for Wick's side of a comparison.
 */
import path from "node:path";
import { statSync } from "node:fs";
import { Engine, type EngineEvent } from "../engine/index.ts";
import { ModelStore } from "../store/index.ts";

export interface BenchOptions {
  model: string;
  threads?: number;
  nPrompt: number;
  nGen: number;
  repetitions: number;
  output: "table" | "json";
  /** false: pack at load, no pack cache (`--no-mmap`). */
  mmap?: boolean;
}

export interface BenchSample {
  prefillTps: number;
  decodeTps: number;
  promptTokens: number;
  genTokens: number;
}

export interface Summary {
  median: number;
  min: number;
  max: number;
  n: number;
}

export function summarize(xs: number[]): Summary {
  const s = [...xs].sort((a, b) => a - b);
  const mid = s.length >> 1;
  const median = s.length % 2 ? s[mid] : (s[mid - 1] + s[mid]) / 2;
  return { median, min: s[0], max: s[s.length - 1], n: s.length };
}

/** Runs each prompt alone (temperature 0, EOS ignored) and reads the engine's own timings. */
export async function measureEngine(engine: Engine, prompts: number[][], nGen: number): Promise<BenchSample[]> {
  const samples: BenchSample[] = [];
  for (const promptTokens of prompts) {
    let done;
    for await (const ev of engine.generate({ promptTokens, maxTokens: nGen, temperature: 0, ignoreEos: true })) {
      if (ev.type === "done") done = ev;
    }
    samples.push(engineSample(done));
  }
  return samples;
}

/** One generation's rates from the engine's own timings (its done event). */
export function engineSample(done: Extract<EngineEvent, { type: "done" }> | undefined): BenchSample {
  if (!done) throw new Error("the engine ended a sequence without a done event");
  const { usage, timings } = done;
  const prefilled = usage.promptTokens - usage.cachedTokens;
  return {
    prefillTps: prefilled / (timings.promptMs / 1000),
    // The first token comes out of the prefill step; decode is the steps after it.
    decodeTps: (usage.completionTokens - 1) / (timings.decodeMs / 1000),
    promptTokens: prefilled,
    genTokens: usage.completionTokens,
  };
}

/** Deterministic pseudo-random prompt ids (as llama-bench, content does not matter for speed). */
function randomPrompt(nVocab: number, n: number, seed: number): number[] {
  let x = (seed * 2654435761) >>> 0 || 1;
  return Array.from({ length: n }, () => {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    return 100 + ((x >>> 0) % Math.max(1, nVocab - 200));
  });
}

export async function bench(opts: BenchOptions): Promise<void> {
  const engine = await Engine.load({
    modelPath: opts.model,
    contextSize: opts.nPrompt + opts.nGen + 16,
    threads: opts.threads,
    maxSequences: 1,
    prefillChunk: 0, // the whole prompt in one pass, as llama-bench's pp test
    prefixCache: false, // every repetition prefills the whole prompt
    // The weights as `wick serve` holds them: mapped from the pack cache after a model's first load.
    ...new ModelStore().packCache(opts.mmap),
  });
  try {
    const info = engine.info();
    const prompts = Array.from({ length: opts.repetitions + 1 }, (_, i) => randomPrompt(info.nVocab, opts.nPrompt, i + 1));
    const samples = (await measureEngine(engine, prompts, opts.nGen)).slice(1); // first run warms up
    const result = {
      model: path.basename(opts.model),
      architecture: info.architecture,
      sizeBytes: statSync(opts.model).size,
      params: info.nParams,
      threads: opts.threads ?? null,
      nPrompt: opts.nPrompt,
      nGen: opts.nGen,
      prefill: summarize(samples.map((s) => s.prefillTps)),
      decode: summarize(samples.map((s) => s.decodeTps)),
      samples,
    };
    if (opts.output === "json") {
      process.stdout.write(`${JSON.stringify(result, null, 2)}\n`);
      return;
    }
    const f = (x: number) => x.toFixed(1);
    const row = (test: string, s: Summary) =>
      `| ${result.model} | ${(result.sizeBytes / 2 ** 20).toFixed(1)} MiB | ${(result.params / 1e6).toFixed(1)} M | ${opts.threads ?? "auto"} | ${test} | ${f(s.median)} | ${f(s.min)}–${f(s.max)} |`;
    process.stdout.write(
      [
        "| model | size | params | threads | test | t/s (median) | min–max |",
        "| --- | --- | --- | --- | --- | --- | --- |",
        row(`pp${opts.nPrompt}`, result.prefill),
        row(`tg${opts.nGen}`, result.decode),
        "",
        `${opts.repetitions} repetitions after 1 warm-up.`,
        "",
      ].join("\n"),
    );
  } finally {
    await engine.unload();
  }
}
