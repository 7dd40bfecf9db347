/**
 * Cancellation under load: 200 streaming chat requests, 8 in flight at a time, each abandoned
 * by its client at a random point (before the response, mid-prefill, or after a few tokens).
 * Afterwards `/metrics` must show no running sequence and every KV block free, and the
 * server must keep answering.
 */
import { needs, smollm2 } from "./helpers/assets.ts";
import { loadModel, openaiClient, startServer, waitFor } from "./helpers/server.ts";

const { path: smol, serial } = needs(smollm2());

/** `name{labels} value` lines of a Prometheus text page, by metric name. */
function metric(text: string, name: string): number {
  const line = text.split("\n").find((l) => l.startsWith(`${name}{`) || l.startsWith(`${name} `));
  if (!line) throw new Error(`no ${name} in /metrics`);
  return Number(line.slice(line.lastIndexOf(" ") + 1));
}

serial("200 streams aborted at random points leave 0 running sequences and all KV blocks free", async (t) => {
  const { registry, engine } = await loadModel(smol!, { maxSequences: 8, prefillChunk: 64 });
  const server = await startServer({ registry });
  try {
    let seed = 12345;
    const rand = (n: number) => {
      seed = (Math.imul(seed, 1664525) + 1013904223) >>> 0;
      return seed % n;
    };
    const words = "lanterns drift over the quiet harbour while gulls argue about bread and the tide turns".split(" ");
    // Half the prompts share a long opening, so aborted requests also hold cached blocks.
    const shared = Array.from({ length: 70 }, (_, i) => words[i % words.length]).join(" ");
    const plan = Array.from({ length: 200 }, (_, i) => ({
      text: (i % 2 ? shared + " " : "") + Array.from({ length: 5 + rand(40) }, () => words[rand(words.length)]).join(" "),
      // 0: abort before any answer; otherwise after this many SSE frames.
      frames: rand(4) === 0 ? 0 : 1 + rand(8),
      delayMs: rand(40),
    }));
    const outcome = { beforeResponse: 0, beforeFirstFrame: 0, midStream: 0, completed: 0 };
    let next = 0;
    const worker = async () => {
      while (next < plan.length) {
        const p = plan[next++];
        const ctl = new AbortController();
        if (p.frames === 0) setTimeout(() => ctl.abort(), p.delayMs);
        let answered = false;
        let frames = 0;
        try {
          const res = await fetch(`${server.url}/v1/chat/completions`, {
            method: "POST",
            headers: { "content-type": "application/json" },
            body: JSON.stringify({ model: "x", stream: true, max_tokens: 48, messages: [{ role: "user", content: p.text }] }),
            signal: ctl.signal,
          });
          answered = true;
          for await (const chunk of res.body!) {
            frames += new TextDecoder().decode(chunk).split("\n\n").length - 1;
            if (p.frames > 0 && frames >= p.frames) {
              ctl.abort();
              break;
            }
          }
          if (!ctl.signal.aborted) outcome.completed++;
          else if (frames === 0) outcome.beforeFirstFrame++;
          else outcome.midStream++;
        } catch {
          // Leaving a body mid-read rejects with the abort.
          if (!answered) outcome.beforeResponse++;
          else if (frames === 0) outcome.beforeFirstFrame++;
          else outcome.midStream++;
        }
      }
    };
    await Promise.all(Array.from({ length: 8 }, worker));
    t.log(`aborted before the response: ${outcome.beforeResponse}, before the first frame: ${outcome.beforeFirstFrame}, ` + `mid-stream: ${outcome.midStream}, finished first: ${outcome.completed}`);
    t.true(outcome.completed < 50, "most requests were abandoned");

    const idleMs = await waitFor(() => engine.metrics().running + engine.metrics().waiting === 0, 30_000, 5);
    t.true(idleMs >= 0, "the engine went idle");
    const page = await (await fetch(`${server.url}/metrics`)).text();
    t.is(metric(page, "wick:num_requests_running"), 0);
    t.is(metric(page, "wick:num_requests_waiting"), 0);
    t.is(metric(page, "wick:kv_blocks_used"), 0, "every KV block returned");
    t.true(metric(page, "wick:kv_blocks_total") > 0);
    t.log(`cached blocks kept for reuse: ${metric(page, "wick:kv_blocks_cached")}, prefix hits: ${metric(page, "wick:prefix_cache_hits_total")} tokens`);

    const reply = await openaiClient(server.url).chat.completions.create({
      model: "x",
      max_tokens: 8,
      temperature: 0,
      messages: [{ role: "user", content: "Say hello." }],
    });
    t.is(reply.choices[0].finish_reason !== undefined, true);
    t.true(reply.usage!.completion_tokens > 0, "the server keeps serving");
    t.is(engine.metrics().kvBlocksUsed, 0);
  } finally {
    await server.close();
    await engine.unload();
  }
});
