/** GET /metrics: Prometheus text with vLLM-style names, fed by real requests. */
import test from "ava";
import { loadModel, openaiClient, smolLM2Tests, startServer, waitFor, type RunningServer } from "./helpers/server.ts";
import type { LoadedModel } from "./helpers/server.ts";

const { path, serial } = smolLM2Tests();
let model: LoadedModel;
let server: RunningServer;

test.before(async () => {
  if (!path) return;
  model = await loadModel(path);
  server = await startServer({ registry: model.registry });
});
test.after.always(async () => {
  await server?.close();
  await model?.engine.unload();
});

function sample(text: string, name: string, labels = ""): number {
  const line = text.split("\n").find((l) => l.startsWith(`${name}{`) && l.includes(labels));
  return line ? Number(line.split(" ").at(-1)) : NaN;
}

serial("metrics count tokens, observe latencies and show an idle engine afterwards", async (t) => {
  const client = openaiClient(server.url);
  const res = await client.completions.create({ model: "m", prompt: "One, two, three,", max_tokens: 5, temperature: 0 });
  t.is(res.usage!.completion_tokens, 5);
  t.true((await waitFor(() => model.engine.metrics().running === 0, 1000)) >= 0);
  const r = await fetch(`${server.url}/metrics`);
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
