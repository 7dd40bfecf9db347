/**
 * What an LLM-aware router reads from /metrics (docs/deploy.md): Wick's metric names are vLLM's
 * with the `wick:` prefix in place of `vllm:`, with vLLM's types and labels, so a gateway or a
 * dashboard built for vLLM needs only the prefix changed. The list is vLLM's V1 metrics
 * (vLLM docs, "Production metrics"; the team's reference notes api-anchors.md §3.5), scraped
 * from a real server after real requests.
 *
 * vLLM also labels every series with `engine` (its data-parallel rank); Wick runs one engine
 * per model and has no such label.
 */
import { needs, smollm2 } from "./helpers/assets.ts";
import { openaiClient, serveModel, waitFor } from "./helpers/server.ts";

type Kind = "gauge" | "counter" | "histogram";

/** vLLM's name (no prefix), its type, its labels besides `engine`. */
const VLLM: [name: string, kind: Kind, labels: string[]][] = [
  ["num_requests_running", "gauge", ["model_name"]],
  ["num_requests_waiting", "gauge", ["model_name"]],
  ["kv_cache_usage_perc", "gauge", ["model_name"]],
  ["prompt_tokens_total", "counter", ["model_name"]],
  ["generation_tokens_total", "counter", ["model_name"]],
  ["request_success_total", "counter", ["model_name", "finished_reason"]],
  ["prefix_cache_queries_total", "counter", ["model_name"]],
  ["prefix_cache_hits_total", "counter", ["model_name"]],
  ["num_preemptions_total", "counter", ["model_name"]],
  ["time_to_first_token_seconds", "histogram", ["model_name"]],
  ["inter_token_latency_seconds", "histogram", ["model_name"]],
  ["e2e_request_latency_seconds", "histogram", ["model_name"]],
  ["request_queue_time_seconds", "histogram", ["model_name"]],
  ["request_prefill_time_seconds", "histogram", ["model_name"]],
  ["request_decode_time_seconds", "histogram", ["model_name"]],
  ["request_prompt_tokens", "histogram", ["model_name"]],
  ["request_generation_tokens", "histogram", ["model_name"]],
];

/** The gauges and counters docs/deploy.md tells a router to read. */
const ROUTER_READS = ["num_requests_waiting", "num_requests_running", "kv_cache_usage_perc", "prefix_cache_queries_total", "prefix_cache_hits_total"];

const { path, serial } = needs(smollm2());
const served = serveModel(path);

interface Family {
  kind: string;
  /** Label names of its samples (histograms: without `le`). */
  labels: Set<string>;
  samples: number;
}

/** Prometheus text → metric families by name (counters by their `_total` sample name, as vLLM documents them). */
function families(text: string): Map<string, Family> {
  const out = new Map<string, Family>();
  const byBase = new Map<string, Family>();
  for (const line of text.split("\n")) {
    const type = /^# TYPE (\S+) (\S+)$/.exec(line);
    if (type) {
      const f: Family = { kind: type[2], labels: new Set(), samples: 0 };
      byBase.set(type[1], f);
      // prom-client names a counter with its `_total`; vLLM's docs do too.
      out.set(type[1], f);
      continue;
    }
    const sample = /^([^\s{#]+)(?:\{([^}]*)\})? \S+$/.exec(line);
    if (!sample) continue;
    const base = sample[1].replace(/_(bucket|sum|count)$/, "");
    const f = byBase.get(sample[1]) ?? byBase.get(base);
    if (!f) continue;
    f.samples++;
    for (const m of (sample[2] ?? "").matchAll(/(\w+)="/g)) if (m[1] !== "le") f.labels.add(m[1]);
  }
  return out;
}

serial("every vLLM serving metric is exported as wick:<same name>, with vLLM's type and labels", async (t) => {
  const client = openaiClient(served.server.url);
  // Twice the same prompt, several KV blocks long: the second run is a prefix-cache hit, so every family has samples.
  const content = "Count to five, then back to one. ".repeat(20);
  for (let i = 0; i < 2; i++) {
    await client.chat.completions.create({ model: "m", messages: [{ role: "user", content }], max_tokens: 6, temperature: 0 });
  }
  t.true((await waitFor(() => served.engine.metrics().running === 0, 1000)) >= 0);
  const text = await (await fetch(`${served.server.url}/metrics`)).text();
  const found = families(text);
  for (const [name, kind, labels] of VLLM) {
    const f = found.get(`wick:${name}`);
    if (!t.truthy(f, `wick:${name} is exported`)) continue;
    t.is(f.kind, kind, `wick:${name} is a ${kind}`);
    t.true(f.samples > 0, `wick:${name} has samples after two requests`);
    t.deepEqual([...f.labels].sort(), [...labels].sort(), `wick:${name} has vLLM's labels`);
  }
  // Nothing is exported under vLLM's own prefix: a router is pointed at the wick: names.
  t.false(text.includes("vllm:"));
  // What a router reads is numeric and present for the served model.
  for (const name of ROUTER_READS) {
    t.regex(text, new RegExp(`^wick:${name}\\{model_name="[^"]+"\\} [0-9.e+-]+$`, "m"), name);
  }
  const hits = Number(/^wick:prefix_cache_hits_total\{[^}]*\} (\S+)$/m.exec(text)?.[1]);
  t.true(hits > 0, "the repeated prompt hit the prefix cache");
});
