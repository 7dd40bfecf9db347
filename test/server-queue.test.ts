/**
 * A full queue: 503 with Retry-After and the OpenAI error body; a request whose second
 * choice does not fit leaves nothing queued behind it; the server serves again afterwards.
 */
import { needs, smollm2 } from "./helpers/assets.ts";
import { postJson, serveModel, waitFor } from "./helpers/server.ts";

const { path: smol, serial } = needs(smollm2());
// One running sequence and one waiting: the third request finds the queue full.
const served = serveModel(smol, { maxSequences: 1, maxQueue: 1 });

const long = { prompt: "Once upon a time", max_tokens: 1000, ignore_eos: true, stream: true };

serial("queue full → 503 + Retry-After, and a partly submitted n = 2 request leaves no sequence behind", async (t) => {
  const holder = new AbortController();
  const running = fetch(`${served.server.url}/v1/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(long), signal: holder.signal });
  t.true((await waitFor(() => served.engine.metrics().running === 1, 10_000)) >= 0);
  try {
    // n = 2: the first choice takes the one queue slot, the second does not fit.
    const res = await postJson(`${served.server.url}/v1/chat/completions`, { messages: [{ role: "user", content: "hi" }], n: 2, max_tokens: 4 });
    t.is(res.status, 503);
    t.is(res.headers.get("retry-after"), "1");
    t.deepEqual(res.json.error, { message: res.json.error.message, type: "server_error", param: null, code: "queue_full" });
    t.log(JSON.stringify(res.json));
    t.true((await waitFor(() => served.engine.metrics().waiting === 0, 5_000)) >= 0, `the first choice is still queued: ${JSON.stringify(served.engine.metrics())}`);
  } finally {
    holder.abort();
    await running.then((r) => r.body?.cancel()).catch(() => {});
  }
  t.true((await waitFor(() => served.engine.metrics().running === 0, 5_000)) >= 0);
  const ok = await postJson(`${served.server.url}/v1/completions`, { prompt: "Hello", max_tokens: 2 });
  t.is(ok.status, 200, ok.text);
});
