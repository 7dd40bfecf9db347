/**
 * `wick serve` as users run it: the flag table (aliases from other runtimes, foreign flags
 * ignored with a notice), bad values exiting non-zero with one line naming the flag, and one
 * real server started through bin/wick.js and driven with the openai client.
 */
import test from "ava";
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { FOREIGN_FLAGS, normalizeArgv, SERVE_FLAGS } from "../ts/cli/flags.ts";
import { hostPort } from "../ts/cli/values.ts";
import { Ollama } from "ollama";
import { createModel, ModelStore } from "../ts/store/index.ts";
import { startHub } from "./helpers/hub.ts";
import { openaiClient, postJson } from "./helpers/server.ts";
import { needs, repoRoot, smollm2 } from "./helpers/assets.ts";

const BIN = path.join(repoRoot, "bin/wick.js");
const { path: smol, serial } = needs(smollm2());

function wick(args: string[], env: Record<string, string> = {}) {
  const r = spawnSync(process.execPath, [BIN, ...args], { cwd: repoRoot, encoding: "utf8", env: { ...process.env, ...env }, timeout: 60_000 });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr, lines: r.stderr.split("\n").filter(Boolean) };
}

test("every alias of the flag table maps to its canonical flag, with = values kept", (t) => {
  for (const spec of SERVE_FLAGS) {
    for (const alias of spec.flags) {
      t.deepEqual(normalizeArgv(["serve", alias, "1"]).args, ["serve", spec.flags[0], "1"], alias);
      if (alias.startsWith("--")) t.deepEqual(normalizeArgv([`${alias}=2`]).args, [`${spec.flags[0]}=2`]);
    }
  }
  const n = normalizeArgv(["serve", "-np", "4", "--max-model-len", "1024", "--model-path", "m.gguf"]);
  t.deepEqual(n.args, ["serve", "--parallel", "4", "--ctx-size", "1024", "--model", "m.gguf"]);
  t.deepEqual(n.notices, []);
  t.is(n.typed.get("--parallel"), "-np");
});

test("foreign flags are dropped with their values and one notice each", (t) => {
  const n = normalizeArgv(["serve", "--enable-torch-compile", "--ipc=host", "--ipc", "host", "-tp", "2", "--flash-attn", "-m", "x.gguf", "--", "--ipc"]);
  t.deepEqual(n.args, ["serve", "--model", "x.gguf", "--", "--ipc"]);
  t.is(n.notices.length, 5);
  t.regex(n.notices[0], /^wick: ignoring --enable-torch-compile \(SGLang flag, no effect in Wick\)$/);
  // No table flag is also listed as foreign.
  const table = new Set(SERVE_FLAGS.flatMap((f) => f.flags));
  t.deepEqual(
    FOREIGN_FLAGS.flatMap((f) => f.flags).filter((f) => table.has(f)),
    [],
  );
});

test("WICK_HOST forms", (t) => {
  t.deepEqual(hostPort("0.0.0.0:8080"), { host: "0.0.0.0", port: 8080 });
  t.deepEqual(hostPort("localhost"), { host: "localhost" });
  t.deepEqual(hostPort(":9000"), { port: 9000 });
  t.deepEqual(hostPort("http://[::1]:7000/"), { host: "::1", port: 7000 });
  t.throws(() => hostPort("host:99999"));
});

const MODEL = smol ?? "/nonexistent.gguf";
const emptyHome = mkdtempSync(path.join(os.tmpdir(), "wick-cli-home-"));
test.after.always(() => rmSync(emptyHome, { recursive: true, force: true }));
const BAD: [string, string[], RegExp][] = [
  ["missing model file", ["serve", "-m", "/no/such/model.gguf"], /'-m, --model <ref>' argument '\/no\/such\/model.gguf' is invalid\. No such file/],
  ["a model name that is not a name", ["serve", "-m", "my model"], /'-m, --model <ref>' argument 'my model' is invalid\. invalid model name "my model": whitespace is not allowed/],
  ["a store name the store lacks", ["serve", "-m", "lfm2:350m", `WICK_HOME=${emptyHome}`], /^wick: cannot load lfm2:350m: model 'lfm2:350m' not found/],
  ["keep-alive not a duration", ["serve", "--keep-alive", "soon"], /option '--keep-alive <duration>' argument 'soon' is invalid\. Expected a duration/],
  ["max-loaded-models zero", ["serve", "--max-loaded-models", "0"], /--max-loaded-models <n>.*'0'.*positive integer/],
  ["bad WICK_KEEP_ALIVE", ["serve", "-m", MODEL, "WICK_KEEP_ALIVE=later"], /WICK_KEEP_ALIVE "later"/],
  ["port not a number", ["serve", "-m", MODEL, "--port", "abc"], /option '--port <port>' argument 'abc' is invalid/],
  ["port out of range", ["serve", "-m", MODEL, "--port", "70000"], /--port.*'70000'.*0 to 65535/],
  ["ctx-size zero", ["serve", "-m", MODEL, "-c", "0"], /-c, --ctx-size <n>.*'0'.*positive integer/],
  ["max-model-len alias", ["serve", "-m", MODEL, "--max-model-len", "lots"], /option '--max-model-len' \(-c, --ctx-size <n>\) argument 'lots'/],
  ["-np not a number", ["serve", "-m", MODEL, "-np", "x"], /option '-np' \(--parallel <n>\) argument 'x'/],
  ["threads negative", ["serve", "-m", MODEL, "-t", "-2"], /-t, --threads <n>.*'-2'/],
  ["gpu memory utilization above 1", ["serve", "-m", MODEL, "--gpu-memory-utilization", "1.5"], /--gpu-memory-utilization.*\(0, 1\]/],
  ["gpu memory utilization zero", ["serve", "-m", MODEL, "--gpu-memory-utilization", "0"], /--gpu-memory-utilization.*\(0, 1\]/],
  ["dtype", ["serve", "-m", MODEL, "--dtype", "fp8"], /--dtype.*'fp8'.*one of/],
  ["empty api key", ["serve", "-m", MODEL, "--api-key", ""], /--api-key/],
  ["unknown flag", ["serve", "-m", MODEL, "--frobnicate"], /unknown option '--frobnicate'/],
  ["bad WICK_HOST", ["serve", "-m", MODEL, "WICK_HOST=localhost:notaport"], /WICK_HOST=localhost:notaport/],
];

for (const [name, args, pattern] of BAD) {
  test(`bad start-up: ${name} → exit 1 with one line naming it`, (t) => {
    const env = args.filter((a) => /^[A-Z_]+=/.test(a));
    const r = wick(
      args.filter((a) => !env.includes(a)),
      Object.fromEntries(env.map((e) => [e.slice(0, e.indexOf("=")), e.slice(e.indexOf("=") + 1)])),
    );
    t.is(r.status, 1, r.stderr);
    t.is(r.lines.length, 1, r.stderr);
    t.regex(r.lines[0], /^wick( serve)?: /);
    t.regex(r.lines[0], pattern);
    t.log(r.lines[0]);
  });
}

test("npx wick runs the CLI from the repository root", (t) => {
  const r = spawnSync("npx", ["--no-install", "wick", "serve", "--help"], { cwd: repoRoot, encoding: "utf8", timeout: 60_000 });
  t.is(r.status, 0, r.stderr);
  t.regex(r.stdout, /Usage: wick serve/);
  t.regex(r.stdout, /also -np/);
});

/** Starts `wick serve` and resolves with its URL once it prints the listening line. */
function startCli(args: string[], env: Record<string, string> = {}): Promise<{ child: ChildProcess; url: string; stderr: () => string }> {
  const child = spawn(process.execPath, [BIN, "serve", ...args], { cwd: repoRoot, env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe"] });
  let err = "";
  let out = "";
  child.stdout.on("data", (d) => (out += d));
  return new Promise((resolve, reject) => {
    child.stderr.on("data", (d) => {
      err += d;
      const m = /wick: serving .* at (http:\/\/\S+)\/v1\n/.exec(err);
      if (m) resolve({ child, url: m[1], stderr: () => err });
    });
    child.once("exit", (code) => reject(new Error(`wick serve exited ${code}: ${err}\n${out}`)));
  });
}

serial("wick serve (the real CLI): foreign flags noted, openai client served, API key enforced, SIGTERM exits 0", async (t) => {
  const { child, url, stderr } = await startCli([
    "--model-path",
    smol!,
    "--host",
    "127.0.0.1",
    "--port",
    "0",
    "-c",
    "1024",
    "-np",
    "2",
    "-t",
    "2",
    "--api-key",
    "cli-key",
    "--enable-torch-compile",
    "--ipc=host",
    "--trust-remote-code",
    "-ngl",
    "99",
    "--dtype",
    "float16",
    "--log-level",
    "warn",
  ]);
  try {
    t.regex(stderr(), /ignoring --enable-torch-compile/);
    t.regex(stderr(), /ignoring --ipc/);
    t.regex(stderr(), /ignoring --trust-remote-code/);
    t.regex(stderr(), /--dtype: float16 is not applied/);
    t.notRegex(stderr(), /--n-gpu-layers/, "-ngl reaches the engine: no notice");
    const client = openaiClient(url, "cli-key");
    const models = await client.models.list();
    t.is(models.data[0].id, "SmolLM2-135M-Instruct.Q4_1");
    t.is((models.data[0] as unknown as { max_model_len: number }).max_model_len, 1024);
    const res = await client.chat.completions.create({ model: "SmolLM2-135M-Instruct.Q4_1", messages: [{ role: "user", content: "Hi!" }], max_tokens: 4, temperature: 0 });
    t.is(typeof res.choices[0].message.content, "string");
    t.is((await fetch(`${url}/v1/models`)).status, 401);
    t.is((await fetch(`${url}/health`)).status, 200);
  } finally {
    const exited = new Promise<number | null>((resolve) => child.once("exit", resolve));
    child.kill("SIGTERM");
    t.is(await exited, 0);
  }
});

serial("wick serve reads WICK_HOST and WICK_API_KEY", async (t) => {
  const { child, url } = await startCli(["-m", smol!, "--log-level", "silent"], { WICK_HOST: "127.0.0.1:0", WICK_API_KEY: "env-key" });
  try {
    t.regex(url, /^http:\/\/127\.0\.0\.1:\d+$/);
    t.is((await fetch(`${url}/v1/models`, { headers: { authorization: "Bearer env-key" } })).status, 200);
    t.is((await fetch(`${url}/v1/models`)).status, 401);
  } finally {
    const exited = new Promise((resolve) => child.once("exit", resolve));
    child.kill("SIGTERM");
    await exited;
  }
});

/** Stops a `wick serve` child with SIGTERM and returns its exit code. */
async function stopCli(child: ChildProcess): Promise<number | null> {
  const exited = new Promise<number | null>((resolve) => child.once("exit", resolve));
  child.kill("SIGTERM");
  return exited;
}

serial("wick serve without -m starts empty on WICK_HOME, loads store models on first use, honours --keep-alive", async (t) => {
  const home = mkdtempSync(path.join(os.tmpdir(), "wick-cli-store-"));
  try {
    await createModel(new ModelStore({ home }), "smol", `FROM ${smol}\nPARAMETER num_predict 3\nPARAMETER temperature 0`);
    const { child, url, stderr } = await startCli(["--port", "0", "--keep-alive", "1s", "--max-loaded-models", "1", "--log-level", "silent"], { WICK_HOME: home });
    try {
      t.regex(stderr(), new RegExp(`serving the models of ${home.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")} \\(loaded on first use\\)`));
      const ollama = new Ollama({ host: url });
      t.deepEqual((await ollama.ps()).models, [], "nothing loaded at start");
      t.deepEqual(
        (await ollama.list()).models.map((m) => m.name),
        ["smol:latest"],
      );
      const r = await ollama.generate({ model: "smol", prompt: "Hi" });
      t.is(r.eval_count, 3, "the Modelfile's PARAMETER");
      t.deepEqual(
        (await ollama.ps()).models.map((m) => m.name),
        ["smol:latest"],
      );
      const unknown = await postJson(`${url}/api/generate`, { model: "gpt-4o", prompt: "x" });
      t.is(unknown.status, 404, "no -m model: unknown names are not found");
      await new Promise((r) => setTimeout(r, 1500));
      t.deepEqual((await ollama.ps()).models, [], "unloaded after --keep-alive 1s");
    } finally {
      t.is(await stopCli(child), 0);
    }
  } finally {
    rmSync(home, { recursive: true, force: true });
  }
});

serial("wick serve -m <hub ref> pulls first with progress on stderr, serves it for any name, and finds it in the store next time", async (t) => {
  const home = mkdtempSync(path.join(os.tmpdir(), "wick-cli-hub-"));
  const hub = await startHub();
  try {
    await hub.addRepo("wick-test/SmolLM2-GGUF", [{ path: "SmolLM2-135M-Instruct-Q4_1.gguf", source: smol! }]);
    const env = { WICK_HOME: home, HF_ENDPOINT: hub.url, HF_TOKEN: "" };
    const ref = "hf.co/wick-test/SmolLM2-GGUF:Q4_1";
    const first = await startCli(["-m", ref, "--port", "0", "--log-level", "silent"], env);
    try {
      const err = first.stderr();
      t.regex(err, /wick: pulling manifest\n/);
      t.regex(err, /wick: pulling [0-9a-f]{12} 0% \(0\.0\/93\.8 MiB\)\n/);
      t.regex(err, /wick: pulling [0-9a-f]{12} 100% \(93\.8\/93\.8 MiB\)\n/);
      t.regex(err, /wick: success\n/);
      t.regex(err, /wick: serving hf\.co\/wick-test\/SmolLM2-GGUF:Q4_1 at /);
      const client = openaiClient(first.url);
      const res = await client.chat.completions.create({ model: "gpt-4o", messages: [{ role: "user", content: "Hi!" }], max_tokens: 3 });
      t.is(res.model, ref, "any name reaches the -m model");
      const ps = await new Ollama({ host: first.url }).ps();
      t.true(Date.parse(String(ps.models[0].expires_at)) > Date.now() + 100 * 365 * 86400e3, "the -m model stays loaded");
    } finally {
      t.is(await stopCli(first.child), 0);
    }
    const served = hub.bytesServed();
    const second = await startCli(["-m", "wick-test/SmolLM2-GGUF:Q4_1", "--port", "0", "--log-level", "silent"], env);
    try {
      t.notRegex(second.stderr(), /pulling/);
      t.is(hub.bytesServed(), served, "already in the store: nothing downloaded");
      t.regex(second.stderr(), /wick: serving hf\.co\/wick-test\/SmolLM2-GGUF:Q4_1 at /);
    } finally {
      t.is(await stopCli(second.child), 0, second.stderr());
    }
  } finally {
    await hub.close();
    rmSync(home, { recursive: true, force: true });
  }
});
