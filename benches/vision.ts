/**
 * One image, end to end, Wick beside llama-server on the same files: a prompt with a
 * 512×512 image (one tile, 256 image tokens) and a short text, `--gen-len` greedy tokens with
 * ignore_eos. Reported per engine: time to first token measured by the client (image decoding,
 * preprocessing, encoding and prefill) and decode tokens/s, the best of `--rounds` (the image changes every round so
 * neither engine serves it from a cache). Wick runs in-process (the engine through ts/engine);
 * llama-server (`--mmproj`, flash attention off, same threads) through its native /completion
 * with `multimodal_data`. The encoder alone per tile: `cargo bench --bench vision` and
 * scripts/mtmd-embd.cpp.
 *
 *   npx tsx benches/vision.ts --model bench-lfm2-350m-q8_0.gguf --mmproj bench-mmproj-lfm2-vl-450m-q8_0.gguf \
 *       [--llama-server .cache/llama-build/bin/llama-server] [--threads 2] [--gen-len 64] [--rounds 2]
 */
import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { parseArgs } from "node:util";
import { Engine } from "../ts/engine/index.ts";
import { png, pattern } from "../test/helpers/images.ts";

const { values: a } = parseArgs({
  options: {
    model: { type: "string" },
    mmproj: { type: "string" },
    "llama-server": { type: "string", default: ".cache/llama-build/bin/llama-server" },
    threads: { type: "string", default: "2" },
    "gen-len": { type: "string", default: "64" },
    rounds: { type: "string", default: "2" },
  },
});
if (!a.model || !a.mmproj) throw new Error("usage: benches/vision.ts --model <text.gguf> --mmproj <mmproj.gguf>");
const threads = Number(a.threads);
const gen = Number(a["gen-len"]);
const rounds = Number(a.rounds);
const TEXT = "Describe the image in detail.";

interface Run {
  ttftMs: number;
  tokPerS: number;
  promptTokens: number;
}

async function wick(seed: number, engine: Engine): Promise<Run> {
  const rgb = pattern(512, 512, seed);
  const bos = engine.info().bosToken;
  const promptTokens = [...(bos === undefined ? [] : [bos]), ...engine.tokenize(TEXT, { addSpecial: false })];
  const t0 = performance.now();
  let first = 0;
  let n = 0;
  for await (const ev of engine.generate({ promptTokens, maxTokens: gen, temperature: 0, ignoreEos: true, images: [{ at: bos === undefined ? 0 : 1, width: 512, height: 512, rgb }] })) {
    if (ev.type === "token" && !first) first = performance.now();
    if (ev.type === "done") {
      n = ev.usage.completionTokens;
      return { ttftMs: first - t0, tokPerS: (n - 1) / ((performance.now() - first) / 1000), promptTokens: ev.usage.promptTokens };
    }
  }
  throw new Error("no done event");
}

async function llama(seed: number, url: string): Promise<Run> {
  const img = png(512, 512, pattern(512, 512, seed)).toString("base64");
  const t0 = performance.now();
  const res = await fetch(`${url}/completion`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ prompt: { prompt_string: `<__media__>${TEXT}`, multimodal_data: [img] }, n_predict: gen, temperature: 0, ignore_eos: true, cache_prompt: false, stream: true }),
  });
  if (!res.ok || !res.body) throw new Error(`llama-server: HTTP ${res.status}`);
  // Server-sent events: the first `data:` line is the first token; the last has the timings.
  let first = 0;
  let buf = "";
  let timings: { predicted_per_second: number; prompt_n: number } | undefined;
  for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
    buf += Buffer.from(chunk).toString("utf8");
    let nl;
    while ((nl = buf.indexOf("\n")) >= 0) {
      const line = buf.slice(0, nl).trim();
      buf = buf.slice(nl + 1);
      if (!line.startsWith("data:")) continue;
      if (!first) first = performance.now();
      const j = JSON.parse(line.slice(5)) as { timings?: { predicted_per_second: number; prompt_n: number } };
      if (j.timings) timings = j.timings;
    }
  }
  if (!timings) throw new Error("llama-server sent no timings");
  return { ttftMs: first - t0, tokPerS: timings.predicted_per_second, promptTokens: timings.prompt_n };
}

async function startLlama(): Promise<{ url: string; stop: () => void }> {
  if (!existsSync(a["llama-server"]!)) throw new Error(`${a["llama-server"]} is missing (bash scripts/build-llama-server.sh)`);
  const port = 18000 + Math.floor(Math.random() * 1000);
  const child = spawn(a["llama-server"]!, ["-m", a.model!, "--mmproj", a.mmproj!, "-c", "4096", "-np", "1", "-t", String(threads), "-fa", "off", "--ctx-checkpoints", "0", "--no-warmup", "--port", String(port)], {
    stdio: "ignore",
    env: { ...process.env, LLAMA_MEDIA_MARKER: "<__media__>" },
  });
  const url = `http://127.0.0.1:${port}`;
  for (let i = 0; i < 600; i++) {
    try {
      if ((await fetch(`${url}/health`)).ok) return { url, stop: () => child.kill("SIGKILL") };
    } catch {
      // starting
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  child.kill("SIGKILL");
  throw new Error("llama-server did not start");
}

const best = (runs: Run[]) => ({ ttftMs: Math.min(...runs.map((r) => r.ttftMs)), tokPerS: Math.max(...runs.map((r) => r.tokPerS)), promptTokens: runs[0]!.promptTokens });
const engine = await Engine.load({ modelPath: a.model, mmproj: a.mmproj, contextSize: 4096, maxSequences: 1, threads });
const w: Run[] = [];
for (let i = 0; i < rounds; i++) w.push(await wick(10 + i, engine));
const m = engine.metrics();
await engine.unload();
const peer = await startLlama();
const l: Run[] = [];
try {
  for (let i = 0; i < rounds; i++) l.push(await llama(10 + i, peer.url));
} finally {
  peer.stop();
}
const [bw, bl] = [best(w), best(l)];
console.log(`| engine | prompt tokens | TTFT (encode + prefill) ms | decode tok/s |`);
console.log(`|---|---|---|---|`);
console.log(`| wick | ${bw.promptTokens} | ${bw.ttftMs.toFixed(0)} | ${bw.tokPerS.toFixed(1)} |`);
console.log(`| llama-server | ${bl.promptTokens} | ${bl.ttftMs.toFixed(0)} | ${bl.tokPerS.toFixed(1)} |`);
console.log(`wick encode per tile: ${(m.imageEncodeUsTotal / m.imageTilesEncodedTotal / 1000).toFixed(0)} ms (${m.imageTilesEncodedTotal} tiles)`);
