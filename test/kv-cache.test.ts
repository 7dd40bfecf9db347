/**
 * The paged KV pool seen from the engine: prefix reuse is exact (a request that starts on
 * cached blocks — and, for LFM2, on the conv state saved at their end — produces the greedy
 * tokens of an uncached run and says how many prompt tokens it skipped), and a pool too small
 * for the admitted requests preempts and replays without changing anyone's output.
 */
import { Engine, type EngineEvent, type LoadOptions } from "../ts/engine/index.ts";
import { fixture, needs, smollm2, type Needed } from "./helpers/assets.ts";

interface Run {
  ids: number[];
  /** The chosen token's log-probability at each step: equal runs agree to the last bit. */
  logprobs: number[];
  cached: number;
}

async function run(engine: Engine, prompt: number[], maxTokens = 16): Promise<Run> {
  const out: Run = { ids: [], logprobs: [], cached: -1 };
  const events: AsyncGenerator<EngineEvent> = engine.generate({ promptTokens: prompt, maxTokens, temperature: 0, ignoreEos: true, topLogprobs: 1 });
  for await (const ev of events) {
    if (ev.type === "token") {
      out.ids.push(...ev.ids);
      out.logprobs.push(...(ev.logprobs ?? []).map((l) => l.logprob));
    } else out.cached = ev.usage.cachedTokens;
  }
  return out;
}

/** A deterministic stream of token ids in [lo, hi). */
function tokens(n: number, seed: number, lo: number, hi: number): number[] {
  let s = seed >>> 0;
  return Array.from({ length: n }, () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return lo + (s % (hi - lo));
  });
}

const models: { name: string; model: Needed; vocab: readonly [number, number] }[] = [
  { name: "SmolLM2-135M Q4_1", model: needs(smollm2()), vocab: [1, 49152] },
  // The byte-vocab fixtures: ids 3..258 are bytes.
  { name: "tiny lfm2 Q8_0 (conv snapshots)", model: needs(fixture("tiny-lfm2-q8_0.gguf")), vocab: [3, 259] },
  { name: "tiny lfm2moe Q8_0", model: needs(fixture("tiny-lfm2moe-e4-q8_0.gguf")), vocab: [3, 259] },
  { name: "tiny llama Q4_K", model: needs(fixture("tiny-llama-q4_k.gguf")), vocab: [3, 259] },
];

async function withEngines(modelPath: string, opts: Partial<LoadOptions>, body: (cached: Engine, uncached: Engine) => Promise<void>) {
  const cached = await Engine.load({ modelPath, contextSize: 1024, maxSequences: 4, ...opts });
  const uncached = await Engine.load({ modelPath, contextSize: 1024, maxSequences: 4, ...opts, prefixCache: false });
  try {
    await body(cached, uncached);
  } finally {
    await cached.unload();
    await uncached.unload();
  }
}

for (const m of models) {
  m.model.serial(`${m.name}: a second request sharing a 400-token prefix reuses >= 384 cached tokens, same greedy output`, async (t) => {
    const modelPath = m.model.path!;
    const [lo, hi] = m.vocab;
    const prefix = tokens(400, 7, lo, hi);
    const first = [...prefix, ...tokens(29, 11, lo, hi)];
    const second = [...prefix, ...tokens(37, 13, lo, hi)];
    await withEngines(modelPath, {}, async (cached, uncached) => {
      const a = await run(cached, first);
      t.is(a.cached, 0, "nothing cached yet");
      const b = await run(cached, second);
      const ref = await run(uncached, second);
      t.log(`cached_tokens ${b.cached} of ${second.length}; uncached run: ${ref.cached}`);
      t.true(b.cached >= 384, `cached_tokens ${b.cached}`);
      t.is(ref.cached, 0);
      t.deepEqual(b.ids, ref.ids, "greedy tokens with the reused prefix");
      t.deepEqual(b.logprobs, ref.logprobs, "and the same distributions, bit for bit");
      // The very same prompt again: everything but the last block's tail comes from the cache.
      const again = await run(cached, second);
      t.is(again.cached, Math.floor((second.length - 1) / 64) * 64);
      t.deepEqual(again.ids, ref.ids);
      const mt = cached.metrics();
      t.is(mt.kvBlocksUsed, 0, "idle: no blocks held");
      t.true(mt.kvBlocksCached > 0 && mt.prefixHitTokensTotal === b.cached + again.cached);
    });
  });
}

models[0].model.serial("prefix reuse across the chunk boundary: chunks end where the uncached run's end", async (t) => {
  // Reused prefixes end on block boundaries, prompt chunks on multiples of the chunk size:
  // 257 tokens (chunks of 256) end in a one-token chunk either way; 385 and 449 put the
  // reuse point right before the last token. Every case must give the uncached distributions.
  const m = models[0];
  const modelPath = m.model.path!;
  await withEngines(modelPath, { prefillChunk: 256 }, async (cached, uncached) => {
    for (const n of [257, 385, 448, 449]) {
      const prompt = tokens(n, n, m.vocab[0], m.vocab[1]);
      await run(cached, [...prompt.slice(0, n - 1), 5]); // warm the cache with the same prefix
      const b = await run(cached, prompt);
      const ref = await run(uncached, prompt);
      t.deepEqual(b.ids, ref.ids, `${n} tokens, ${b.cached} reused`);
      t.deepEqual(b.logprobs, ref.logprobs, `${n} tokens: distributions`);
      t.log(`${n} tokens: ${b.cached} reused`);
      t.true(b.cached > 0 && b.cached % 64 === 0, `${n}: ${b.cached} reused`);
    }
  });
});

for (const m of models.slice(0, 2)) {
  m.model.serial(`${m.name}: a KV pool too small for the admitted requests preempts, and every output is its solo output`, async (t) => {
    const modelPath = m.model.path!;
    const [lo, hi] = m.vocab;
    // 6 blocks of 64 for 4 sequences that each grow to 2-3 blocks.
    const engine = await Engine.load({ modelPath, contextSize: 1024, maxSequences: 4, kvTokens: 384, prefillChunk: 64 });
    try {
      const prompts = [70, 90, 40, 100].map((n, i) => tokens(n, 100 + i, lo, hi));
      const solo: Run[] = [];
      for (const p of prompts) solo.push(await run(engine, p, 48));
      const p0 = engine.metrics().preemptionsTotal;
      // Paused while all four are submitted, so they meet in one schedule however fast the
      // model runs (a tiny model could otherwise finish one before the next arrives).
      engine.pause();
      const pending = prompts.map((p) => run(engine, p, 48));
      engine.resume();
      const together = await Promise.all(pending);
      const mt = engine.metrics();
      t.log(`preemptions: ${mt.preemptionsTotal - p0}; pool ${mt.kvBlocksTotal} blocks of ${mt.kvBlockSize}`);
      t.true(mt.preemptionsTotal - p0 > 0, "the pool was too small, so someone was preempted");
      for (let i = 0; i < prompts.length; i++) {
        t.deepEqual(together[i].ids, solo[i].ids, `request ${i}`);
        t.deepEqual(together[i].logprobs, solo[i].logprobs, `request ${i}: distributions`);
      }
      t.is(mt.kvBlocksUsed, 0);
      t.is(mt.running + mt.waiting, 0);
    } finally {
      await engine.unload();
    }
  });
}

const tinyLlama = needs(fixture("tiny-llama-q8_0.gguf"));
tinyLlama.serial("a request longer than the whole KV pool is refused up front", async (t) => {
  const engine = await Engine.load({ modelPath: tinyLlama.path!, contextSize: 1024, kvTokens: 128 });
  try {
    t.is(engine.info().contextSize, 128, "the context is capped by the pool");
    const err = await run(engine, tokens(200, 1, 3, 259)).catch((e: Error & { code?: string }) => e);
    t.is((err as { code?: string }).code, "CONTEXT_LENGTH_EXCEEDED");
    t.deepEqual((await run(engine, tokens(20, 1, 3, 259), 4)).ids.length, 4, "and the engine keeps working");
  } finally {
    await engine.unload();
  }
});
