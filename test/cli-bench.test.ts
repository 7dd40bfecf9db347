/** `wick bench` as a user runs it: the real CLI in a child process on a fixture model. */
import test from "ava";
import { execFile } from "node:child_process";
import path from "node:path";
import { promisify } from "node:util";
import { fixture, needs, repoRoot } from "./helpers/assets.ts";

const run = promisify(execFile);
const wick = path.join(repoRoot, "bin/wick.js");

const tinyLlama = needs(fixture("tiny-llama-q8_0.gguf"));

tinyLlama.test("wick bench reports prefill and decode tokens/s as JSON", async (t) => {
  const model = tinyLlama.path!;
  const { stdout } = await run("node", [wick, "bench", "-m", model, "-t", "1", "-p", "32", "-n", "8", "-r", "2", "-o", "json"], { cwd: repoRoot });
  const r = JSON.parse(stdout);
  t.is(r.architecture, "llama");
  t.is(r.nPrompt, 32);
  t.is(r.samples.length, 2);
  for (const s of r.samples) {
    t.is(s.promptTokens, 32);
    t.is(s.genTokens, 8);
  }
  t.true(r.prefill.median > 0 && r.decode.median > 0);
  t.true(r.prefill.min <= r.prefill.median && r.prefill.median <= r.prefill.max);
});

test("wick bench names the flag it rejects", async (t) => {
  const err = await t.throwsAsync(run("node", [wick, "bench", "-m", "x.gguf", "-r", "0"], { cwd: repoRoot }));
  t.regex((err as unknown as { stderr: string }).stderr, /--repetitions/);
});
