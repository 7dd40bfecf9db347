#!/usr/bin/env node
// Runs the TypeScript CLI in place through tsx, so `npx wick …` works from a checkout.
import { register } from "tsx/esm/api";

register();
await import("../ts/cli/main.ts");
