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
