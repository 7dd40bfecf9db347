// Two parity reference files of one model (greedy-ref*.mjs), side by side: per file, how many
// prompts' greedy ids agree, the first step where they part, and the largest difference in the
// probability of a top token both list (over the steps both saw the same tokens before). For the spread between two llama.cpp builds (e.g. its
// aarch64 and x86 builds) next to Wick's parity with each.
//
//   node scripts/compare-refs.mjs <a.json> <b.json>
import { readFileSync } from "node:fs";
import path from "node:path";

const [fa, fb] = process.argv.slice(2);
if (!fa || !fb) {
  console.error("usage: compare-refs.mjs <a.json> <b.json>");
  process.exit(2);
}
const [a, b] = [fa, fb].map((f) => JSON.parse(readFileSync(f, "utf8")));
let same = 0;
let maxDp = 0;
const firsts = [];
a.results.forEach((ra, i) => {
  const rb = b.results[i];
  const first = ra.tokens.findIndex((t, k) => t !== rb.tokens[k]);
  if (first < 0 && ra.tokens.length === rb.tokens.length) same++;
  else firsts.push(first);
  // Probabilities compare only while both runs saw the same tokens.
  const parted = ra.probTokens.findIndex((t, k) => t !== rb.probTokens[k]);
  ra.steps.slice(0, parted < 0 ? undefined : parted + 1).forEach((sa, k) => {
    const pb = new Map(rb.steps[k] ?? []);
    for (const [id, p] of sa) if (pb.has(id)) maxDp = Math.max(maxDp, Math.abs(p - pb.get(id)));
  });
});
const name = path.basename(fa, ".json");
const parted = firsts.length ? `, parting at step ${firsts.join(", ")}` : "";
console.log(`${name.padEnd(40)} greedy ${same}/${a.results.length} sequences identical${parted}; max |Δp| ${maxDp.toFixed(5)} on top tokens`);
