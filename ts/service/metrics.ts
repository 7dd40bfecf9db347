/**
 * Serving metrics in the vLLM/SGLang style (names prefixed `wick:`), so gateways and
 * dashboards built for those servers read Wick unchanged. Latencies are observed here, where
 * every request's event stream passes; engine gauges are read at scrape time.
 */
import client from "prom-client";
import type { EngineEvent, Metrics } from "../engine/index.ts";

/** What the metrics read from the models being served, at scrape time. */
export interface GaugeSource {
  list(): { id: string; engine: { metrics(): Metrics } }[];
}

/** vLLM's token-count buckets (1, 2, 5 per decade), up to 100k. */
const TOKEN_BUCKETS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000];
const LATENCY_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80];

export class ServingMetrics {
  readonly registry = new client.Registry();
  private readonly ttft;
  private readonly itl;
  private readonly e2e;
  private readonly queue;
  private readonly prefill;
  private readonly decode;
  private readonly promptLength;
  private readonly generationLength;
  private readonly promptTokens;
  private readonly generationTokens;
  private readonly finished;

  constructor(models: GaugeSource) {
    const registers = [this.registry];
    const labelNames = ["model_name"] as const;
    // Engine-side values, read at scrape time: gauges, and counters the engine keeps itself
    // (reset and re-filled each scrape, so each holds the engine's running total).
    const fromEngine = (type: "gauge" | "counter", name: string, help: string, pick: (m: Metrics) => number) => {
      function collect(this: { reset(): void; inc(labels: { model_name: string }, value: number): void }) {
        this.reset();
        for (const m of models.list()) this.inc({ model_name: m.id }, pick(m.engine.metrics()));
      }
      const config = { name, help, labelNames, registers, collect };
      return type === "gauge" ? new client.Gauge(config) : new client.Counter(config);
    };
    const gauge = (name: string, help: string, pick: (m: Metrics) => number) => fromEngine("gauge", name, help, pick);
    const engineCounter = (name: string, help: string, pick: (m: Metrics) => number) => fromEngine("counter", name, help, pick);
    gauge("wick:num_requests_running", "Sequences in the running batch.", (m) => m.running);
    gauge("wick:num_requests_waiting", "Sequences waiting for admission.", (m) => m.waiting);
    gauge("wick:kv_blocks_total", "KV cache blocks in the pool.", (m) => m.kvBlocksTotal);
    gauge("wick:kv_blocks_used", "KV cache blocks held by running sequences.", (m) => m.kvBlocksUsed);
    gauge("wick:kv_blocks_cached", "Full KV blocks kept for prefix reuse.", (m) => m.kvBlocksCached);
    gauge("wick:kv_block_size", "Tokens per KV cache block.", (m) => m.kvBlockSize);
    gauge("wick:kv_cache_usage_perc", "Fraction of KV blocks held by running sequences (0-1).", (m) => (m.kvBlocksTotal > 0 ? m.kvBlocksUsed / m.kvBlocksTotal : 0));
    engineCounter("wick:prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.", (m) => m.prefixQueryTokensTotal);
    engineCounter("wick:prefix_cache_hits_total", "Prompt tokens served from the prefix cache.", (m) => m.prefixHitTokensTotal);
    engineCounter("wick:num_preemptions_total", "Sequences preempted (to recompute) when KV blocks ran out.", (m) => m.preemptionsTotal);
    // vLLM's speculative decoding counters, under Wick's prefix.
    engineCounter("wick:spec_decode_num_drafts_total", "Decode steps that verified speculative drafts.", (m) => m.specDraftsTotal);
    engineCounter("wick:spec_decode_num_draft_tokens_total", "Tokens drafted for speculative decoding.", (m) => m.specDraftTokensTotal);
    engineCounter("wick:spec_decode_num_accepted_tokens_total", "Drafted tokens accepted (the model sampled the same token).", (m) => m.specAcceptedTokensTotal);
    engineCounter("wick:step_failures_total", "Model steps that failed (a panic or error inside a step); only the culprit sequence fails.", (m) => m.stepFailuresTotal);
    const histogram = (name: string, help: string) => new client.Histogram({ name, help, labelNames, registers, buckets: LATENCY_BUCKETS });
    this.ttft = histogram("wick:time_to_first_token_seconds", "Time from submission to the first generated token.");
    this.itl = histogram("wick:inter_token_latency_seconds", "Time between consecutive streamed tokens.");
    this.e2e = histogram("wick:e2e_request_latency_seconds", "Time from submission to the end of generation.");
    this.queue = histogram("wick:request_queue_time_seconds", "Time spent waiting for admission.");
    this.prefill = histogram("wick:request_prefill_time_seconds", "Time spent computing the prompt.");
    this.decode = histogram("wick:request_decode_time_seconds", "Time spent generating after the prompt.");
    const lengths = (name: string, help: string) => new client.Histogram({ name, help, labelNames, registers, buckets: TOKEN_BUCKETS });
    this.promptLength = lengths("wick:request_prompt_tokens", "Prompt tokens per finished request.");
    this.generationLength = lengths("wick:request_generation_tokens", "Generated tokens per finished request.");
    const counter = (name: string, help: string, extra: string[] = []) => new client.Counter({ name, help, labelNames: [...labelNames, ...extra], registers });
    this.promptTokens = counter("wick:prompt_tokens_total", "Prompt tokens of finished requests.");
    this.generationTokens = counter("wick:generation_tokens_total", "Generated tokens of finished requests.");
    this.finished = counter("wick:request_success_total", "Finished requests by finish reason.", ["finished_reason"]);
  }

  /** Passes a request's events through unchanged, observing its latencies and token counts. */
  /**
   * `held`: the engine held the tokens until the end (a whole answer), so their arrival says
   * nothing of when they were made: TTFT is then the engine's queue + prompt time, and each
   * inter-token latency the decode time's mean.
   */
  async *track(modelId: string, events: AsyncGenerator<EngineEvent>, held = false): AsyncGenerator<EngineEvent> {
    const labels = { model_name: modelId };
    const start = performance.now();
    let last: number | undefined;
    // A consumer that stops reading (a client that left, a stop button) closes this generator
    // before the sequence's done event, and the engine cancels the sequence: counted as
    // `cancelled`. An engine error ends it too, and is not a cancellation.
    let ended = false;
    try {
      for await (const ev of events) {
        const now = performance.now();
        if (ev.type === "token" && ev.ids.length > 0 && !held) {
          if (last === undefined) this.ttft.observe(labels, (now - start) / 1e3);
          else this.itl.observe(labels, (now - last) / 1e3);
          last = now;
        } else if (ev.type === "done") {
          ended = true;
          if (held) this.observeHeld(labels, ev);
          this.e2e.observe(labels, (now - start) / 1e3);
          this.queue.observe(labels, ev.timings.queueMs / 1e3);
          this.prefill.observe(labels, ev.timings.promptMs / 1e3);
          this.decode.observe(labels, ev.timings.decodeMs / 1e3);
          this.promptLength.observe(labels, ev.usage.promptTokens);
          this.generationLength.observe(labels, ev.usage.completionTokens);
          this.promptTokens.inc(labels, ev.usage.promptTokens);
          this.generationTokens.inc(labels, ev.usage.completionTokens);
          this.finished.inc({ ...labels, finished_reason: ev.finishReason });
        }
        yield ev;
      }
    } catch (e) {
      ended = true;
      throw e;
    } finally {
      if (!ended) this.finished.inc({ ...labels, finished_reason: "cancelled" });
    }
  }

  private observeHeld(labels: { model_name: string }, done: Extract<EngineEvent, { type: "done" }>): void {
    const n = done.usage.completionTokens;
    if (n === 0) return;
    this.ttft.observe(labels, (done.timings.queueMs + done.timings.promptMs) / 1e3);
    for (let i = 1; i < n; i++) this.itl.observe(labels, done.timings.decodeMs / (n - 1) / 1e3);
  }

  text(): Promise<string> {
    return this.registry.metrics();
  }

  get contentType(): string {
    return this.registry.contentType;
  }
}
