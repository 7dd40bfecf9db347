/**
 * A/B of two Wick builds: `wick bench` (prefill of a 512-token prompt, decode of 128 tokens)
 * run from two checkouts, each with its own built addon, alternating A and B every round so
 * drifts in the machine's speed fall on both. Prints per model the median over rounds of each
 * build's per-round median, the spread of those medians, and B / A.
 *
 *   npx tsx benches/ab.ts --a <checkout> --b <checkout> [--rounds 3] [--threads 2]
 *       [--repetitions 3] [--n-prompt 512] [--n-gen 128] [--results benches/RESULTS.md] model.gguf ...
 *
 * A checkout is a git worktree of Wick with `npm run build:native` done (e.g.
 * `git worktree add /tmp/wick-a <rev>` plus a build there); models are given as paths.
 */
import { execFileSync } from "node:child_process";
import { appendFileSync } from "node:fs";
import { basename, join, resolve } from "node:path";

import { summarize } from "../ts/cli/bench.ts";

interface Args {
  a: string;
  b: string;
  rounds: number;
  threads: number;
  repetitions: number;
  nPrompt: number;
  nGen: number;
  results?: string;
  models: string[];
}

function parse(argv: string[]): Args {
  const out: Partial<Args> & { models: string[] } = { rounds: 3, threads: 2, repetitions: 3, nPrompt: 512, nGen: 128, models: [] };
  for (let i = 0; i < argv.length; i++) {
    const v = () => {
      const next = argv[++i];
      if (next === undefined) throw new Error(`${argv[i - 1]} needs a value`);
      return next;
    };
    switch (argv[i]) {
      case "--a": out.a = resolve(v()); break;
      case "--b": out.b = resolve(v()); break;
      case "--rounds": out.rounds = Number(v()); break;
      case "--threads": out.threads = Number(v()); break;
      case "--repetitions": out.repetitions = Number(v()); break;
      case "--n-prompt": out.nPrompt = Number(v()); break;
      case "--n-gen": out.nGen = Number(v()); break;
      case "--results": out.results = v(); break;
      default: out.models.push(resolve(argv[i]!));
    }
  }
  if (!out.a || !out.b || out.models.length === 0) throw new Error("usage: ab.ts --a <checkout> --b <checkout> model.gguf ...");
  return out as Args;
}

/** One `wick bench` of `checkout` on `model`: the medians of its repetitions. */
function bench(checkout: string, model: string, args: Args): { prefill: number; decode: number } {
  const out = execFileSync(
    process.execPath,
    [join(checkout, "bin/wick.js"), "bench", "-m", model, "-t", String(args.threads), "-r", String(args.repetitions), "-o", "json"],
    { cwd: checkout, encoding: "utf8", stdio: ["ignore", "pipe", "inherit"] },
  );
  const r = JSON.parse(out) as { prefill: { median: number }; decode: { median: number } };
  return { prefill: r.prefill.median, decode: r.decode.median };
}

function rev(checkout: string): string {
  return execFileSync("git", ["-C", checkout, "rev-parse", "--short", "HEAD"], { encoding: "utf8" }).trim();
}

const args = parse(process.argv.slice(2));
const runs = new Map<string, { a: { prefill: number; decode: number }[]; b: { prefill: number; decode: number }[] }>();
for (const m of args.models) runs.set(m, { a: [], b: [] });
for (let round = 0; round < args.rounds; round++) {
  for (const m of args.models) {
    // Alternate which build goes first.
    const order: ("a" | "b")[] = round % 2 === 0 ? ["a", "b"] : ["b", "a"];
    for (const side of order) {
      const r = bench(side === "a" ? args.a : args.b, m, args);
      runs.get(m)![side].push(r);
      process.stderr.write(`round ${round + 1} ${side} ${basename(m)}: pp ${r.prefill.toFixed(1)} tg ${r.decode.toFixed(1)}\n`);
    }
  }
}

const f = (x: number) => x.toFixed(1);
const cell = (xs: number[]) => {
  const s = summarize(xs);
  return `${f(s.median)} (${f(s.min)}–${f(s.max)})`;
};
const lines = [
  `| model | A prefill t/s | B prefill t/s | B/A | paired B/A | A decode t/s | B decode t/s | B/A | paired B/A |`,
  `| --- | --- | --- | --- | --- | --- | --- | --- | --- |`,
];
for (const [m, { a, b }] of runs) {
  const med = (xs: number[]) => summarize(xs).median;
  const pa = a.map((r) => r.prefill), pb = b.map((r) => r.prefill);
  const da = a.map((r) => r.decode), db = b.map((r) => r.decode);
  // The same round's B over A: drifts of the machine between rounds cancel.
  const paired = (xb: number[], xa: number[]) => med(xb.map((x, i) => x / xa[i]!)).toFixed(3);
  lines.push(
    `| ${basename(m)} | ${cell(pa)} | ${cell(pb)} | ${(med(pb) / med(pa)).toFixed(3)} | ${paired(pb, pa)} | ${cell(da)} | ${cell(db)} | ${(med(db) / med(da)).toFixed(3)} | ${paired(db, da)} |`,
  );
}
const header = [
  `A = ${rev(args.a)} (${args.a}), B = ${rev(args.b)} (${args.b}); ${args.threads} threads, ${args.rounds} alternating rounds,`,
  `each the median of ${args.repetitions} repetitions (pp${args.nPrompt}, tg${args.nGen}) after one warm-up; cells: median of rounds (min–max).`,
];
const table = [...header, "", ...lines, ""].join("\n");
process.stdout.write(`${table}\n`);
if (args.results) {
  const cmd = `npx tsx benches/ab.ts ${process.argv.slice(2).join(" ")}`;
  appendFileSync(args.results, `\n## ${new Date().toISOString().slice(0, 16).replace("T", " ")} UTC — A/B of two builds\n\n- command: \`${cmd}\`\n\n${table}`);
}
