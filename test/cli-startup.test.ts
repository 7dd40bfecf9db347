/**
 * Each runtime's typical start-up line, typed as its users type it but with `wick serve`, starts
 * a server that answers a chat request (the openai client): SGLang's, vLLM's, llama-server's
 * (with -m and with -hf), mlx-lm's and Ollama's. Flags that mean nothing here are noted on
 * stderr, one line each; GPU-only flags say so.
 */
import test from "ava";
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { Ollama } from "ollama";
import { createModel, ModelStore } from "../ts/store/index.ts";
import { needs, repoRoot, smollm2 } from "./helpers/assets.ts";
import { BIN } from "./helpers/cli.ts";
import { startHub, type LoopbackHub } from "./helpers/hub.ts";
import { freePort, openaiClient } from "./helpers/server.ts";

const { path: smol, serial } = needs(smollm2());

interface Started {
  child: ChildProcess;
  url: string;
  stderr: () => string;
}

/** `wick <args>` until it prints its listening line. */
function start(args: string[], env: NodeJS.ProcessEnv): Promise<Started> {
  const child = spawn(process.execPath, [BIN, ...args], { cwd: repoRoot, env: { ...process.env, HF_TOKEN: "", ...env }, stdio: ["ignore", "ignore", "pipe"] });
  let err = "";
  return new Promise((resolve, reject) => {
    child.stderr.on("data", (d) => {
      err += d;
      const m = /wick: serving .* at (http:\/\/\S+)\/v1\n/.exec(err);
      if (m) resolve({ child, url: m[1], stderr: () => err });
    });
    child.once("exit", (code) => reject(new Error(`exited ${code}: ${err}`)));
  });
}

async function stop(child: ChildProcess): Promise<number | null> {
  if (child.exitCode !== null) return child.exitCode;
  const exited = new Promise<number | null>((resolve) => child.once("exit", resolve));
  child.kill("SIGTERM");
  return exited;
}

let home: string;
let hub: LoopbackHub;
test.before(async () => {
  home = mkdtempSync(path.join(os.tmpdir(), "wick-startup-"));
  hub = await startHub();
  if (smol) {
    await hub.addRepo("LiquidAI/SmolLM2-GGUF", [{ path: "SmolLM2-135M-Instruct-Q4_1.gguf", source: smol }]);
    await createModel(new ModelStore({ home }), "smol", `FROM ${smol}`);
  }
});
test.after.always(async () => {
  await hub?.close();
  rmSync(home, { recursive: true, force: true });
});

/** Each runtime's line ("M" = the model file, "P" = a free port), the model name its clients send, and what stderr must say. */
const LINES: { runtime: string; line: string; model: string; auth?: string; notes: RegExp[] }[] = [
  {
    runtime: "SGLang",
    line: "serve --model-path M --tool-call-parser lfm2 --port P --host 127.0.0.1 --enable-torch-compile --chunked-prefill-size -1 --mem-fraction-static 0.85 --context-length 4096 --max-running-requests 8 --trust-remote-code --log-level info",
    model: "default",
    notes: [/^wick: ignoring --enable-torch-compile \(SGLang flag, no effect in Wick\)$/m],
  },
  {
    runtime: "vLLM",
    line: "serve M --max-model-len 4096 --gpu-memory-utilization 0.9 --dtype auto --port P --served-model-name smollm2 --max-num-seqs 8 --enable-auto-tool-choice --tool-call-parser hermes --enable-prefix-caching --tensor-parallel-size 1",
    model: "smollm2",
    notes: [/^wick: ignoring --enable-auto-tool-choice \(vLLM flag/m, /^wick: ignoring --tensor-parallel-size/m],
  },
  {
    runtime: "llama-server",
    line: "serve -m M -c 4096 -ngl 99 --port P --host 127.0.0.1 -np 2 -t 2 --jinja -fa on -ctk q8_0 -ctv q8_0 --api-key sk-test --metrics -a smol",
    model: "smol",
    auth: "sk-test",
    notes: [/^wick: ignoring --jinja/m, /^wick: ignoring -fa \(llama\.cpp flag/m],
  },
  {
    runtime: "llama-server -hf",
    line: "serve -hf LiquidAI/SmolLM2-GGUF:Q4_1 -c 2048 --port P",
    model: "hf.co/LiquidAI/SmolLM2-GGUF:Q4_1",
    notes: [/^wick: pulling manifest$/m, /^wick: success$/m],
  },
  {
    runtime: "mlx-lm",
    line: "serve --model M --host 127.0.0.1 --port P --temp 0.0 --max-tokens 512 --log-level INFO",
    model: "default_model",
    notes: [/^wick: ignoring --temp \(mlx-lm \/ llama-server flag, no server-wide sampling defaults/m, /^wick: ignoring --max-tokens/m],
  },
  {
    runtime: "Ollama",
    line: "serve",
    model: "smol",
    notes: [/^wick: serving the models of .* \(loaded on first use\)/m],
  },
];

for (const { runtime, line, model, auth, notes } of LINES) {
  serial(`${runtime}'s start-up line serves a chat: wick ${line}`, async (t) => {
    const port = await freePort();
    const args = line.split(" ").map((a) => (a === "M" ? smol! : a === "P" ? String(port) : a));
    // Ollama's users set the address in the environment (OLLAMA_HOST → WICK_HOST).
    const s = await start(args, { WICK_HOME: home, HF_ENDPOINT: hub.url, ...(runtime === "Ollama" ? { WICK_HOST: `127.0.0.1:${port}` } : {}) });
    try {
      t.is(s.url, `http://127.0.0.1:${port}`);
      for (const note of notes) t.regex(s.stderr(), note);
      const client = openaiClient(s.url, auth);
      const res = await client.chat.completions.create({ model, messages: [{ role: "user", content: "Say hello." }], max_tokens: 8, temperature: 0 });
      t.is(res.object, "chat.completion");
      t.true((res.choices[0].message.content ?? "").length > 0);
      if (runtime === "Ollama") {
        const r = await new Ollama({ host: s.url }).chat({ model, messages: [{ role: "user", content: "Hi" }], options: { num_predict: 4 } });
        t.true(r.message.content.length > 0);
      }
      if (auth) t.is((await fetch(`${s.url}/v1/models`)).status, 401, "--api-key is enforced");
      t.log(`${runtime}: ${JSON.stringify(res.choices[0].message.content)}`);
    } finally {
      t.is(await stop(s.child), 0);
    }
  });
}
