/**
 * Speculative decoding through a real `wick serve` (a child process on loopback) on SmolLM2:
 * llama-server's flags (`--spec-type ngram-simple --draft-max`) and per-request fields
 * (`speculative.type`, `speculative.n_max`), vLLM's `--speculative-config`, the vLLM-named
 * counters on /metrics. The answer is the same with speculation on and off (greedy, and sampled
 * with a seed) while drafts are made and accepted; bad settings are refused in each place.
 */
import test from "ava";
import type OpenAI from "openai";
import { normalizeArgv } from "../ts/cli/flags.ts";
import { speculativeConfig } from "../ts/cli/values.ts";
import { fileURLToPath } from "node:url";
import { draftModelFromFlags, requestSpeculation, speculationFromFlags } from "../ts/service/speculation.ts";
import { needs, smollm2 } from "./helpers/assets.ts";
import { BIN, cliHome, wick, type CliHome } from "./helpers/cli.ts";
import { spawnServe, type ServedProcess } from "./helpers/process.ts";
import { openaiClient, postJson } from "./helpers/server.ts";
import { chatText, specCounters } from "./helpers/speculation.ts";

const need = needs(smollm2());
let home: CliHome;
let served: ServedProcess;
let client: OpenAI;

test.before(async () => {
  if (!need.path) return;
  home = await cliHome();
  served = await spawnServe(BIN, ["-m", need.path, "--port", "0", "-c", "2048", "-np", "2", "--spec-type", "ngram-simple", "--draft-max", "6"], { cwd: home.home, env: home.env });
  client = openaiClient(served.url);
});

test.after.always(async () => {
  served?.child.kill("SIGTERM");
  await served?.exit;
  await home?.close();
});

const CODE = Array.from({ length: 6 }, (_, i) => `def area_${i}(width, height):\n    scale = ${i + 2}\n    return width * height * scale\n`).join("\n");
const MESSAGES = [{ role: "user" as const, content: `Rename the parameter width to w in this code, and print all of it:\n\n${CODE}` }];

const chat = (extra: Record<string, unknown>) => chatText(client, MESSAGES, extra);
const counters = () => specCounters(served.url);

need.serial("--spec-type ngram-simple: the same answer as with speculation off per request, drafts made and accepted", async (t) => {
  for (const sampling of [{ temperature: 0 }, { temperature: 0.8, seed: 11 }]) {
    const before = await counters();
    const fast = await chat(sampling);
    const mid = await counters();
    const plain = await chat({ ...sampling, "speculative.type": "none" });
    const after = await counters();
    t.is(fast, plain, `${JSON.stringify(sampling)}: the answer changed with speculation`);
    t.true(mid.drafts > before.drafts && mid.accepted > before.accepted, `${JSON.stringify(sampling)}: no draft accepted (${JSON.stringify({ before, mid })})`);
    t.is(after.drafted, mid.drafted, "speculative.type none still drafted");
    t.log(`${JSON.stringify(sampling)}: ${mid.accepted - before.accepted} of ${mid.drafted - before.drafted} drafted tokens accepted`);
  }
  // /v1/completions, and n_max per request.
  const completion = async (extra: Record<string, unknown>) =>
    (await client.completions.create({ model: "any", prompt: CODE + "\n" + CODE.slice(0, 40), max_tokens: 48, temperature: 0, ...extra } as OpenAI.CompletionCreateParamsNonStreaming)).choices[0].text;
  t.is(await completion({ "speculative.n_max": 2 }), await completion({ "speculative.n_max": 0 }));
});

need.serial("bad per-request settings are 400s in OpenAI's shape, and the server serves on", async (t) => {
  // draft-simple: this server has no draft model.
  for (const body of [{ "speculative.n_max": 65 }, { "speculative.type": "eagle" }, { "speculative.ngram_size_n": 0 }, { "speculative.n_min": 9 }, { "speculative.type": "draft-simple" }]) {
    const r = await postJson(`${served.url}/v1/chat/completions`, { model: "any", messages: MESSAGES, max_tokens: 4, ...body });
    t.is(r.status, 400, JSON.stringify(body));
    t.is((r.json as { error?: { type?: string } }).error?.type, "invalid_request_error", JSON.stringify(body));
  }
  t.truthy(await chat({ temperature: 0, max_tokens: 4 }));
});

test("the flags: llama-server's and vLLM's spellings, checked", (t) => {
  t.deepEqual(normalizeArgv(["serve", "--draft", "5", "--spec-draft-n-min", "2"]).args, ["serve", "--draft-max", "5", "--draft-min", "2"]);
  t.deepEqual(speculationFromFlags({ specType: "ngram-simple" }), { method: "ngram", draftMax: 16, draftMin: 1, ngramMin: 2, ngramMax: 4 });
  t.deepEqual(speculationFromFlags({ specType: "ngram-simple", draftMax: 12, specNgramSize: 3 }), { method: "ngram", draftMax: 12, draftMin: 1, ngramMin: 3, ngramMax: 3 });
  // A draft model turns its drafting on; --spec-type still chooses.
  t.deepEqual(speculationFromFlags({ modelDraft: "d.gguf" }), { method: "draft", draftMax: 16, draftMin: 1, pMin: 0.1 });
  t.deepEqual(speculationFromFlags({ modelDraft: "d.gguf", draftMax: 6, draftPMin: 0.5 }), { method: "draft", draftMax: 6, draftMin: 1, pMin: 0.5 });
  t.is(speculationFromFlags({ modelDraft: "d.gguf", specType: "ngram-simple" })?.method, "ngram");
  t.deepEqual(normalizeArgv(["serve", "-md", "d.gguf", "--spec-draft-p-min", "0.3"]).args, ["serve", "--model-draft", "d.gguf", "--draft-p-min", "0.3"]);
  const here = fileURLToPath(import.meta.url);
  const vllmDraft = speculativeConfig(JSON.stringify({ model: here, num_speculative_tokens: 5 }));
  t.deepEqual(vllmDraft, { method: "draft_model", model: here, num_speculative_tokens: 5 });
  t.deepEqual(speculationFromFlags({ speculativeConfig: vllmDraft }), { method: "draft", draftMax: 5, draftMin: 1, pMin: 0.1 });
  t.is(draftModelFromFlags({ speculativeConfig: vllmDraft }), here);
  t.is(speculationFromFlags({ draftMax: 12 }), undefined, "--draft-max alone does not turn it on (llama-server's rule)");
  t.is(speculationFromFlags({ specType: "none", draftMax: 12 }), undefined);
  const vllm = speculativeConfig('{"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_max": 6, "prompt_lookup_min": 3}');
  t.deepEqual(speculationFromFlags({ speculativeConfig: vllm }), { method: "ngram", draftMax: 5, draftMin: 1, ngramMin: 3, ngramMax: 6 });
  for (const bad of [
    '{"method": "eagle"}',
    '{"method": "ngram", "num_speculative_tokens": 99}',
    '{"method": "ngram", "model": "x"}',
    '{"model": "/no/such/draft.gguf"}',
    '{"model": ""}',
    "[1]",
    "{",
    '{"method": "ngram", "prompt_lookup_min": 5, "prompt_lookup_max": 2}',
  ]) {
    t.throws(() => speculativeConfig(bad), undefined, bad);
  }
  // Per request: fields adjust the engine's default; alone, without a default, they do not turn it on.
  const engine = { method: "ngram" as const, draftMax: 8, draftMin: 1, ngramMin: 2, ngramMax: 4 };
  t.is(requestSpeculation({}, engine), undefined);
  t.deepEqual(requestSpeculation({ "speculative.n_max": 3 }, engine), { ...engine, draftMax: 3 });
  t.deepEqual(requestSpeculation({ "speculative.type": "none" }, engine), { draftMax: 0 });
  t.is(requestSpeculation({ "speculative.n_max": 3 }, undefined), undefined);
  t.deepEqual(requestSpeculation({ "speculative.type": "ngram-simple", "speculative.ngram_size_n": 5 }, undefined), { method: "ngram", draftMax: 16, draftMin: 1, ngramMin: 5, ngramMax: 5 });
  const drafting = { method: "draft" as const, draftMax: 16, draftMin: 1, pMin: 0.1 };
  t.deepEqual(requestSpeculation({ "speculative.p_min": 0.6, "speculative.n_max": 4 }, drafting), { ...drafting, draftMax: 4, pMin: 0.6 });
  t.deepEqual(requestSpeculation({ "speculative.type": "ngram-simple" }, drafting), { method: "ngram", draftMax: 16, draftMin: 1, ngramMin: 2, ngramMax: 4 });
  t.deepEqual(requestSpeculation({ "speculative.type": "draft-simple" }, undefined), drafting);
});

need.serial("bad flag values stop wick serve with a one-line error", async (t) => {
  for (const args of [
    ["--spec-type", "eagle3"],
    ["--draft-max", "65"],
    ["--speculative-config", '{"method":"medusa"}'],
  ]) {
    const r = await wick(["serve", "-m", need.path!, "--port", "0", ...args], { env: home.env, timeoutMs: 20_000 });
    t.not(r.status, 0, args.join(" "));
    t.regex(r.stderr, /spec-type|draft-max|speculative-config/, args.join(" "));
  }
});
