/**
 * Property-based HTTP fuzzing (fast-check, fixed seeds): thousands of generated bodies per
 * endpoint — near-valid requests with fields swapped for wrong types, huge and negative numbers,
 * deep nesting, long and odd strings, enum neighbours and unknown keys, plus raw bytes, cut-off
 * JSON and odd content types. Every answer must be a success or a client error in the
 * endpoint's own error shape (OpenAI's under /v1, Ollama's under /api), never a 5xx; streams
 * must end cleanly; and the server must keep serving with bounded memory. Hostile bodies (and
 * any failure the fuzzer finds) are kept in test/fuzz-corpus/http.json and replayed first.
 *
 * The generator, seeds and properties live in benches/lib/http-fuzz.ts, shared with the soak
 * (its bad requests) and benches/fuzz-peer.ts (the same cases sent to llama-server).
 */
import fc from "fast-check";
import { caseArbitrary, FUZZ_RUNS, fuzzSeed, keptCorpus, problem, ROUTES, routeName, sampleCases, send } from "../benches/lib/http-fuzz.ts";
import { fixture, needs } from "./helpers/assets.ts";
import { serveModel } from "./helpers/server.ts";

const vlProj = fixture("mmproj-tiny-lfm2-vl-q8_0.gguf");
const { path: model, serial } = needs(fixture("tiny-llama-q8_0.gguf"));
const { path: vlModel } = needs(fixture("tiny-lfm2-vl-q8_0.gguf"), vlProj);
// A short context bounds every generation a valid body starts.
const served = serveModel(model, { contextSize: 64, maxSequences: 4 });
// The image variants go to a vision model (LFM2-VL fixture + projector): images are then valid input.
const vision = serveModel(vlModel, { contextSize: 512, maxSequences: 4, mmproj: (vlProj as { path: string }).path });
// The tools variants: this model's template has no place for tools, so they are written into the
// prompt (the generic tool prompt), which needs more than the short context.
const tooled = serveModel(model, { contextSize: 512, maxSequences: 4 });
// Rerank goes to a reranker (a classifier head): other models cannot rank.
const { path: rerankModel } = needs(fixture("tiny-qwen3-rerank-q8_0.gguf"));
const reranker = serveModel(rerankModel, { contextSize: 512, maxSequences: 4 });
const urlOf = (route: (typeof ROUTES)[number]) => (route.vision ? vision : route.rerank ? reranker : route.variant === "tools" ? tooled : served).server.url;

serial("the kept corpus of hostile bodies still gets clean answers", async (t) => {
  const corpus = keptCorpus();
  t.true(corpus.length > 0);
  for (const c of corpus) {
    const r = await send(urlOf(c.route), c.route, c.body, "application/json");
    t.is(problem(c.route, r), null, `${routeName(c.route)} ${c.body.slice(0, 200)}`);
  }
});

serial("fuzz-peer's sampled cases are the ones the property runs (one generator, one seed)", async (t) => {
  for (const route of ROUTES) {
    const seen: [string | Buffer, string][] = [];
    await fc.assert(
      fc.asyncProperty(caseArbitrary(route), async (c) => void seen.push(c)),
      { seed: fuzzSeed(route), numRuns: 50 },
    );
    t.deepEqual(sampleCases(route, 50), seen, routeName(route));
  }
});

for (const route of ROUTES) {
  serial(`${routeName(route)}: ${FUZZ_RUNS} generated bodies, each a success or a clean client error`, async (t) => {
    const seen = new Map<number, number>();
    await fc.assert(
      fc.asyncProperty(caseArbitrary(route), async ([body, type]) => {
        const r = await send(urlOf(route), route, body, type);
        seen.set(r.status, (seen.get(r.status) ?? 0) + 1);
        const why = problem(route, r);
        if (why) throw new Error(why);
      }),
      // WICK_FUZZ_SEED / WICK_FUZZ_RUNS run other and longer searches by hand.
      { seed: fuzzSeed(route), numRuns: FUZZ_RUNS, endOnFailure: true },
    );
    t.log(`${routeName(route)}: statuses ${JSON.stringify(Object.fromEntries(seen))}`);
    t.true((seen.get(200) ?? 0) > 0 && [...seen.keys()].some((s) => s >= 400), "both successes and client errors were reached");
  });
}

serial("after the fuzzing the server still serves, with bounded memory", async (t) => {
  const rss = process.memoryUsage().rss;
  const r = await served.client.chat.completions.create({ model: "m", messages: [{ role: "user", content: "hi" }], max_tokens: 2 });
  t.is(r.choices.length, 1);
  const m = served.engine.metrics();
  t.is(m.running, 0);
  t.is(m.kvBlocksUsed - m.kvBlocksCached >= 0, true);
  t.log(`RSS after fuzzing: ${(rss / 2 ** 20).toFixed(0)} MiB`);
  t.true(rss < 2 * 2 ** 30, "RSS under 2 GiB");
});
