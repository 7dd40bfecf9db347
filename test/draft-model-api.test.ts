/**
 * Speculative decoding with a draft model through a real `wick serve` on loopback
 * (llama-server's `--model-draft` / `-md`, `--draft-p-min`; per request `speculative.type`
 * `draft-simple`, `speculative.p_min`): SmolLM2 drafting for itself, so its guesses are kept
 * while its answers are the same with drafting on and off (greedy, and sampled with a seed).
 * A draft model of another vocabulary stops the server at start with one line; a request for
 * draft-model drafts on a server without one is a 400.
 */
import test from "ava";
import type OpenAI from "openai";
import { fixture, needs, smollm2 } from "./helpers/assets.ts";
import { BIN, cliHome, wick, type CliHome } from "./helpers/cli.ts";
import { spawnServe, type ServedProcess } from "./helpers/process.ts";
import { openaiClient, postJson } from "./helpers/server.ts";
import { chatText, specCounters } from "./helpers/speculation.ts";

/** A fixture: its small vocabulary is not SmolLM2's. */
const otherVocab = fixture("tiny-llama-q8_0.gguf");
const need = needs(smollm2(), otherVocab);
let home: CliHome;
let served: ServedProcess;
let client: OpenAI;

test.before(async () => {
  if (!need.path) return;
  home = await cliHome();
  served = await spawnServe(BIN, ["-m", need.path, "-md", need.path, "--port", "0", "-c", "2048", "-np", "2", "--draft-max", "8"], { cwd: home.home, env: home.env });
  client = openaiClient(served.url);
});

test.after.always(async () => {
  served?.child.kill("SIGTERM");
  await served?.exit;
  await home?.close();
});

const MESSAGES = [{ role: "user" as const, content: "Write four sentences about a lighthouse keeper who finds a message in a bottle." }];

const chat = (extra: Record<string, unknown>) => chatText(client, MESSAGES, extra);
const counters = () => specCounters(served.url);

need.serial("-md: the same answer as without drafts, guesses made and kept", async (t) => {
  for (const sampling of [{ temperature: 0 }, { temperature: 0.8, seed: 5 }]) {
    const before = await counters();
    const fast = await chat(sampling);
    const mid = await counters();
    const plain = await chat({ ...sampling, "speculative.type": "none" });
    const after = await counters();
    t.is(fast, plain, `${JSON.stringify(sampling)}: the answer changed with the draft model`);
    t.true(mid.accepted - before.accepted > 16, `${JSON.stringify(sampling)}: few guesses kept (${JSON.stringify({ before, mid })})`);
    t.is(after.drafted, mid.drafted, "speculative.type none still drafted");
    t.log(`${JSON.stringify(sampling)}: ${mid.accepted - before.accepted} of ${mid.drafted - before.drafted} guesses kept`);
  }
  // Per request: n-gram drafts instead, or a stricter p_min; the same answer.
  const greedy = await chat({ temperature: 0 });
  t.is(await chat({ temperature: 0, "speculative.type": "ngram-simple" }), greedy);
  t.is(await chat({ temperature: 0, "speculative.p_min": 0.9, "speculative.n_max": 3 }), greedy);
});

need.serial("bad draft settings are 400s in OpenAI's shape, and the server serves on", async (t) => {
  for (const body of [{ "speculative.p_min": 2 }, { "speculative.p_min": -0.1 }, { "speculative.type": "draft-eagle" }]) {
    const r = await postJson(`${served.url}/v1/chat/completions`, { model: "any", messages: MESSAGES, max_tokens: 4, ...body });
    t.is(r.status, 400, JSON.stringify(body));
    t.is((r.json as { error?: { type?: string } }).error?.type, "invalid_request_error", JSON.stringify(body));
  }
  t.truthy(await chat({ temperature: 0, max_tokens: 4 }));
});

need.serial("a draft model of another vocabulary, or without -m, stops wick serve with one line", async (t) => {
  const r = await wick(["serve", "-m", need.path!, "-md", "path" in otherVocab ? otherVocab.path : "", "--port", "0"], { env: home.env, timeoutMs: 30_000 });
  t.not(r.status, 0);
  t.regex(r.stderr, /draft model .*tokenizer/);
  const alone = await wick(["serve", "-md", need.path!, "--port", "0"], { env: home.env, timeoutMs: 20_000 });
  t.not(alone.status, 0);
  t.regex(alone.stderr, /--model-draft needs -m/);
});
