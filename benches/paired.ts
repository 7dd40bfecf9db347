/**
 * Decode and prefill, Wick vs llama-server, in pairs: both engines loaded side by side, each
 * prompt run through one and then the other (the order alternating pair by pair), with the
 * machine's read rate probed before and after every pair.
 *
 * Why pairs: this VM's read rate moves by up to 2× within minutes (two vCPUs sharing a core's
 * bandwidth or not; benches/RESULTS.md, session 29), and `compare.ts micro` runs each engine's
 * prompts as one block, so its two engines may meet different spells. Here the two runs of a
 * pair are seconds apart: each pair's ratio is a same-moment ratio, and pairs are grouped by
 * the rate probed around them (slow: both probes below `--fast-gbps`; fast: both at or above it;
 * a pair between the two counts in the overall figures only).
 *
 *   npx tsx benches/paired.ts MODEL... [--bench-dir DIR] [--threads 2] [--pairs 8]
 *       [--prompt-len 512] [--gen-len 128] [--fast-gbps 60] [--answers stream|whole] [--json out.json]
 *       [--results benches/RESULTS.md]
 *   npx tsx benches/paired.ts --pool a.json,b.json,... [--fast-gbps 60] [--results benches/RESULTS.md]
 *
 * MODEL: a path or a bench alias of compare.ts (`lfm2.5-1.2b-q8_0`, `lfm2.5-1.2b-q4km`,
 * `lfm2-8b-a1b-q4km` with `--bench-dir .cache/tmp/bench-real`). Wick runs in this process (its
 * Engine, weights mapped from the pack cache), llama-server as its own process; each idles (its
 * threads parked) while the other runs. `--answers whole`: both engines answer as to a request
 * that is not streamed (llama-server `stream: false`; Wick's engine holds the tokens to the end),
 * instead of token by token. `--pool` prints the summary over the pairs of several
 * runs' `--json` files, model by model: one run's 5–8 pairs in a spell spread by ±0.1 in ratio.
 */
import { readFileSync, realpathSync, writeFileSync } from "node:fs";
import { basename, resolve } from "node:path";

import { summarize, type Summary } from "../ts/cli/bench.ts";
import { idPrompts, llamaTokenizer, modelPath, percent, startServer, stopServer } from "./compare.ts";
import { decodeBytes, probeFloorGbps, startProber } from "./lib/floor.ts";
import { appendResults } from "./lib/provenance.ts";
import { hugeMappedShare, llamaSample, loadWick, wickSample, type Sample } from "./lib/runs.ts";
import { fmt, markdownTable, num, parseArgs } from "./serving.ts";

interface Pair {
  /** The read rate probed before and after the pair, GB/s. */
  before: number;
  after: number;
  wick: Sample;
  llama: Sample;
  wickFirst: boolean;
}

interface ModelRun {
  model: string;
  /** Weight bytes one decoded token streams. */
  bytes: number;
  /** The share of each engine's weight pages mapped 2 MiB at a time, after the warm-up. */
  huge?: { wick?: number; llama?: number };
  pairs: Pair[];
}

const rate = (p: Pair) => (p.before + p.after) / 2;

/** `--answers stream|whole`: each prompt's answer streamed token by token (the default), or read whole as a response that is not streamed. */
function answers(flags: Map<string, string>): "stream" | "whole" {
  const a = flags.get("answers") ?? "stream";
  if (a !== "stream" && a !== "whole") throw new Error(`--answers: stream or whole, not ${a}`);
  return a;
}

/** Share of the floor: decode tok/s × bytes per token over the probed rate. */
const ofFloor = (tps: number, bytes: number, gbps: number) => (tps * bytes) / (gbps * 1e9);

async function runModel(model: string, flags: Map<string, string>): Promise<ModelRun> {
  const threads = num(flags, "threads", 2);
  const nPairs = num(flags, "pairs", 8);
  const promptLen = num(flags, "prompt-len", 512);
  const genLen = num(flags, "gen-len", 128);
  const tok = await llamaTokenizer(model);
  // One warm-up prompt, then one per pair.
  const prompts = await idPrompts(tok, nPairs + 1, promptLen, num(flags, "seed", 0));
  await tok.dispose();
  const ctxSize = Math.ceil((promptLen + genLen + 16) / 256) * 256;
  const bytes = await decodeBytes(model);
  // Every child process before Wick's engine loads: a spawn from a process holding an engine forks
  // it, and the engine's next prompt takes a copy-on-write fault per page it writes (lib/floor.ts).
  startProber();
  const server = await startServer("llama", "llama-server-paired", model, threads, 1, ctxSize);
  const pairs: Pair[] = [];
  let huge: ModelRun["huge"];
  try {
    const eng = await loadWick(model, ctxSize, threads);
    try {
      const pid = server.proc.pid!;
      const whole = answers(flags) === "whole";
      const wick = (p: number[]) => wickSample(eng, p, genLen, whole);
      const llama = (p: number[]) => llamaSample(server.url, pid, p, genLen, whole);
      await wick(prompts[0]!);
      await llama(prompts[0]!);
      const pack = eng.info().packCache?.path;
      huge = { wick: pack ? hugeMappedShare("self", realpathSync(pack)) : undefined, llama: hugeMappedShare(pid, realpathSync(model)) };
      let before = await probeFloorGbps();
      for (let i = 1; i <= nPairs; i++) {
        const p = prompts[i]!;
        const wickFirst = i % 2 === 1;
        const first = await (wickFirst ? wick(p) : llama(p));
        const second = await (wickFirst ? llama(p) : wick(p));
        const after = await probeFloorGbps();
        const pair = { before, after, wick: wickFirst ? first : second, llama: wickFirst ? second : first, wickFirst };
        pairs.push(pair);
        process.stderr.write(
          `${basename(model)} pair ${i}/${nPairs}: read ${fmt(before)}→${fmt(after)} GB/s, decode wick ${fmt(pair.wick.decodeTps)} llama ${fmt(pair.llama.decodeTps)} (${fmt(pair.wick.decodeTps / pair.llama.decodeTps, 2)}×)\n`,
        );
        before = after;
      }
    } finally {
      await eng.unload();
    }
  } finally {
    await stopServer(server);
  }
  return { model, bytes, huge, pairs };
}

function range(s: Summary | undefined, digits = 2): string {
  return s ? `${fmt(s.median, digits)} (${fmt(s.min, digits)}–${fmt(s.max, digits)}, n=${s.n})` : "-";
}

function pairTable(r: ModelRun): string {
  const rows = r.pairs.map((p, i) => [
    String(i + 1),
    p.wickFirst ? "wick" : "llama",
    `${fmt(p.before)}→${fmt(p.after)}`,
    fmt(p.wick.prefillTps),
    fmt(p.llama.prefillTps),
    fmt(p.wick.prefillTps / p.llama.prefillTps, 2),
    fmt(p.wick.decodeTps),
    fmt(p.llama.decodeTps),
    fmt(p.wick.decodeTps / p.llama.decodeTps, 2),
    `${fmt(100 * ofFloor(p.wick.decodeTps, r.bytes, rate(p)), 0)} %`,
    `${fmt(100 * ofFloor(p.llama.decodeTps, r.bytes, rate(p)), 0)} %`,
  ]);
  const head = ["pair", "first", "read rate GB/s (before→after)", "prefill wick", "prefill llama", "prefill ×", "decode wick", "decode llama", "decode ×", "wick of floor", "llama of floor"];
  return markdownTable(head, rows);
}

/** Per model: the pairs' decode and prefill ratios, all and by the read rate's spell. */
function summaryTable(runs: ModelRun[], fastGbps: number): string {
  const rows = runs.map((r) => {
    const ratios = (ps: Pair[]) => (ps.length ? summarize(ps.map((p) => p.wick.decodeTps / p.llama.decodeTps)) : undefined);
    // A pair whose probes straddle the line met both spells: in the "all" column only.
    const slow = r.pairs.filter((p) => Math.max(p.before, p.after) < fastGbps);
    const fast = r.pairs.filter((p) => Math.min(p.before, p.after) >= fastGbps);
    const floor = (ps: Pair[], pick: (p: Pair) => number) => (ps.length ? summarize(ps.map((p) => ofFloor(pick(p), r.bytes, rate(p)))) : undefined);
    return [
      basename(r.model),
      fmt(r.bytes / 1e6),
      range(summarize(r.pairs.map((p) => p.wick.prefillTps / p.llama.prefillTps))),
      range(ratios(r.pairs)),
      range(ratios(slow)),
      range(ratios(fast)),
      percent(floor(slow, (p) => p.wick.decodeTps)),
      percent(floor(slow, (p) => p.llama.decodeTps)),
      [r.huge?.wick, r.huge?.llama].map((h) => (h === undefined ? "-" : `${fmt(100 * h, 0)} %`)).join(" / "),
    ];
  });
  const head = [
    "model",
    "MB / token",
    "prefill × (all)",
    "decode × (all)",
    `decode × (read < ${fastGbps} GB/s)`,
    `decode × (read ≥ ${fastGbps} GB/s)`,
    "wick of floor (slow)",
    "llama of floor (slow)",
    "2 MiB-mapped weights, wick / llama",
  ];
  return markdownTable(head, rows);
}

/** The runs saved by `--json` in `files`, their pairs pooled by model (file name); the mapping
 * shares are the first run's that has them. */
function pooled(files: string[]): ModelRun[] {
  const byModel = new Map<string, ModelRun>();
  for (const f of files) {
    for (const r of JSON.parse(readFileSync(f, "utf8")) as ModelRun[]) {
      const had = byModel.get(basename(r.model));
      if (had) {
        had.pairs.push(...r.pairs);
        had.huge ??= r.huge;
      } else byModel.set(basename(r.model), { ...r, pairs: [...r.pairs] });
    }
  }
  return [...byModel.values()];
}

async function main(): Promise<void> {
  const { flags, positional } = parseArgs(process.argv.slice(2));
  const pool = flags.get("pool");
  if (pool) {
    const files = pool.split(",");
    const body = [`Pairs of ${files.length} runs pooled (${files.map((f) => basename(f)).join(", ")}), as each run's table above.`, "", summaryTable(pooled(files), num(flags, "fast-gbps", 60))].join(
      "\n",
    );
    console.log(body);
    if (flags.get("results")) appendResults(resolve(process.cwd(), flags.get("results")!), "benches/paired.ts", "paired decode, runs pooled: wick, llama-server", body);
    return;
  }
  if (positional.length === 0) throw new Error("usage: npx tsx benches/paired.ts MODEL... [--bench-dir DIR] [--pairs 8] [--results FILE]");
  const models = positional.map((m) => modelPath(m, flags));
  const fastGbps = num(flags, "fast-gbps", 60);
  const runs: ModelRun[] = [];
  for (const m of models) runs.push(await runModel(m, flags));
  const notes = [
    `Pairs: each prompt (${num(flags, "prompt-len", 512)} random tokens, ${num(flags, "gen-len", 128)} generated, temperature 0, EOS ignored) through Wick's in-process Engine and llama-server's /completion one after the other, the order alternating, after one warm-up of each; threads=${num(flags, "threads", 2)}.`,
    "Rates are each engine's own timings (Wick: promptMs/decodeMs; llama-server: prompt_per_second/predicted_per_second). × = Wick / llama-server within the pair.",
    "Read rate: `kernel_timing -- floor` (best 2-thread pass over 1 GiB) before and after each pair; of floor = decode tok/s × the weight bytes a token streams (GgufInfo.decodeBytes) over the pair's mean read rate.",
    "2 MiB-mapped: the share of each engine's resident weight pages (Wick's pack cache file, llama-server's GGUF) mapped as huge pages after the warm-up (/proc/PID/smaps).",
  ].join(" ");
  const body = [notes, "", summaryTable(runs, fastGbps), ...runs.flatMap((r) => ["", `${basename(r.model)}:`, "", pairTable(r)])].join("\n");
  console.log(body);
  if (flags.get("json")) writeFileSync(flags.get("json")!, JSON.stringify(runs, null, 2));
  if (flags.get("results")) appendResults(resolve(process.cwd(), flags.get("results")!), "benches/paired.ts", "paired decode: wick, llama-server", body);
}

main().then(
  () => process.exit(0),
  (err) => {
    console.error(`paired: ${(err as Error).message ?? err}`);
    process.exit(1);
  },
);
