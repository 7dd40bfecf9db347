/** GET /metrics: Prometheus text with vLLM-style names, fed by real requests. */
import { needs, smollm2 } from "./helpers/assets.ts";
import { openaiClient, serveModel, waitFor } from "./helpers/server.ts";

const { path, serial } = needs(smollm2());
const served = serveModel(path);

function sample(text: string, name: string, labels = ""): number {
  const line = text.split("\n").find((l) => l.startsWith(`${name}{`) && l.includes(labels));
  return line ? Number(line.split(" ").at(-1)) : NaN;
}

serial("metrics count tokens, observe latencies and show an idle engine afterwards", async (t) => {
  const client = openaiClient(served.server.url);
  const res = await client.completions.create({ model: "m", prompt: "One, two, three,", max_tokens: 5, temperature: 0 });
  t.is(res.usage!.completion_tokens, 5);
  t.true((await waitFor(() => served.engine.metrics().running === 0, 1000)) >= 0);
  const r = await fetch(`${served.server.url}/metrics`);
  t.is(r.status, 200);
  t.regex(r.headers.get("content-type") ?? "", /text\/plain/);
  const text = await r.text();
  t.is(sample(text, "wick:num_requests_running"), 0);
  t.is(sample(text, "wick:num_requests_waiting"), 0);
  t.is(sample(text, "wick:generation_tokens_total"), 5);
  t.is(sample(text, "wick:prompt_tokens_total"), res.usage!.prompt_tokens);
  t.is(sample(text, "wick:time_to_first_token_seconds_count"), 1);
  t.is(sample(text, "wick:inter_token_latency_seconds_count"), 4);
  t.is(sample(text, "wick:request_success_total", 'finished_reason="length"'), 1);
});

serial("a stream the client abandons counts as a cancelled request", async (t) => {
  const client = openaiClient(served.server.url);
  const before = await (await fetch(`${served.server.url}/metrics`)).text();
  const cancelledBefore = sample(before, "wick:request_success_total", 'finished_reason="cancelled"') || 0;
  const stream = await client.chat.completions.create({
    model: "m",
    messages: [{ role: "user", content: "Count to a thousand." }],
    max_tokens: 400,
    stream: true,
    // A sampled answer may end (EOS) before the client leaves, and then it is no cancel: the
    // flake this test had. vLLM's ignore_eos keeps the stream going until the client leaves.
    ...({ ignore_eos: true } as object),
  });
  // Leaving the loop aborts the HTTP request (the SDK closes its stream).
  let seen = 0;
  for await (const chunk of stream) {
    if (chunk.choices[0]?.delta?.content) seen += 1;
    if (seen === 3) break;
  }
  t.is(seen, 3);
  t.true((await waitFor(() => served.engine.metrics().running === 0, 5000)) >= 0);
  // The count moves when the request's event stream closes, which can trail the engine's
  // cancel by a turn of the event loop: read until it has moved (or 5 s have passed).
  const cancelled = async () => sample(await (await fetch(`${served.server.url}/metrics`)).text(), "wick:request_success_total", 'finished_reason="cancelled"');
  let now = await cancelled();
  for (const start = performance.now(); !(now > cancelledBefore) && performance.now() - start < 5000; now = await cancelled()) {
    await new Promise((r) => setTimeout(r, 10));
  }
  t.is(now, cancelledBefore + 1);
});
