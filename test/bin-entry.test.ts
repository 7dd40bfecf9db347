/**
 * bin/wick.js in a checkout: the compiled dist/ while `npm run build:ts` wrote it after the
 * last change under ts/ (it starts ~0.5 s sooner: scripts/start.sh builds it), the TypeScript
 * through tsx when a source is newer or WICK_FROM_SOURCE is set (as it is for the tests), the
 * one-file bundle before the compiled modules; and a real build (tsc + scripts/build-bundle.ts)
 * serves a model on the checkout's addon (dist/native holds only napi's loader) and the files
 * beside it. Each case runs a copy of bin/wick.js in a temp "checkout".
 */
import test from "ava";
import { execFileSync, spawn } from "node:child_process";
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, utimesSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { buildBundle } from "../scripts/build-bundle.ts";
import { fixture, needs, repoRoot } from "./helpers/assets.ts";
import { freePort } from "./helpers/server.ts";

/** A temp root with bin/wick.js, the repo's node_modules, and `files` (path → text). */
function checkout(files: Record<string, string>): string {
  const root = mkdtempSync(path.join(os.tmpdir(), "wick-bin-"));
  mkdirSync(path.join(root, "bin"));
  copyFileSync(path.join(repoRoot, "bin/wick.js"), path.join(root, "bin/wick.js"));
  symlinkSync(path.join(repoRoot, "node_modules"), path.join(root, "node_modules"));
  for (const [p, text] of Object.entries(files)) {
    mkdirSync(path.dirname(path.join(root, p)), { recursive: true });
    writeFileSync(path.join(root, p), text);
  }
  return root;
}

/** The environment without the test suite's WICK_FROM_SOURCE (and the addon overrides), plus `extra`. */
function env(extra: NodeJS.ProcessEnv = {}): NodeJS.ProcessEnv {
  const e = { ...process.env, ...extra };
  for (const k of ["WICK_FROM_SOURCE", "NAPI_RS_NATIVE_LIBRARY_PATH", "WICK_CUDA_ADDON"]) if (!(k in extra)) delete e[k];
  return e;
}

const run = (root: string, e: NodeJS.ProcessEnv) => execFileSync(process.execPath, [path.join(root, "bin/wick.js")], { env: e, encoding: "utf8" }).trim();

test("dist/ runs while it is newer than every source, pointed at the checkout's addon; a newer source or WICK_FROM_SOURCE runs ts/", (t) => {
  const platform = `${process.platform}-${process.arch}${process.platform === "linux" ? "-gnu" : process.platform === "win32" ? "-msvc" : ""}`;
  const addon = `ts/native/wick.${platform}.node`;
  const root = checkout({
    "package.json": '{ "type": "module" }\n',
    "ts/cli/main.ts": 'const n: string = "source";\nconsole.log(n);\n',
    [addon]: "",
    "dist/cli/main.js": 'console.log(`compiled ${process.env.NAPI_RS_NATIVE_LIBRARY_PATH ?? "-"}`);\n',
    "dist/.built": "",
  });
  try {
    const past = new Date(Date.now() - 60_000);
    utimesSync(path.join(root, "ts/cli/main.ts"), past, past);
    utimesSync(path.join(root, addon), new Date(), new Date(Date.now() + 60_000)); // a rebuilt addon does not make dist/ stale
    t.is(run(root, env()), `compiled ${path.join(root, addon)}`);
    t.is(run(root, env({ WICK_FROM_SOURCE: "1" })), "source");
    t.is(run(root, env({ NAPI_RS_NATIVE_LIBRARY_PATH: "/elsewhere.node" })), "compiled /elsewhere.node", "a path the user set is kept");
    writeFileSync(path.join(root, "dist/cli/bundle.cjs"), "console.log(`bundle ${typeof require} ${__filename}`);\n");
    t.is(run(root, env()), `bundle function ${path.join(root, "dist/cli/bundle.cjs")}`, "the one-file bundle (a CommonJS script) before the modules");
    const later = new Date(Date.now() + 60_000);
    utimesSync(path.join(root, "ts/cli/main.ts"), later, later);
    t.is(run(root, env()), "source", "a source edited after the build");
    rmSync(path.join(root, "dist/.built"));
    utimesSync(path.join(root, "ts/cli/main.ts"), past, past);
    t.is(run(root, env()), "source", "no stamp: a build that did not finish");
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
});

test("the bundle runs with V8's code cache beside it: written a second after a start without one, used by the next, a foreign one refused and replaced", async (t) => {
  const root = checkout({
    "package.json": '{ "type": "module" }\n',
    "dist/.built": "",
    // Lives past the second after which bin/wick.js writes the cache; says whether a function was compiled from it.
    "dist/cli/bundle.cjs": "function f(x) { return x * 2; }\nconsole.log(f(21));\nsetTimeout(() => {}, 1500);\n",
  });
  const cache = path.join(root, "dist/cli/bundle.cjs.cache");
  try {
    t.is(run(root, env()), "42");
    t.true(existsSync(cache), "written by the start that had none");
    const written = readFileSync(cache);
    t.true(written.length > 0);
    t.is(run(root, env()), "42", "the next start runs with it");
    t.deepEqual(readFileSync(cache), written, "an accepted cache is left as it is");
    writeFileSync(cache, "not a V8 code cache");
    t.is(run(root, env()), "42", "a cache V8 refuses is not run");
    t.notDeepEqual(readFileSync(cache).toString(), "not a V8 code cache", "and is written again");
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
});

const { path: tiny, serial } = needs(fixture("tiny-llama-q8_0.gguf"));

serial("a compiled build in a checkout serves a model on the checkout's addon", async (t) => {
  const root = checkout({});
  for (const p of ["ts", "package.json", "ui"]) symlinkSync(path.join(repoRoot, p), path.join(root, p));
  try {
    execFileSync(process.execPath, [path.join(repoRoot, "node_modules/typescript/bin/tsc"), "-p", path.join(repoRoot, "tsconfig.build.json"), "--outDir", path.join(root, "dist")]);
    mkdirSync(path.join(root, "dist/native"), { recursive: true });
    copyFileSync(path.join(repoRoot, "ts/native/native.cjs"), path.join(root, "dist/native/native.cjs"));
    await buildBundle(path.join(root, "dist"));
    writeFileSync(path.join(root, "dist/.built"), "");
    const port = await freePort();
    const child = spawn(process.execPath, [path.join(root, "bin/wick.js"), "serve", "-m", tiny!, "--port", String(port)], {
      env: env({ WICK_HOME: root }),
      stdio: ["ignore", "ignore", "pipe"],
    });
    try {
      let err = "";
      await new Promise<void>((resolve, reject) => {
        child.stderr.on("data", (d) => {
          err += d;
          if (/wick: serving .* at http/.test(err)) resolve();
        });
        child.once("exit", (code) => reject(new Error(`exited ${code}: ${err}`)));
      });
      const res = await fetch(`http://127.0.0.1:${port}/v1/completions`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ model: "m", prompt: "Hello", max_tokens: 3, temperature: 0 }),
      });
      t.is(res.status, 200);
      t.is(((await res.json()) as { usage: { completion_tokens: number } }).usage.completion_tokens, 3);
      // Files read beside the bundle: package.json (the version) and the chat page.
      t.deepEqual(await (await fetch(`http://127.0.0.1:${port}/api/version`)).json(), { version: JSON.parse(readFileSync(path.join(repoRoot, "package.json"), "utf8")).version });
      if (existsSync(path.join(repoRoot, "ui/build/index.html"))) {
        const page = await fetch(`http://127.0.0.1:${port}/`, { headers: { accept: "text/html" } });
        t.regex(await page.text(), /^<!doctype html>/i);
      }
    } finally {
      child.kill("SIGKILL");
    }
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
});
