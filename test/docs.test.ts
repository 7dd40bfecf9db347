/**
 * docs/architecture.md stays true: every repository path it names exists (paths are read from
 * the repository root, the core's `crates/wick-core/src` or its `kernels/`), and its answers to
 * a newcomer's questions point at code that is there.
 */
import test from "ava";
import { existsSync, readFileSync } from "node:fs";
import path from "node:path";
import { repoRoot } from "./helpers/assets.ts";

const doc = readFileSync(path.join(repoRoot, "docs/architecture.md"), "utf8");
const bases = ["", "crates/wick-core/src", "crates/wick-core/src/kernels"].map((b) => path.join(repoRoot, b));

/** Backticked paths: a slash, no spaces, not a pattern (`<arch>`, `*`), not ggml's C files. */
function namedPaths(): string[] {
  const all = [...doc.matchAll(/`([^`\s]+\/[^`\s]*)`/g)].map((m) => m[1]);
  return [...new Set(all)].filter((p) => !/[<>*]/.test(p) && !p.endsWith(".c") && !p.endsWith(".cpp"));
}

test("every path docs/architecture.md names exists", (t) => {
  // kernels/cuda/ is where CUDA kernels will go; dist/ is what `npm run build:ts` writes (a clean clone has none)
  const paths = namedPaths().filter((p) => p !== "kernels/cuda/" && !p.startsWith("dist/"));
  t.true(paths.length > 40, `only ${paths.length} paths found`);
  const missing = paths.filter((p) => !bases.some((b) => existsSync(path.join(b, p))));
  t.deepEqual(missing, []);
});

test("the doc's answers point at code that is there", (t) => {
  const src = (p: string) => readFileSync(path.join(repoRoot, p), "utf8");
  const answers: [question: string, file: string, code: RegExp][] = [
    ["the Q5_K dot product", "crates/wick-core/src/kernels/cpu/k_quants.rs", /pub fn dot_q5k\(/],
    ["its AVX2 twin", "crates/wick-core/src/kernels/cpu/x86/k_quants.rs", /pub unsafe fn dotn_q5k</],
    ["temperature from the request", "ts/service/sampling.ts", /export function samplingOptions\(/],
    ["temperature in the sampler", "crates/wick-core/src/sampling/mod.rs", /pub fn sample\(/],
    ["the kernels' home", "crates/wick-core/src/kernels/mod.rs", /`cuda\/`/],
  ];
  for (const [question, file, code] of answers) {
    t.true(doc.includes(file.replace(/^crates\/wick-core\/src\/(kernels\/)?/, "")), `the doc names ${file} for ${question}`);
    t.regex(src(file), code, question);
  }
  t.regex(doc, /a new CUDA kernel goes in `kernels\/cuda\/`/);
});
