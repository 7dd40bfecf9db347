#!/usr/bin/env node
// The `wick` command. In a checkout it runs the TypeScript CLI in place through tsx (a
// devDependency); an installed package has no ts/ and runs the compiled dist/ instead.
import { existsSync } from "node:fs";

const source = new URL("../ts/cli/main.ts", import.meta.url);
if (existsSync(source)) {
  const { register } = await import("tsx/esm/api");
  register();
  await import(source.href);
} else {
  await import("../dist/cli/main.js");
}
