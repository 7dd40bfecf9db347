/**
 * LoRA serving cost: decode throughput at `--concurrency` sequences in flight with no adapter,
 * with one adapter on every sequence, and with `--adapters` distinct adapters spread over
 * them (each step then groups its rows by adapter beside one base matmul), and the time to load
 * an adapter into a running server (vLLM's `/v1/load_lora_adapter`). One `wick serve` with
 * every adapter loaded at scale 0 (`--lora … --lora-init-without-apply`); requests choose
 * theirs with llama-server's per-request `lora` field. Greedy, `ignore_eos`, `--gen-len` tokens
 * each, `--requests` per level.
 *
 *   npx tsx benches/lora.ts [--model .cache/fixtures/bench/bench-lfm2-350m-q4_0.gguf] \
 *       [--adapters 4] [--concurrency 8] [--requests 16] [--gen-len 64] [--threads 2] [--rounds 3] [--results benches/RESULTS.md]
 *
 * The three levels run in turn `--rounds` times and each reports its median: a shared
 * machine's speed drifts over seconds, and levels measured far apart compare that drift. The
 * server's CPU time per output token is reported beside (its ratio is the throughput ratio
 * the CPU-bound server would have on a quiet machine).
 *
 * The adapters: `wick-fixtures .cache/fixtures/bench --bench-lora` (every linear layer of the
 * LFM2-350M bench shape, r = 16, F16).
 */
import { existsSync, readFileSync } from "node:fs";
import { basename, join } from "node:path";
import { parseArgs } from "node:util";
import { startServer, stopServer } from "./compare.ts";
import { appendResults, machine } from "./lib/provenance.ts";
import { markdownTable } from "./serving.ts";

const { values: a } = parseArgs({
  options: {
    model: { type: "string", default: ".cache/fixtures/bench/bench-lfm2-350m-q4_0.gguf" },
    adapters: { type: "string", default: "4" },
    concurrency: { type: "string", default: "8" },
    requests: { type: "string", default: "16" },
    "gen-len": { type: "string", default: "64" },
    threads: { type: "string", default: "2" },
    rounds: { type: "string", default: "3" },
    results: { type: "string" },
  },
});
const n = Number(a.adapters);
const c = Number(a.concurrency);
const requests = Number(a.requests);
const gen = Number(a["gen-len"]);
const dir = join(a.model!, "..");
const files = Array.from({ length: n }, (_, i) => join(dir, `bench-lora-lfm2-350m-${i}.gguf`));
for (const f of [a.model!, ...files]) {
  if (!existsSync(f)) throw new Error(`${f} is missing: wick-fixtures .cache/fixtures/bench --bench (or --bench-lora)`);
}

const server = await startServer("wick", "wick-lora", a.model!, Number(a.threads), c, 256, [...files.flatMap((f) => ["--lora", f]), "--lora-init-without-apply"]);

async function complete(i: number, lora: { id: number; scale: number }[]): Promise<number> {
  const res = await fetch(`${server.url}/v1/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model: "m", prompt: `Story ${i}: once upon a time`, max_tokens: gen, temperature: 0, ignore_eos: true, lora }),
  });
  const j = (await res.json()) as { usage?: { completion_tokens: number } };
  if (!res.ok || !j.usage) throw new Error(`completion: HTTP ${res.status} ${JSON.stringify(j).slice(0, 300)}`);
  return j.usage.completion_tokens;
}

/** The server's CPU time so far in ms (user + system, /proc; 0 where there is none). */
function cpuMs(): number {
  try {
    const f = readFileSync(`/proc/${server.proc.pid}/stat`, "utf8").split(") ")[1]!.split(" ");
    return ((Number(f[11]) + Number(f[12])) * 1000) / 100; // utime, stime in USER_HZ (100)
  } catch {
    return 0;
  }
}

/**
 * Output tokens per second of `requests` completions held `c` in flight (request i gets
 * `mix(i)`), and the server's CPU ms per output token over them: on a shared machine whose
 * speed drifts, CPU time per token moves much less than wall time.
 */
async function level(mix: (i: number) => { id: number; scale: number }[]): Promise<[number, number]> {
  let next = 0;
  let tokens = 0;
  const cpu0 = cpuMs();
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: c }, async () => {
      while (next < requests) {
        const i = next++;
        const got = await complete(i, mix(i)); // not `tokens += await …`: that reads `tokens` before the wait
        tokens += got;
      }
    }),
  );
  return [tokens / ((performance.now() - t0) / 1000), (cpuMs() - cpu0) / tokens];
}

try {
  await complete(0, []); // warmup
  const runs: number[][] = [[], [], []];
  const cpu: number[][] = [[], [], []];
  const mixes = [() => [], () => [{ id: 0, scale: 1 }], (i: number) => [{ id: i % n, scale: 1 }]];
  for (let r = 0; r < Number(a.rounds); r++) {
    for (const [l, mix] of mixes.entries()) {
      const [tps, ms] = await level(mix);
      runs[l]!.push(tps);
      cpu[l]!.push(ms);
    }
  }
  const median = (v: number[]) => [...v].sort((x, y) => x - y)[Math.floor(v.length / 2)]!;
  const [none, one, many] = runs.map(median) as [number, number, number];
  const [cNone, cOne, cMany] = cpu.map(median) as [number, number, number];
  // Each round's ratios, for the spread.
  const spread = (l: number) => runs[l]!.map((v, r) => (v / runs[0]![r]!).toFixed(2)).join(", ");
  // Load time: the same file under new names, loaded and unloaded three times.
  const loads: number[] = [];
  for (let k = 0; k < 3; k++) {
    const t0 = performance.now();
    const r = await fetch(`${server.url}/v1/load_lora_adapter`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ lora_name: `extra-${k}`, lora_path: files[0] }),
    });
    loads.push(performance.now() - t0);
    if (!r.ok) throw new Error(`load_lora_adapter: HTTP ${r.status} ${await r.text()}`);
    await fetch(`${server.url}/v1/unload_lora_adapter`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ lora_name: `extra-${k}` }) });
  }
  const body = [
    `Model ${basename(a.model!)}, adapters ${basename(files[0]!)}… (every linear layer, r = 16, F16), ${c} in flight, ${requests} requests × ${gen} tokens, ${a.threads} threads, median of ${a.rounds} rounds; ${machine()}.`,
    "",
    markdownTable(
      ["adapters in the batch", "output tok/s", "vs no adapter", "server CPU ms / token", "vs no adapter (CPU)"],
      [
        ["none", none.toFixed(1), "1.00", cNone.toFixed(2), "1.00"],
        ["1 (every sequence)", one.toFixed(1), (one / none).toFixed(2), cOne.toFixed(2), (cNone / cOne).toFixed(2)],
        [`${n} distinct`, many.toFixed(1), (many / none).toFixed(2), cMany.toFixed(2), (cNone / cMany).toFixed(2)],
      ],
    ),
    "",
    `Per round vs no adapter: 1 adapter ${spread(1)}; ${n} distinct ${spread(2)}.`,
    "",
    `Adapter load into the running server (\`/v1/load_lora_adapter\`, 12 MB F16): ${loads.map((t) => t.toFixed(0)).join(", ")} ms.`,
  ].join("\n");
  console.log(body);
  if (a.results) appendResults(a.results, "benches/lora.ts", "LoRA adapters: decode throughput and load time", body);
} finally {
  await stopServer(server);
}
process.exit(0);
