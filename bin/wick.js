#!/usr/bin/env node
// The `wick` command. An installed package has no ts/ and runs the compiled dist/. A checkout
// runs dist/ too when `npm run build:ts` wrote it after the last change under ts/ (it starts
// ~0.5 s sooner than compiling on the fly: scripts/start.sh builds it), else the TypeScript in
// place through tsx (a devDependency); WICK_FROM_SOURCE=1 asks for the TypeScript (the tests).
import { existsSync, readdirSync, statSync } from "node:fs";
import { fileURLToPath } from "node:url";

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

/** The one-file bundle (scripts/build-bundle.ts), else the compiled modules. */
function compiled() {
  const bundle = new URL("../dist/cli/bundle.js", import.meta.url);
  return existsSync(bundle) ? bundle.href : new URL("../dist/cli/main.js", import.meta.url).href;
}

if (!existsSync(source)) {
  await import(compiled());
} else if (!process.env.WICK_FROM_SOURCE && existsSync(stamp) && !changedSince(source, statSync(stamp).mtimeMs)) {
  // dist/native holds napi's loader only: point it (and the CUDA probe) at the checkout's builds.
  const native = `${source}/native`;
  const platform = `${process.platform}-${process.arch}${process.platform === "linux" ? "-gnu" : process.platform === "win32" ? "-msvc" : ""}`;
  const cpu = `${native}/wick.${platform}.node`;
  const cuda = `${native}/wick.${platform}-cuda.node`;
  if (existsSync(cpu)) process.env.NAPI_RS_NATIVE_LIBRARY_PATH ??= cpu;
  if (existsSync(cuda)) process.env.WICK_CUDA_ADDON ??= cuda;
  await import(compiled());
} else {
  const { register } = await import("tsx/esm/api");
  register();
  await import(new URL("../ts/cli/main.ts", import.meta.url).href);
}
