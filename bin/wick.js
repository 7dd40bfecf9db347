#!/usr/bin/env node
// The `wick` command. An installed package has no ts/ and runs the compiled dist/. A checkout
// runs dist/ too when `npm run build:ts` wrote it after the last change under ts/ (it starts
// ~0.5 s sooner than compiling on the fly: scripts/start.sh builds it), else the TypeScript in
// place through tsx (a devDependency); WICK_FROM_SOURCE=1 asks for the TypeScript (the tests).
import { existsSync, readdirSync, readFileSync, renameSync, statSync, writeFileSync } from "node:fs";
import Module from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";
import vm from "node:vm";

const root = fileURLToPath(new URL("..", import.meta.url));
const source = `${root}ts`;
/** Written by build:ts once dist/ is complete. */
const stamp = `${root}dist/.built`;

/** Whether anything under `dir` (the addon binaries aside: they are loaded from there) changed after `since`. */
function changedSince(dir, since) {
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = `${dir}/${e.name}`;
    if (e.isDirectory() ? changedSince(p, since) : !e.name.endsWith(".node") && statSync(p).mtimeMs > since) return true;
  }
  return false;
}

/**
 * Runs the one-file bundle (scripts/build-bundle.ts, a CommonJS script) with V8's code cache
 * beside it, else imports the compiled modules. Compiling the 4 MB bundle and the functions a
 * start runs is ~40 ms of `wick serve`'s start; the cache holds them compiled. It is written
 * (tmp + rename) a second after a start that had none or whose cache V8 refused (another Node),
 * when the directory is writable; a cache that does not fit is refused by V8, never run.
 */
async function runCompiled() {
  const bundle = fileURLToPath(new URL("../dist/cli/bundle.cjs", import.meta.url));
  if (!existsSync(bundle)) return import(new URL("../dist/cli/main.js", import.meta.url).href);
  const cacheFile = `${bundle}.cache`;
  let cachedData;
  try {
    cachedData = readFileSync(cacheFile);
  } catch {
    cachedData = undefined;
  }
  const script = new vm.Script(Module.wrap(readFileSync(bundle, "utf8")), {
    filename: bundle,
    cachedData,
    importModuleDynamically: vm.constants.USE_MAIN_CONTEXT_DEFAULT_LOADER,
  });
  if (!cachedData || script.cachedDataRejected) {
    setTimeout(() => {
      try {
        const tmp = `${cacheFile}.${process.pid}`;
        writeFileSync(tmp, script.createCachedData());
        renameSync(tmp, cacheFile);
      } catch {
        // A read-only install: every start compiles.
      }
    }, 1000).unref();
  }
  const mod = new Module(bundle);
  mod.filename = bundle;
  mod.paths = Module._nodeModulePaths(path.dirname(bundle));
  script.runInThisContext().call(mod.exports, mod.exports, Module.createRequire(bundle), mod, bundle, path.dirname(bundle));
}

if (!existsSync(source)) {
  await runCompiled();
} else if (!process.env.WICK_FROM_SOURCE && existsSync(stamp) && !changedSince(source, statSync(stamp).mtimeMs)) {
  // dist/native holds napi's loader only: point it (and the CUDA probe) at the checkout's builds.
  const native = `${source}/native`;
  const platform = `${process.platform}-${process.arch}${process.platform === "linux" ? "-gnu" : process.platform === "win32" ? "-msvc" : ""}`;
  const cpu = `${native}/wick.${platform}.node`;
  const cuda = `${native}/wick.${platform}-cuda.node`;
  if (existsSync(cpu)) process.env.NAPI_RS_NATIVE_LIBRARY_PATH ??= cpu;
  if (existsSync(cuda)) process.env.WICK_CUDA_ADDON ??= cuda;
  await runCompiled();
} else {
  const { register } = await import("tsx/esm/api");
  register();
  await import(new URL("../ts/cli/main.ts", import.meta.url).href);
}
