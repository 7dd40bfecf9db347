/**
 * Decode with the engine's events read token by token (a streamed answer) against held to the
 * end (`holdEvents`, a whole answer), alternating on one loaded engine: what waking the JS
 * thread per token costs while the decoding threads hold every core.
 *
 *   npx tsx benches/held-events.ts MODEL [--bench-dir DIR] [--threads 2] [--rounds 5] [--gen-len 128] [--results benches/RESULTS.md]
 */
import { resolve } from "node:path";

import { summarize } from "../ts/cli/bench.ts";
import { modelPath } from "./compare.ts";
import { appendResults } from "./lib/provenance.ts";
import { loadWick, wickSample } from "./lib/runs.ts";
import { fmt, markdownTable, num, parseArgs } from "./serving.ts";

const { flags, positional } = parseArgs(process.argv.slice(2));
const model = modelPath(positional[0] ?? "", flags);
const threads = num(flags, "threads", 2);
const rounds = num(flags, "rounds", 5);
const genLen = num(flags, "gen-len", 128);
const eng = await loadWick(model, 1024, threads);
const prompt = Array.from({ length: 16 }, (_, i) => 100 + i);
await wickSample(eng, prompt, 32);
const rows: string[][] = [];
const ratios: number[] = [];
for (let r = 1; r <= rounds; r++) {
  // streamed, held, streamed: the held run against the mean of the two around it
  const a = await wickSample(eng, prompt, genLen, false);
  const h = await wickSample(eng, prompt, genLen, true);
  const b = await wickSample(eng, prompt, genLen, false);
  const ratio = (2 * h.decodeTps) / (a.decodeTps + b.decodeTps);
  ratios.push(ratio);
  rows.push([String(r), fmt(a.decodeTps), fmt(h.decodeTps), fmt(b.decodeTps), fmt(ratio, 3)]);
  process.stderr.write(`round ${r}/${rounds}: streamed ${fmt(a.decodeTps)} held ${fmt(h.decodeTps)} streamed ${fmt(b.decodeTps)}\n`);
}
await eng.unload();
const s = summarize(ratios);
const body = [
  `Model ${model}, threads=${threads}, 16-token prompt, ${genLen} generated (greedy, EOS ignored); decode tok/s by the engine's own timings.`,
  "",
  markdownTable(["round", "streamed", "held", "streamed", "held / streamed"], rows),
  "",
  `held / streamed: median ${fmt(s.median, 3)} (${fmt(s.min, 3)}–${fmt(s.max, 3)}, n=${s.n})`,
].join("\n");
console.log(body);
if (flags.get("results")) appendResults(resolve(process.cwd(), flags.get("results")!), "benches/held-events.ts", "decode, events streamed vs held: wick", body);
