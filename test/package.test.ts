/**
 * What a user gets from npm, checked on this machine: the root package and the linux-x64-gnu
 * binary package as `npm pack` makes them (scripts/pack.sh), installed into an empty directory
 * with npm fetching the other dependencies from the registry and no Rust toolchain on PATH.
 * Then, from that directory only: `npx wick serve -m SmolLM2` answers a chat with the
 * portable kernels forced (and says so at load), a plain Node script imports `Engine` from
 * "wick" and generates with the kernels the CPU has, and `tsc --noEmit` type-checks a
 * consumer that uses the library (and rejects one that misuses it).
 *
 * Sizes and install time go to the test log (recorded in benches/RESULTS.md).
 */
import { execFile, execFileSync, spawn } from "node:child_process";
import { copyFileSync, existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { promisify } from "node:util";
import { needs, localFile, repoRoot, smollm2, type Asset } from "./helpers/assets.ts";
import { freePort } from "./helpers/server.ts";

const run = promisify(execFile);
const addon = path.join(repoRoot, "ts/native/wick.linux-x64-gnu.node");

/** The npm registry, as an asset: without it nothing can be installed. */
function registry(): Asset {
  try {
    execFileSync("npm", ["ping"], { stdio: "ignore", timeout: 30_000 });
    return { path: "registry" };
  } catch {
    return { missing: "the npm registry does not answer `npm ping`" };
  }
}

const { path: model, serial } = needs(
  smollm2(),
  localFile(addon, "run npm run build:native"),
  process.platform === "linux" && process.arch === "x64" ? { path: "linux-x64" } : { missing: `the linux-x64-gnu package cannot run on ${process.platform}-${process.arch}` },
  registry(),
);

/** An environment as a user's: no cargo/rustc on PATH, none of npm's per-project settings (this repo's omit=optional). */
function userEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (/^npm_/i.test(k) || k === "NAPI_RS_NATIVE_LIBRARY_PATH" || k === "WICK_ISA" || k.startsWith("CARGO") || k.startsWith("RUST")) continue;
    env[k] = v;
  }
  env.PATH = (process.env.PATH ?? "")
    .split(path.delimiter)
    .filter((dir) => !existsSync(path.join(dir, "cargo")) && !existsSync(path.join(dir, "rustc")))
    .join(path.delimiter);
  return { ...env, ...extra };
}

/** The widest kernels this CPU has, as wick-core's feats.rs decides (for the uncapped run). */
function expectedIsa(): string {
  const flags = new Set((readFileSync("/proc/cpuinfo", "utf8").match(/^flags\s*:(.*)$/m)?.[1] ?? "").trim().split(/\s+/));
  if (["avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512_vnni"].every((f) => flags.has(f))) return "avx512vnni";
  if (["avx2", "fma", "f16c"].every((f) => flags.has(f))) return "avx2";
  return "scalar";
}

const kib = (p: string) => Math.round(statSync(p).size / 1024);

serial("npm pack → npm install in an empty directory: wick serve, import { Engine }, tsc on a consumer", async (t) => {
  const dir = mkdtempSync(path.join(os.tmpdir(), "wick-pkg-"));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const env = userEnv();
  await t.throwsAsync(run("cargo", ["--version"], { env }), undefined, "cargo must not be reachable from the install's PATH");

  // 1. Pack as a release would.
  const { stdout } = await run("bash", [path.join(repoRoot, "scripts/pack.sh"), path.join(dir, "tarballs")], { cwd: repoRoot, maxBuffer: 1 << 24 });
  const tarballs = stdout.trim().split("\n");
  const root = tarballs.find((p) => path.basename(p).startsWith("wick-0"))!;
  const platform = tarballs.find((p) => path.basename(p).startsWith("wick-linux-x64-gnu-"))!;
  t.truthy(root, stdout);
  t.truthy(platform, stdout);
  const listing = (await run("tar", ["-tzf", root])).stdout;
  t.false(/\.node$/m.test(listing), "the root package carries no addon: it comes from the platform package");
  t.true(listing.includes("package/dist/lib.d.ts") && listing.includes("package/dist/native/native.cjs"));
  t.false(listing.includes("package/ts/"), "TypeScript sources stay out: dist/ is what runs");

  // 2. Install into an empty project; the rest from the registry.
  const app = path.join(dir, "app");
  await run("mkdir", ["-p", app]);
  writeFileSync(path.join(app, "package.json"), JSON.stringify({ name: "consumer", private: true, type: "module" }));
  const started = performance.now();
  await run("npm", ["install", "--no-audit", "--no-fund", "--include=optional", root, platform, "typescript@5.9", "@types/node@20"], {
    cwd: app,
    env,
    maxBuffer: 1 << 24,
  });
  const installSeconds = (performance.now() - started) / 1000;
  const installed = path.join(app, "node_modules/wick-linux-x64-gnu/wick.linux-x64-gnu.node");
  t.true(existsSync(installed), "the platform package is installed (not left out as optional)");
  t.false(existsSync(path.join(app, "node_modules/wick/dist/native/wick.linux-x64-gnu.node")));
  t.log(`root package ${kib(root)} KiB packed; linux-x64-gnu ${kib(platform)} KiB packed, addon ${kib(installed)} KiB; npm install ${installSeconds.toFixed(1)} s (with typescript and @types/node)`);

  // 3. `npx wick serve` with the portable kernels forced answers a chat, and logged the kernels at load.
  const port = await freePort();
  const server = spawn("npx", ["--no-install", "wick", "serve", "-m", model!, "--port", String(port)], {
    cwd: app,
    env: { ...env, WICK_ISA: "scalar", WICK_HOME: path.join(dir, "home") },
    stdio: ["ignore", "pipe", "pipe"],
    // Its own process group: npx does not pass signals on to the server it starts.
    detached: true,
  });
  const exited = new Promise((resolve) => server.once("exit", resolve));
  const killGroup = (signal: NodeJS.Signals) => {
    try {
      process.kill(-server.pid!, signal);
    } catch {
      // already gone
    }
  };
  t.teardown(() => killGroup("SIGKILL"));
  let out = "";
  let err = "";
  server.stdout.on("data", (b: Buffer) => (out += b.toString()));
  server.stderr.on("data", (b: Buffer) => (err += b.toString()));
  const ready = await new Promise<boolean>((resolve) => {
    const timer = setTimeout(() => resolve(false), 120_000);
    const check = () => {
      if (err.includes("wick: serving")) {
        clearTimeout(timer);
        resolve(true);
      }
    };
    server.stderr.on("data", check);
    server.once("exit", () => {
      clearTimeout(timer);
      resolve(false);
    });
  });
  t.true(ready, `wick serve did not start:\n${err}\n${out}`);
  const res = await fetch(`http://127.0.0.1:${port}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model: "m", messages: [{ role: "user", content: "Say hello." }], max_tokens: 8, temperature: 0 }),
  });
  t.is(res.status, 200);
  const body = (await res.json()) as { choices: { message: { content: string } }[]; usage: { completion_tokens: number } };
  t.true(body.choices[0].message.content.length > 0);
  t.true(body.usage.completion_tokens > 0);
  const loaded = out
    .split("\n")
    .filter(Boolean)
    .map((l) => JSON.parse(l) as { msg?: string; isa?: string })
    .find((l) => l.msg === "model loaded");
  t.is(loaded?.isa, "scalar", `the load log names the kernels: ${JSON.stringify(loaded)}`);
  killGroup("SIGTERM");
  await exited;

  // 4. A plain Node script: import { Engine } from "wick" and generate, uncapped kernels.
  writeFileSync(
    path.join(app, "generate.mjs"),
    `import { Engine, cpuIsa } from "wick";
const engine = await Engine.load({ modelPath: process.argv[2], contextSize: 512 });
let text = "";
for await (const ev of engine.generate({ promptTokens: engine.tokenize("One, two, three,"), maxTokens: 6, temperature: 0 })) {
  if (ev.type === "token") text += ev.text;
}
await engine.unload();
console.log(JSON.stringify({ text, isa: cpuIsa() }));
`,
  );
  const gen = JSON.parse((await run("node", ["generate.mjs", model!], { cwd: app, env })).stdout) as { text: string; isa: string };
  t.true(gen.text.length > 0, JSON.stringify(gen));
  t.is(gen.isa, expectedIsa(), "without WICK_ISA the engine picks the widest kernels the CPU has");

  // 5. Types: the example type-checks against the installed package; a misuse does not.
  copyFileSync(path.join(repoRoot, "examples/library.ts"), path.join(app, "library.ts"));
  const tsconfig = { compilerOptions: { target: "ES2022", module: "NodeNext", moduleResolution: "NodeNext", strict: true, noEmit: true, types: ["node"] }, files: ["library.ts"] };
  writeFileSync(path.join(app, "tsconfig.json"), JSON.stringify(tsconfig));
  const tsc = path.join(app, "node_modules/.bin/tsc");
  const typed = await run(tsc, ["--noEmit", "-p", "."], { cwd: app, env }).then(
    () => "",
    (e: Error & { stdout?: string }) => e.stdout ?? String(e),
  );
  t.is(typed, "", "tsc --noEmit on a consumer of the library");
  writeFileSync(path.join(app, "misuse.ts"), `import { Engine } from "wick";\nawait Engine.load({ modelPth: "x.gguf" });\n`);
  writeFileSync(path.join(app, "tsconfig.json"), JSON.stringify({ ...tsconfig, files: ["misuse.ts"] }));
  const misuse = await run(tsc, ["--noEmit", "-p", "."], { cwd: app, env }).then(
    () => "",
    (e: Error & { stdout?: string }) => e.stdout ?? String(e),
  );
  t.regex(misuse, /modelPth/, "the types are really checked");
});
