/**
 * The store commands as users type them (bin/wick.js in a child process, stdout not a
 * terminal): the background server the first command starts (one for two commands at once,
 * its log and pid under WICK_HOME), create -f / list / show / cp / rm / ps / stop with the
 * columns Ollama prints and --json, pull's plain progress lines, and bad input — unknown
 * commands and flags (the closest suggested), bad values, missing models, something else on
 * the port, a server that cannot start — each one line on stderr and exit 1.
 */
import test from "ava";
import { mkdirSync, readFileSync, symlinkSync, writeFileSync, existsSync } from "node:fs";
import net from "node:net";
import path from "node:path";
import { needs } from "./helpers/assets.ts";
import { smollm2 } from "./helpers/assets.ts";
import { cells, cliHome, columnStarts, wick, type CliHome } from "./helpers/cli.ts";
import { startHub } from "./helpers/hub.ts";
import { freePort } from "./helpers/server.ts";

const { path: smol, serial } = needs(smollm2());

/** A home with `smol` created from a Modelfile whose FROM is relative to its own folder. */
async function homeWithSmol(t: { is: (a: unknown, b: unknown, m?: string) => void }, extra = ""): Promise<CliHome> {
  const h = await cliHome();
  const dir = path.join(h.home, "src");
  mkdirSync(dir);
  symlinkSync(smol!, path.join(dir, "model.gguf"));
  writeFileSync(path.join(dir, "Modelfile"), `FROM ./model.gguf\nPARAMETER temperature 0\nPARAMETER num_predict 4\nSYSTEM """You are\nterse."""\n${extra}`);
  const r = await h.wick(["create", "smol", "-f", path.join(dir, "Modelfile")]);
  t.is(r.status, 0, r.stderr);
  return h;
}

serial("two client commands at once start one background server; its log and pid are under WICK_HOME", async (t) => {
  const h = await cliHome();
  try {
    const [a, b] = await Promise.all([h.wick(["list"]), h.wick(["ps"])]);
    t.is(a.status, 0, a.stderr);
    t.is(b.status, 0, b.stderr);
    t.is(a.stderr, "", "no terminal: no 'starting a server' line");
    t.regex(a.stdout, /^NAME {4}ID {4}SIZE {4}MODIFIED\n$/);
    t.regex(b.stdout, /^NAME {4}ID {4}SIZE {4}PROCESSOR {4}CONTEXT {4}UNTIL\n$/);
    const log = readFileSync(path.join(h.home, "logs/server.log"), "utf8");
    t.is(log.match(/"msg":"listening"/g)?.length, 1, "one server started");
    t.regex(log, new RegExp(`serving the models of ${h.home.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")} \\(loaded on first use\\) at http://127\\.0\\.0\\.1:${h.port}/v1`));
    t.truthy(h.serverPid());
    t.false(existsSync(path.join(h.home, `serve-${h.port}.lock`)), "the lock is gone once the server answers");
    const again = await h.wick(["list"]);
    t.is(again.status, 0);
    t.is(readFileSync(path.join(h.home, "logs/server.log"), "utf8").match(/"msg":"listening"/g)?.length, 1, "the next command uses it");
  } finally {
    await h.close();
  }
});

serial("create -f, list, show, cp, rm: Ollama's columns and words, --json for scripts", async (t) => {
  const h = await homeWithSmol(t);
  try {
    const list = await h.wick(["list"]);
    t.is(list.status, 0, list.stderr);
    const [header, row, ...more] = list.stdout.trimEnd().split("\n");
    t.deepEqual(more, []);
    t.regex(header, /^NAME\s+ID\s+SIZE\s+MODIFIED$/);
    const [name, id, size, modified] = cells(row, columnStarts(header));
    t.is(name, "smol:latest");
    t.regex(id, /^[0-9a-f]{12}$/);
    t.is(size, "98 MB");
    t.regex(modified, /^(Less than a second|\d+ seconds?) ago$/);
    const json = JSON.parse((await h.wick(["ls", "--json"])).stdout);
    t.is(json.models[0].name, "smol:latest");
    t.true(json.models[0].digest.startsWith(id));

    const show = await h.wick(["show", "smol"]);
    t.is(show.status, 0, show.stderr);
    t.regex(show.stdout, /^ {2}Model\n {4}architecture {8}llama\n {4}parameters {10}135M\n {4}context length {6}8192\n {4}embedding length {4}576\n {4}quantization {8}Q4_1\n/);
    t.regex(show.stdout, /\n {2}Parameters\n {4}num_predict {4}4\n {4}temperature {4}0\n/);
    t.regex(show.stdout, /\n {2}System\n {4}You are\n {4}terse\.\n/);
    t.is((await h.wick(["show", "smol", "--system"])).stdout, "You are\nterse.\n");
    t.regex((await h.wick(["show", "smol", "--parameters"])).stdout, /^num_predict +4\ntemperature +0\n$/);
    t.regex((await h.wick(["show", "smol", "--template"])).stdout, /<\|im_start\|>/);
    t.regex((await h.wick(["show", "smol", "--modelfile"])).stdout, /\nFROM .*\/blobs\/sha256-[0-9a-f]{64}\n/);
    t.deepEqual(JSON.parse((await h.wick(["show", "smol", "--json"])).stdout).details.quantization_level, "Q4_1");

    const cp = await h.wick(["cp", "smol", "me/smol:v2"]);
    t.is(cp.stdout, "copied 'smol' to 'me/smol:v2'\n", cp.stderr);
    t.deepEqual(
      JSON.parse((await h.wick(["list", "--json"])).stdout)
        .models.map((m: { name: string }) => m.name)
        .sort(),
      ["me/smol:v2", "smol:latest"],
    );
    const rm = await h.wick(["rm", "me/smol:v2"]);
    t.is(rm.stdout, "deleted 'me/smol:v2'\n", rm.stderr);
    t.deepEqual(
      JSON.parse((await h.wick(["list", "--json"])).stdout).models.map((m: { name: string }) => m.name),
      ["smol:latest"],
    );
  } finally {
    await h.close();
  }
});

serial("ps shows the loaded model (NAME ID SIZE PROCESSOR CONTEXT UNTIL); stop unloads it", async (t) => {
  const h = await homeWithSmol(t);
  try {
    const r = await h.wick(["run", "smol", "Hi"]);
    t.is(r.status, 0, r.stderr);
    const ps = await h.wick(["ps"]);
    const [header, row] = ps.stdout.trimEnd().split("\n");
    t.regex(header, /^NAME\s+ID\s+SIZE\s+PROCESSOR\s+CONTEXT\s+UNTIL$/);
    const [name, id, size, processor, context, until] = cells(row, columnStarts(header));
    t.is(name, "smol:latest");
    t.regex(id, /^[0-9a-f]{12}$/);
    t.regex(size, /^\d+ MB$/);
    t.is(processor, "100% CPU");
    t.is(context, "4096");
    t.regex(until, /^(4|5) minutes from now$/);
    t.is(JSON.parse((await h.wick(["ps", "--json"])).stdout).models[0].context_length, 4096);
    const stop = await h.wick(["stop", "smol"]);
    t.is(stop.status, 0, stop.stderr);
    t.is(stop.stdout, "");
    t.is((await h.wick(["ps"])).stdout.trimEnd().split("\n").length, 1, "nothing loaded");
    const again = await h.wick(["stop", "smol"]);
    t.is(again.status, 1);
    t.deepEqual(again.lines, ["wick: model 'smol' is not running (wick ps lists the loaded models)"]);
  } finally {
    await h.close();
  }
});

serial("pull off a terminal prints plain lines; run pulls a hub model it does not have first", async (t) => {
  const hub = await startHub();
  const h = await cliHome({ HF_ENDPOINT: hub.url });
  try {
    await hub.addRepo("wick-test/SmolLM2-GGUF", [{ path: "SmolLM2-135M-Instruct-Q4_1.gguf", source: smol! }]);
    await hub.addRepo("wick-test/Other-GGUF", [{ path: "other-Q4_1.gguf", source: smol! }]);
    const pull = await h.wick(["pull", "hf.co/wick-test/SmolLM2-GGUF:Q4_1"]);
    t.is(pull.status, 0, pull.stderr);
    t.is(pull.stdout, "");
    t.is(pull.lines[0], "pulling manifest");
    t.regex(pull.lines[1], /^pulling [0-9a-f]{12} 0% \(0\.0\/93\.8 MiB\)$/);
    t.regex(pull.lines.at(-4)!, /^pulling [0-9a-f]{12} 100% \(93\.8\/93\.8 MiB\)$/);
    t.deepEqual(pull.lines.slice(-3), ["verifying sha256 digest", "writing manifest", "success"]);
    t.true(pull.lines.length <= 16, "at most one line per 10%");
    t.regex((await h.wick(["list"])).stdout, /\nhf\.co\/wick-test\/SmolLM2-GGUF:Q4_1 {4}[0-9a-f]{12} {4}98 MB {4}/);

    const run = await h.wick(["run", "wick-test/Other-GGUF:Q4_1", "Say hi", "-n", "4"]);
    t.is(run.status, 0, run.stderr);
    t.is(run.lines[0], "pulling manifest");
    t.is(run.lines.at(-1), "success");
    t.true(run.stdout.trim().length > 0, "then the answer");
    t.regex((await h.wick(["list"])).stdout, /\nhf\.co\/wick-test\/Other-GGUF:Q4_1 /);
  } finally {
    await h.close();
    await hub.close();
  }
});

test("a Modelfile error names its line; a missing Modelfile names the file", async (t) => {
  const h = await cliHome();
  try {
    const mf = path.join(h.home, "Modelfile");
    writeFileSync(mf, "FROM ./x.gguf\nPARAMETER temperature hot\n");
    const bad = await h.wick(["create", "x", "-f", mf]);
    t.is(bad.status, 1);
    t.deepEqual(bad.lines, [`wick: ${mf}: (line 2): invalid float value for temperature: "hot"`]);
    const missing = await h.wick(["create", "x"]);
    t.is(missing.status, 1);
    t.regex(missing.lines.join("\n"), /^wick: cannot read the Modelfile .*\/Modelfile: no such file$/);
    t.is(h.serverPid(), undefined, "nothing was sent, no server started");
  } finally {
    await h.close();
  }
});

const BAD: [string, string[], RegExp][] = [
  ["unknown command", ["lst"], /^wick: unknown command 'lst' \(did you mean list, ls\?\)$/],
  ["unknown serve flag, an alias's misspelling", ["serve", "--max-model-length", "4096"], /^wick serve: unknown option '--max-model-length' \(did you mean --max-model-len\?\)$/],
  ["unknown run flag", ["run", "smol", "--tmp", "0", "hi"], /^wick run: unknown option '--tmp' \(did you mean --temp\?\)$/],
  ["run: a bad value names the flag", ["run", "smol", "--top-p", "2", "hi"], /^wick run: option '--top-p <p>' argument '2' is invalid\. Expected a number from 0 to 1\.$/],
  ["run: a bad alias value names the alias", ["run", "smol", "-n", "lots", "hi"], /^wick run: option '-n, --n-predict <n>' argument 'lots' is invalid/],
  ["run: a name that is not one", ["run", "bad name", "hi"], /^wick run: argument 'bad name' is invalid\. invalid model name "bad name": whitespace is not allowed\.$/],
  ["run: a .gguf that does not exist", ["run", "./absent.gguf", "hi"], /^wick run: argument '\.\/absent\.gguf' is invalid\. No such file\.$/],
  ["run without a model", ["run"], /^wick run: missing required argument 'model'$/],
  ["serve: two models", ["serve", "a", "-m", "b"], /^wick serve: give the model once/],
  ["serve: -hf without a repo", ["serve", "-hf", "foo"], /^wick serve: option '-hf' \(--hf-repo <org\/repo\[:quant\]>\) argument 'foo' is invalid/],
  ["serve: -ngl not a count", ["serve", "-ngl", "many"], /^wick serve: option '-ngl' \(--n-gpu-layers <n>\) argument 'many' is invalid\. Expected an integer, auto or all\.$/],
];

for (const [name, args, pattern] of BAD) {
  test(`bad input: ${name} → exit 1, one line`, async (t) => {
    const r = await wick(args);
    t.is(r.status, 1, r.stderr);
    t.is(r.lines.length, 1, r.stderr);
    t.regex(r.lines[0], pattern);
    t.is(r.stdout, "");
  });
}

serial("bad input against a server: models that do not exist → one line, exit 1", async (t) => {
  const h = await cliHome();
  try {
    const cases: [string[], string][] = [
      [["run", "nosuch", "hi"], "wick: model 'nosuch' not found: 'wick list' shows the store; 'wick pull hf.co/org/repo[:quant]' or 'wick create nosuch -f Modelfile' adds one"],
      [["show", "nosuch"], "wick: model 'nosuch' not found"],
      [["rm", "nosuch"], "wick: model 'nosuch' not found"],
      [["cp", "nosuch", "other"], "wick: model 'nosuch' not found"],
      [["stop", "nosuch"], "wick: model 'nosuch' is not running (wick ps lists the loaded models)"],
    ];
    for (const [args, line] of cases) {
      const r = await h.wick(args);
      t.is(r.status, 1, args.join(" "));
      t.deepEqual(r.lines, [line], args.join(" "));
    }
  } finally {
    await h.close();
  }
});

serial("a port held by something else, a server that cannot start, a port in use: one line, exit 1", async (t) => {
  // Something that accepts and hangs up: not a Wick server.
  const other = net.createServer((s) => s.destroy()).listen(0, "127.0.0.1");
  await new Promise((r) => other.once("listening", r));
  const busy = (other.address() as net.AddressInfo).port;
  const h = await cliHome();
  try {
    const taken = await h.wick(["list"], { env: { WICK_HOST: `127.0.0.1:${busy}` } });
    t.is(taken.status, 1, taken.stderr);
    t.is(taken.lines.length, 1, taken.stderr);
    t.regex(taken.lines[0], new RegExp(`^wick: something that is not a Wick server answers at 127\\.0\\.0\\.1:${busy} \\(.+\\); set WICK_HOST to another address$`));

    const broken = await h.wick(["list"], { env: { WICK_KEEP_ALIVE: "later" } });
    t.is(broken.status, 1);
    t.is(broken.lines.length, 1, broken.stderr);
    t.regex(broken.lines[0], /^wick: the Wick server did not start: Invalid WICK_KEEP_ALIVE "later".* \(log: .*\/logs\/server\.log\)$/);
    t.false(existsSync(path.join(h.home, `serve-${h.port}.lock`)), "no lock left behind");

    const serve = await h.wick(["serve", "--port", String(busy)]);
    t.is(serve.status, 1);
    t.is(serve.lines.length, 1, serve.stderr);
    t.regex(serve.lines[0], new RegExp(`^wick: cannot listen on 127\\.0\\.0\\.1:${busy}: listen EADDRINUSE`));
  } finally {
    other.close();
    await h.close();
  }
});

test("a remote WICK_HOST is never started here", async (t) => {
  const port = await freePort();
  const r = await wick(["list"], { env: { ...process.env, WICK_HOST: `192.0.2.1:${port}` }, timeoutMs: 30_000 });
  t.is(r.status, 1);
  t.is(r.lines.length, 1, r.stderr);
  t.regex(r.lines[0], /^wick: could not connect to the Wick server at http:\/\/192\.0\.2\.1:\d+ \(.+\); start it there with 'wick serve'$/);
});
