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
import type { ExecutionContext } from "ava";
import { needs, localFile, repoRoot, smollm2, type Asset } from "./helpers/assets.ts";
import { freePort, openaiClient } from "./helpers/server.ts";

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

/** A `wick serve` child started as `cmd args`, up once its stderr says so. */
interface Serve {
  stdout(): string;
  /** SIGTERM to its process group, and its exit. */
  stop(): Promise<void>;
}

/** Starts `cmd args` in its own process group (npx and qemu do not pass signals on) and waits for "wick: serving". */
async function startServe(t: ExecutionContext, cmd: string, args: string[], opts: { cwd: string; env: NodeJS.ProcessEnv }, timeoutMs = 120_000): Promise<Serve> {
  const server = spawn(cmd, args, { ...opts, stdio: ["ignore", "pipe", "pipe"], detached: true });
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
    const timer = setTimeout(() => resolve(false), timeoutMs);
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
  t.true(ready, `${cmd} ${args.join(" ")} did not start:\n${err}\n${out}`);
  return {
    stdout: () => out,
    stop: async () => {
      killGroup("SIGTERM");
      await exited;
    },
  };
}

/** The `isa` of the server's "model loaded" log line. */
function loadedIsa(stdout: string): string | undefined {
  return stdout
    .split("\n")
    .filter(Boolean)
    .map((l) => JSON.parse(l) as { msg?: string; isa?: string })
    .find((l) => l.msg === "model loaded")?.isa;
}

/** Packs with `addons` as the platform packages (scripts/pack.sh) into `dir`: [root, platform] tarballs. */
async function pack(t: ExecutionContext, dir: string, platform: string, addons?: string): Promise<[string, string]> {
  const env = addons ? { ...process.env, WICK_PACK_ADDONS: addons } : process.env;
  const { stdout } = await run("bash", [path.join(repoRoot, "scripts/pack.sh"), dir], { cwd: repoRoot, env, maxBuffer: 1 << 24 });
  const tarballs = stdout.trim().split("\n");
  const root = tarballs.find((p) => path.basename(p).startsWith("wick-0"));
  const binary = tarballs.find((p) => path.basename(p).startsWith(`wick-${platform}-`));
  t.truthy(root, stdout);
  t.truthy(binary, stdout);
  return [root!, binary!];
}

serial("npm pack → npm install in an empty directory: wick serve, import { Engine }, tsc on a consumer", async (t) => {
  const dir = mkdtempSync(path.join(os.tmpdir(), "wick-pkg-"));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const env = userEnv();
  await t.throwsAsync(run("cargo", ["--version"], { env }), undefined, "cargo must not be reachable from the install's PATH");

  // 1. Pack as a release would.
  const [root, platform] = await pack(t, path.join(dir, "tarballs"), "linux-x64-gnu");
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
  const serve = await startServe(t, "npx", ["--no-install", "wick", "serve", "-m", model!, "--port", String(port)], {
    cwd: app,
    env: { ...env, WICK_ISA: "scalar", WICK_HOME: path.join(dir, "home") },
  });
  const res = await fetch(`http://127.0.0.1:${port}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model: "m", messages: [{ role: "user", content: "Say hello." }], max_tokens: 8, temperature: 0 }),
  });
  t.is(res.status, 200);
  const body = (await res.json()) as { choices: { message: { content: string } }[]; usage: { completion_tokens: number } };
  t.true(body.choices[0].message.content.length > 0);
  t.true(body.usage.completion_tokens > 0);
  t.is(loadedIsa(serve.stdout()), "scalar", "the load log names the kernels");
  await serve.stop();

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

const arm64Addon = path.join(repoRoot, ".cache/arm64/addon/wick.linux-arm64-gnu.node");
const arm64Node = path.join(repoRoot, ".cache/arm64/node/bin/node");
/** Debian's aarch64 sysroot (libc6-arm64-cross), where qemu-user finds the dynamic loader. */
const arm64Sysroot = "/usr/aarch64-linux-gnu";

/** qemu-user for aarch64, as scripts/test-arm.sh installs it. */
function qemu(): Asset {
  try {
    execFileSync("qemu-aarch64", ["-version"], { stdio: "ignore" });
    return existsSync(arm64Sysroot) ? { path: "qemu-aarch64" } : { missing: `${arm64Sysroot} is missing (bash scripts/test-arm.sh installs it)` };
  } catch {
    return { missing: "qemu-aarch64 is not on PATH (bash scripts/test-arm.sh installs it)" };
  }
}

const arm = needs(smollm2(), localFile(arm64Addon, "bash scripts/test-arm.sh cross-builds it"), localFile(arm64Node, "bash scripts/test-arm.sh fetches it"), qemu(), registry());

arm.serial("the linux-arm64-gnu package under qemu-aarch64: wick serve answers a chat with llama.cpp aarch64's greedy text, on NEON with and without dotprod", async (t) => {
  const model = arm.path!;
  const dir = mkdtempSync(path.join(os.tmpdir(), "wick-arm64-"));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const env = userEnv();
  const [root, platform] = await pack(t, path.join(dir, "tarballs"), "linux-arm64-gnu", arm64Addon);

  // Installed as on an arm64 machine: npm resolves for arm64 Linux (--force: npm checks a package
  // named outright against this machine's own platform, whatever --cpu says).
  const app = path.join(dir, "app");
  await run("mkdir", ["-p", app]);
  writeFileSync(path.join(app, "package.json"), JSON.stringify({ name: "consumer", private: true, type: "module" }));
  await run("npm", ["install", "--no-audit", "--no-fund", "--include=optional", "--cpu=arm64", "--os=linux", "--force", root, platform], { cwd: app, env, maxBuffer: 1 << 24 });
  t.true(existsSync(path.join(app, "node_modules/wick-linux-arm64-gnu/wick.linux-arm64-gnu.node")));
  t.log(`linux-arm64-gnu ${kib(platform)} KiB packed, addon ${kib(arm64Addon)} KiB`);

  // What llama.cpp's own aarch64 build (armv8.2-a+dotprod, from the bundled source) answers to
  // this request — recorded by `bash scripts/parity-arm64.sh` (.cache/parity-arm64), which serves
  // it under qemu. The arm64 build follows that build's NEON float orders, which part from the x86
  // build's at this prompt's first step: x86 answers "1. Red\n2. Blue\n3. Green" (p("1") 0.1191
  // over 0.1072), aarch64 this (0.1158 under 0.1163).
  const request = { model: "m", messages: [{ role: "user" as const, content: "Name three colors." }], max_tokens: 16, temperature: 0 };
  const want = "The most obvious color is indeed red, but there are many more. Some examples";

  // The same request to the arm64 package on two emulated CPUs: Neoverse-V-class (`max`: dotprod
  // and i8mm) and Cortex-A72 (NEON only, a Raspberry Pi 4).
  for (const [cpu, isa] of [
    ["max", "i8mm"],
    ["cortex-a72", "neon"],
  ]) {
    const port = await freePort();
    const args = ["-L", arm64Sysroot, "-cpu", cpu, arm64Node, "node_modules/wick/bin/wick.js", "serve", "-m", model, "--port", String(port)];
    const serve = await startServe(t, "qemu-aarch64", args, { cwd: app, env: { ...env, WICK_HOME: path.join(dir, "home") } }, 300_000);
    const started = performance.now();
    const got = await openaiClient(`http://127.0.0.1:${port}`).chat.completions.create(request);
    t.log(`${cpu}: ${((performance.now() - started) / 1000).toFixed(1)} s under qemu (emulated, not speed)`);
    t.is(got.choices[0].message.content, want, `${cpu}: the arm64 build's greedy text is llama.cpp aarch64's`);
    t.is(loadedIsa(serve.stdout()), isa, `${cpu}: the load log names the NEON level`);
    await serve.stop();
  }
});
