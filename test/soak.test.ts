/**
 * The soak of benches/soak.ts, 60 seconds long: a real `wick serve` child (SmolLM2, -np 16)
 * under 16 clients mixing chat and completions, streams and not, streams aborted at random
 * points, prompts that nearly fill the context, fuzz-generated bad requests and /api/chat.
 * Asserts the end-of-run conditions, never speed: no unexpected error (5xx, 4xx to a valid
 * request, malformed answer, connection error, timeout), KV blocks held by sequences and
 * running/waiting sequences back to 0 after idle, open fds flat, RSS growth bounded.
 *
 * The RSS bound. The driver first touches every KV block (16 near-full-context prompts at
 * once), because the pool's pages are committed on first use: without that, RSS climbs +50 %
 * in the first minute with no leak at all. After it, the samples every 10 s still include
 * the rest of start-up: V8's heap and the allocator's arenas reach their working size while
 * every kind of request (fuzz bodies up to 100 kB, 16 streams) is seen for the first time.
 * Measured on the 2-core dev machine (load average 13), 10-s sample → 60-s sample: +4.0 %
 * (368 → 383 MiB, 105 requests) and +1.4 % (380 → 385 MiB, 198 requests), the rise all before
 * 30 s (peak +3.7 %), flat after. The bound is 10 %: 2.5× the worst seen, and well under the
 * +25 % a leak of 1 MiB per request would give at ~100 requests. The
 * 30-minute bench holds the issue's 5 %, measured from the end of its first minute.
 */
import { runSoak, soakReport, startWick } from "../benches/soak.ts";
import { needs, smollm2 } from "./helpers/assets.ts";

const RSS_BOUND_PCT = 10;
const CTX = 256;
const { path: model, serial } = needs(smollm2());

serial("60 s at concurrency 16 with aborts, long prompts and bad requests: nothing unexpected, everything drains", async (t) => {
  t.timeout(6 * 60_000);
  const server = await startWick({ model: model!, parallel: 16, ctx: CTX, threads: 2 });
  try {
    const r = await runSoak({
      url: server.url,
      pid: server.pid,
      durationMs: 60_000,
      sampleMs: 10_000,
      concurrency: 16,
      ctx: CTX,
      parallel: 16,
      seed: 7,
      rssLimitPct: RSS_BOUND_PCT,
      requestTimeoutMs: 150_000,
      drainMs: 30_000,
    });
    t.log("\n" + soakReport(r));
    t.deepEqual(r.unexpected, {}, r.examples.join("\n"));
    t.true(r.requests > 16, "the load ran");
    t.true((r.expected["aborted stream"] ?? 0) > 0, "some streams were aborted");
    t.true(
      Object.keys(r.expected).some((k) => k.startsWith("fuzz case 4")),
      "some bad requests were refused",
    );
    t.is(r.end.kvUsed, 0, "KV blocks held by sequences after idle");
    t.is(r.end.running, 0, "running sequences after idle");
    t.is(r.end.waiting, 0, "waiting sequences after idle");
    t.true(r.end.fds <= r.samples[0].fds + 4, `open fds ${r.samples[0].fds} → ${r.end.fds}`);
    t.true(r.rssGrowthPct <= RSS_BOUND_PCT, `RSS grew ${r.rssGrowthPct.toFixed(1)} %`);
    t.is(server.proc.exitCode, null, "the server is still running");
  } finally {
    t.is(await server.stop(), 0, "exit code after SIGTERM");
  }
});
