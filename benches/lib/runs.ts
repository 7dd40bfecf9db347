/**
 * One prompt through each engine the benches compare, with that engine's own timings: Wick's
 * in-process Engine (weights mapped from the pack cache, as `wick serve` holds them) and
 * llama-server's native /completion (streamed, so its CPU time can be read at the first token).
 * benches/compare.ts (micro) runs them prompt after prompt; benches/paired.ts interleaves them.
 */
import { existsSync, readFileSync } from "node:fs";

import { engineSample } from "../../ts/cli/bench.ts";
import type { Engine } from "../../ts/engine/index.ts";
import { sseData } from "./sse.ts";

export interface Sample {
  prefillTps: number;
  decodeTps: number;
  promptTokens: number;
  genTokens: number;
  /** Tokens per second of the engine process's CPU time (user + system), per phase. On a
   * loaded machine wall time measures the share the scheduler gave, CPU time the work: with
   * `--threads 1` these compare the engines' work per token whatever the neighbours do
   * (ggml's spinning workers make multi-thread CPU time meaningless). */
  prefillCpuTps?: number;
  decodeCpuTps?: number;
  /** With `--floor`: the read rate probed just before and just after this sample's prompt (GB/s, their mean). */
  floorGbps?: number;
}

/** CPU seconds (user + system) a process has used so far, from /proc (Linux). */
export function procCpuS(pid: number): number {
  const f = readFileSync(`/proc/${pid}/stat`, "utf8");
  const after = f.slice(f.lastIndexOf(")") + 2).split(" ");
  // Fields 14 and 15 (utime, stime) are 11 and 12 after the state field; clock ticks of 1/100 s.
  return (Number(after[11]) + Number(after[12])) / 100;
}

/** The share of `path`'s resident pages that process `pid` maps 2 MiB at a time (FilePmdMapped
 * over Rss of the mappings of that file in /proc/PID/smaps; Linux), undefined where none is
 * resident or smaps cannot be read. A weight file mapped 4 KiB at a time costs a TLB miss per
 * page and stops the hardware prefetcher at each page's end. */
export function hugeMappedShare(pid: number | "self", path: string): number | undefined {
  let smaps: string;
  try {
    smaps = readFileSync(`/proc/${pid}/smaps`, "utf8");
  } catch {
    return undefined;
  }
  let inFile = false;
  let rss = 0;
  let pmd = 0;
  for (const line of smaps.split("\n")) {
    if (/^[0-9a-f]+-[0-9a-f]+ /.test(line)) inFile = line.endsWith(` ${path}`);
    else if (inFile && line.startsWith("Rss:")) rss += Number.parseInt(line.slice(4), 10);
    else if (inFile && line.startsWith("FilePmdMapped:")) pmd += Number.parseInt(line.slice(14), 10);
  }
  return rss > 0 ? pmd / rss : undefined;
}

/** This process's CPU seconds (user + system). */
function ownCpuS(): number {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1e6;
}

/** Wick's engine on `model`, one sequence, its repacked weights mapped from the pack cache
 * (written by a first load if need be, then loaded again from it). */
export async function loadWick(model: string, ctxSize: number, threads: number, prefillChunk = 0): Promise<Engine> {
  const { Engine } = await import("../../ts/engine/index.ts");
  const { ModelStore } = await import("../../ts/store/index.ts");
  const packCacheDir = new ModelStore().packCacheDir;
  const load = () => Engine.load({ modelPath: model, contextSize: ctxSize, threads, maxSequences: 1, prefillChunk, ...(packCacheDir ? { packCacheDir } : {}) });
  let eng = await load();
  const pack = eng.info().packCache;
  if (pack?.state === "writing") {
    while (!existsSync(pack.path!)) await new Promise((r) => setTimeout(r, 50));
    await eng.unload();
    eng = await load();
  }
  return eng;
}

/**
 * One greedy generation of `genLen` tokens (EOS ignored) through Wick's engine. `whole`: read
 * as a response that is not streamed (the engine holds the tokens to the end), so there is no
 * first-token moment to split the CPU time at.
 */
export async function wickSample(eng: Engine, promptTokens: number[], genLen: number, whole = false): Promise<Sample> {
  let done;
  const c0 = ownCpuS();
  let c1 = 0;
  for await (const ev of eng.generate({ promptTokens, maxTokens: genLen, temperature: 0, ignoreEos: true, holdEvents: whole })) {
    if (ev.type === "done") done = ev;
    else if (c1 === 0) c1 = ownCpuS();
  }
  const c2 = ownCpuS();
  const sample = engineSample(done);
  if (whole) return sample;
  return { ...sample, prefillCpuTps: sample.promptTokens / (c1 - c0), decodeCpuTps: (sample.genTokens - 1) / (c2 - c1) };
}

/**
 * One greedy generation through llama-server's /completion (process `pid`), by its timings;
 * `whole`: not streamed (as `wickSample`'s), without the CPU split.
 */
export async function llamaSample(url: string, pid: number, prompt: number[], genLen: number, whole = false): Promise<Sample> {
  const c0 = procCpuS(pid);
  const res = await fetch(`${url}/completion`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ prompt, n_predict: genLen, temperature: 0, ignore_eos: true, cache_prompt: false, stream: !whole }),
    signal: AbortSignal.timeout(1_800_000),
  });
  if (!res.ok || !res.body) throw new Error(`llama-server /completion: HTTP ${res.status} ${await res.text()}`);
  type Timings = { prompt_n: number; prompt_per_second: number; predicted_n: number; predicted_per_second: number };
  if (whole) {
    const { timings: w } = (await res.json()) as { timings: Timings };
    return { prefillTps: w.prompt_per_second, decodeTps: w.predicted_per_second, promptTokens: w.prompt_n, genTokens: w.predicted_n };
  }
  let t: Timings | undefined;
  let c1 = 0;
  for await (const ev of sseData(res) as AsyncIterable<{ timings?: Timings; stop?: boolean }>) {
    if (c1 === 0) c1 = procCpuS(pid);
    if (ev.stop && ev.timings) t = ev.timings;
  }
  const c2 = procCpuS(pid);
  if (!t) throw new Error("llama-server /completion: no timings in the stream");
  return {
    prefillTps: t.prompt_per_second,
    decodeTps: t.predicted_per_second,
    promptTokens: t.prompt_n,
    genTokens: t.predicted_n,
    prefillCpuTps: t.prompt_n / (c1 - c0),
    decodeCpuTps: (t.predicted_n - 1) / (c2 - c1),
  };
}
