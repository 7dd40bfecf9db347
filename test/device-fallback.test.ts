/**
 * The device choice (issue #28) without a GPU: the CUDA addon is probed in a child process, and
 * whatever the child meets (no driver, a load error, a crash, no CUDA device) the server runs on
 * the CPU addon with one line saying why. With the CUDA addon built here (scripts/build-cuda.sh;
 * it links libcuda, which only a driver provides), a real `wick serve` on SmolLM2 falls back and
 * answers; `--device cpu-candle` (candle's device-generic path on its CPU device) answers with the
 * same greedy text as `--device cpu`; a bad device is a clear start-up error.
 */
import test from "ava";
import { mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { flagNotices, SERVE_FLAGS } from "../ts/cli/flags.ts";
import { probeCudaAddon } from "../ts/engine/addon.ts";
import { vramBytes } from "../ts/server/routes/native/models.ts";
import { localFile, needs, repoRoot, smollm2 } from "./helpers/assets.ts";
import { BIN, wick } from "./helpers/cli.ts";
import { spawnServe, type ServedProcess } from "./helpers/process.ts";
import { freePort } from "./helpers/server.ts";

const cudaAddon = localFile(path.join(repoRoot, "ts/native/wick.linux-x64-gnu-cuda.node"), "build it with bash scripts/build-cuda.sh (npm test does)");

/** A stand-in "addon" (any module `require` loads) for the probe child. */
function stub(name: string, body: string): string {
  const dir = mkdtempSync(path.join(os.tmpdir(), "wick-probe-"));
  const file = path.join(dir, name);
  writeFileSync(file, body);
  return file;
}

test("the probe child's failures are notices, never this process's", (t) => {
  const broken = probeCudaAddon(stub("broken.node", "not an ELF file"), "auto");
  t.is(broken.device, undefined);
  t.regex(broken.notice!, /^the CUDA addon did not load \(.+\); running on the CPU$/);

  const crashing = probeCudaAddon(stub("crash.js", "process.kill(process.pid, 'SIGSEGV');"), "cuda");
  t.is(crashing.notice, "the CUDA probe crashed (SIGSEGV); running on the CPU");

  const noDriver = probeCudaAddon(stub("nodriver.js", "throw new Error('/x/wick.linux-x64-gnu-cuda.node: libcuda.so.1: cannot open shared object file: No such file or directory');"), "auto");
  t.is(noDriver.notice, "no CUDA driver (libcuda.so.1: cannot open shared object file); running on the CPU");

  const noDevice = probeCudaAddon(stub("nodevice.js", "exports.probeDevice = () => ({ device: 'cpu', notice: 'no CUDA device 0 (DriverError); running on the CPU' });"), "cuda");
  t.deepEqual(noDevice, { device: "cpu", notice: "no CUDA device 0 (DriverError); running on the CPU" });

  const asked = probeCudaAddon(stub("gpu.js", "exports.probeDevice = (d) => ({ device: d === 'cuda:1' ? 'cuda:1' : 'cpu' });"), "cuda:1");
  t.deepEqual(asked, { device: "cuda:1" }, "the child is asked for the device given");
});

test("--dtype: only auto is applied; another type is accepted with a notice", (t) => {
  t.deepEqual(flagNotices(SERVE_FLAGS, { dtype: "auto" }), []);
  t.deepEqual(flagNotices(SERVE_FLAGS, { dtype: "bfloat16" }), [
    "wick: note: --dtype: bfloat16 is not applied: the engine computes in the weights' own types (quantized matmuls, f32 activations), as auto does",
  ]);
  t.deepEqual(flagNotices(SERVE_FLAGS, { nGpuLayers: 99, gpuMemoryUtilization: 0.9, device: "cuda" }), [], "the GPU flags are applied, not noticed");
});

test("a bad --device or WICK_DEVICE is a start-up error that names the choices", async (t) => {
  const flag = await wick(["serve", "--device", "foo", "--port", "0"], { timeoutMs: 60_000 });
  t.not(flag.status, 0);
  t.regex(flag.stderr, /--device.*'foo' is invalid\. Expected one of auto, cpu, cuda, cuda:N, metal, cpu-candle/);
  const env = await wick(["serve", "--port", "0"], { env: { ...process.env, WICK_DEVICE: "gpu" }, timeoutMs: 60_000 });
  t.not(env.status, 0);
  t.regex(env.stderr, /unknown device 'gpu' in WICK_DEVICE \(expected auto, cpu, cuda, cuda:N, metal or cpu-candle\)/);
});

type Served = ServedProcess;

const { path: smol, serial } = needs(smollm2());

/** `wick serve -m SmolLM2` with `args` and `env`, once it listens. */
async function serve(args: string[], env: NodeJS.ProcessEnv, home: string): Promise<Served> {
  const port = await freePort();
  return spawnServe(BIN, ["-m", smol!, "--port", String(port), "-c", "512", ...args], {
    cwd: repoRoot,
    env: { ...process.env, HF_TOKEN: "", WICK_HOME: home, WICK_HOST: "", WICK_DEVICE: "", WICK_CUDA_ADDON: "", ...env },
  });
}

async function withServed<T>(args: string[], env: NodeJS.ProcessEnv, body: (s: Served) => Promise<T>): Promise<T> {
  const home = mkdtempSync(path.join(os.tmpdir(), "wick-device-"));
  const s = await serve(args, env, home);
  try {
    return await body(s);
  } finally {
    s.child.kill("SIGKILL");
    await s.exit;
    rmSync(home, { recursive: true, force: true });
  }
}

/**
 * A greedy chat answer of 24 tokens. EOS is ignored, as in the engine's own device-path test
 * (crates/wick-core/tests/device_path.rs): the two paths' logits differ by rounding, and where
 * the end of the answer is a near tie (SmolLM2 after a short list) one path may stop a token
 * before the other; the text up to there is the check.
 */
async function chat(url: string, content = "Name three colors of the rainbow."): Promise<string> {
  const res = await fetch(`${url}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ messages: [{ role: "user", content }], max_tokens: 24, temperature: 0, ignore_eos: true }),
  });
  if (!res.ok) throw new Error(`chat: ${res.status} ${await res.text()}`);
  const body = (await res.json()) as { choices: { message: { content: string } }[] };
  return body.choices[0].message.content;
}

/** The "model loaded" log line (pino may write it a moment after the listening line). */
async function loaded(s: Served): Promise<Record<string, unknown>> {
  for (let i = 0; i < 100; i++) {
    const line = s.logs().find((l) => l.msg === "model loaded");
    if (line) return line;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`no "model loaded" log line: ${s.stderr()}`);
}

const PROMPTS = ["Name three colors of the rainbow.", "What is the capital of France?", "Write a haiku about rain."];

const withCuda = needs(smollm2(), cudaAddon);
// Without a driver's files the probe child is skipped; WICK_CUDA_PROBE=always runs it anyway (its libcuda load fails).
for (const probe of ["", "always"]) {
  withCuda.serial(`with the CUDA addon installed and no GPU, wick serve falls back to the CPU with its notice and answers${probe ? " (WICK_CUDA_PROBE=always)" : ""}`, async (t) => {
    await withServed([], { WICK_CUDA_ADDON: (cudaAddon as { path: string }).path, WICK_CUDA_PROBE: probe }, async (s) => {
      const addon = s.logs().find((l) => l.msg === "addon")!;
      t.log(addon);
      if (addon.addon === "cuda") {
        // A machine with a driver and a GPU: the probe found it, and the model is on it.
        t.regex(String((await loaded(s)).device), /^cuda:\d+$/);
      } else {
        t.is(addon.addon, "cpu");
        t.regex(String(addon.notice), /^no CUDA (driver|device).*; running on the CPU$/);
        t.false(s.stderr().includes("wick: note:"), "under auto the notice is the log's, not the terminal's");
        t.is((await loaded(s)).device, "cpu");
        t.is((await loaded(s)).deviceNotice, addon.notice, "the model's own log line says why it is on the CPU");
        const ps = (await (await fetch(`${s.url}/api/ps`)).json()) as { models: { size_vram: number }[] };
        t.is(ps.models[0].size_vram, 0);
      }
      t.true((await chat(s.url)).length > 0);
    });
  });
}

const stubDriver = localFile(path.join(repoRoot, ".cache/cuda/lib/stubs/libcuda.so"), "bash scripts/cuda-toolkit.sh writes it");
needs(cudaAddon, stubDriver).test("a driver that crashes the probe child (the link-time libcuda stub) is a notice", (t) => {
  // The stub's cu* functions return garbage: the child dies in cuInit, this process does not.
  const dir = mkdtempSync(path.join(os.tmpdir(), "wick-stub-driver-"));
  symlinkSync((stubDriver as { path: string }).path, path.join(dir, "libcuda.so.1"));
  const saved = process.env.LD_LIBRARY_PATH;
  process.env.LD_LIBRARY_PATH = [dir, path.join(repoRoot, ".cache/cuda/lib")].join(":");
  try {
    const p = probeCudaAddon((cudaAddon as { path: string }).path, "auto");
    t.log(p);
    t.is(p.device, undefined);
    t.regex(p.notice!, /^the CUDA (probe crashed \(SIG\w+\)|addon did not load \(.+\)); running on the CPU$/);
  } finally {
    if (saved === undefined) delete process.env.LD_LIBRARY_PATH;
    else process.env.LD_LIBRARY_PATH = saved;
    rmSync(dir, { recursive: true, force: true });
  }
});

withCuda.serial("--device cuda without a GPU: the notice on stderr too, and a chat on the CPU", async (t) => {
  await withServed(["--device", "cuda"], { WICK_CUDA_ADDON: (cudaAddon as { path: string }).path }, async (s) => {
    const addon = s.logs().find((l) => l.msg === "addon")!;
    if (addon.addon === "cuda") return t.pass("a GPU answered");
    t.regex(s.stderr(), /^wick: note: no CUDA (driver|device).*; running on the CPU$/m);
    t.is((await loaded(s)).device, "cpu");
    t.is((await loaded(s)).deviceNotice, addon.notice, "the CPU addon's own 'no CUDA backend' is not what is reported");
    t.true((await chat(s.url)).length > 0);
  });
});

/** A greedy chat's tokens, each with the lead of its top choice over the runner-up (probability). */
async function greedyTokens(url: string, content: string): Promise<{ token: string; lead: number }[]> {
  const res = await fetch(`${url}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ messages: [{ role: "user", content }], max_tokens: 24, temperature: 0, ignore_eos: true, logprobs: true, top_logprobs: 2 }),
  });
  if (!res.ok) throw new Error(`chat: ${res.status} ${await res.text()}`);
  const body = (await res.json()) as { choices: { logprobs: { content: { token: string; top_logprobs: { logprob: number }[] }[] } }[] };
  return body.choices[0].logprobs.content.map((c) => {
    const [p1, p2] = c.top_logprobs.map((t) => Math.exp(t.logprob));
    return { token: c.token, lead: p1 - (p2 ?? 0) };
  });
}

/**
 * The device path on candle's CPU device answers as the exact path does, by the measure of
 * crates/wick-core/tests/device_path.rs: the same greedy tokens up to the first step where the
 * exact path's top choice leads its runner-up by 0.2 or less (a tie within the device path's
 * stated tolerance, `PROB_TOL = 0.1`, where candle's summation order may pick either).
 */
serial("--device cpu-candle answers with --device cpu's greedy tokens up to a near-tie", async (t) => {
  const exact = await withServed(["--device", "cpu"], {}, async (s) => {
    t.is((await loaded(s)).device, "cpu");
    t.is(s.logs().find((l) => l.msg === "addon")!.addon, "cpu", "--device cpu never probes the CUDA addon");
    return Promise.all(PROMPTS.map((p) => greedyTokens(s.url, p)));
  });
  const generic = await withServed(["--device", "cpu-candle"], {}, async (s) => {
    t.is((await loaded(s)).device, "cpu-candle");
    t.is((await loaded(s)).deviceNotice, undefined);
    return Promise.all(PROMPTS.map((p) => greedyTokens(s.url, p)));
  });
  let agreed = 0;
  exact.forEach((e, i) => {
    const tie = e.findIndex((tok) => tok.lead <= 0.2);
    const upTo = tie < 0 ? e.length : tie + 1;
    const [a, b] = [e, generic[i]].map((x) => x.slice(0, upTo).map((tok) => tok.token));
    t.deepEqual(b, a, `${PROMPTS[i]}: the device path parts before the exact path's first near-tie (step ${tie})`);
    agreed += upTo;
  });
  // Chat answers often open on a near-tie (the first word): the token-by-token measure under
  // teacher forcing is device_path.rs's; this is the same path served end to end.
  t.log(`${agreed} of ${PROMPTS.length * 24} tokens compared (up to each chat's first near-tie)`);
  t.true(generic.every((g) => g.length > 0));
});

/**
 * `-ngl N` below the block count splits the blocks as llama-server does: the first on the CPU's
 * exact path, the last N on the device path (here candle's CPU device), and the model still
 * answers by the same measure as the whole device path.
 */
serial("-ngl 12 offloads 12 of SmolLM2's 30 blocks and answers as the exact path does", async (t) => {
  const exact = await withServed(["--device", "cpu"], {}, (s) => Promise.all(PROMPTS.map((p) => greedyTokens(s.url, p))));
  const split = await withServed(["--device", "cpu-candle", "-ngl", "12"], {}, async (s) => {
    const line = await loaded(s);
    t.is(line.device, "cpu-candle");
    t.is(line.offloaded, "12/30 layers");
    return Promise.all(PROMPTS.map((p) => greedyTokens(s.url, p)));
  });
  exact.forEach((e, i) => {
    const tie = e.findIndex((tok) => tok.lead <= 0.2);
    const upTo = tie < 0 ? e.length : tie + 1;
    const [a, b] = [e, split[i]].map((x) => x.slice(0, upTo).map((tok) => tok.token));
    t.deepEqual(b, a, `${PROMPTS[i]}: the split model parts before the exact path's first near-tie (step ${tie})`);
  });
  await withServed(["--device", "cpu-candle", "-ngl", "all"], {}, async (s) => {
    t.false("offloaded" in (await loaded(s)), "-ngl all (99) puts every block on the device: no split to report");
  });
});

test("/api/ps counts a split model's offloaded share as on the GPU", (t) => {
  const size = 3_000;
  t.is(vramBytes({ device: "cuda:0", nLayer: 30 }, size), size);
  t.is(vramBytes({ device: "cuda:0", deviceLayers: 12, nLayer: 30 }, size), 1_200);
  t.is(vramBytes({ device: "metal", deviceLayers: 30, nLayer: 30 }, size), size);
  t.is(vramBytes({ device: "cpu-candle", deviceLayers: 12, nLayer: 30 }, size), 0);
  t.is(vramBytes({ device: "cpu", nLayer: 30 }, size), 0);
});

serial("-ngl 0 keeps the model on the exact CPU path whatever the device", async (t) => {
  await withServed(["--device", "cpu-candle", "-ngl", "0"], {}, async (s) => {
    t.is((await loaded(s)).device, "cpu");
  });
});
