/**
 * Entry point of the `wick` command (bin/wick.js runs this through tsx). Each command's module
 * is imported when it runs, so client commands start without loading the engine.
 */
import { CliError } from "./errors.ts";
import { runCli, type Commands } from "./program.ts";

const commands: Commands = {
  serve: async (flags) => (await import("./serve.ts")).serve(flags),
  bench: async (opts) => (await import("./bench.ts")).bench(opts),
  show: async (model, flags) => (await import("./show.ts")).show(model, flags),
  run: async (model, prompt, flags) => (await import("./run.ts")).run(model, prompt, flags),
  pull: async (model) => (await import("./models.ts")).pull(model),
  create: async (model, flags) => (await import("./models.ts")).create(model, flags),
  list: async (flags) => (await import("./models.ts")).list(flags),
  ps: async (flags) => (await import("./models.ts")).ps(flags),
  rm: async (models) => (await import("./models.ts")).rm(models),
  cp: async (source, destination) => (await import("./models.ts")).cp(source, destination),
  stop: async (model) => (await import("./models.ts")).stop(model),
  convert: async (dir, flags) => (await import("./convert.ts")).convert(dir, flags),
};

// No top-level await: the one-file bundle is a CommonJS script (scripts/build-bundle.ts).
runCli(process.argv.slice(2), commands).catch((err: unknown) => {
  // Expected failures are one line; anything else is a bug and keeps its stack.
  if (err instanceof CliError) process.stderr.write(`wick: ${err.message}\n`);
  else process.stderr.write(`wick: ${(err as Error).stack ?? String(err)}\n`);
  process.exit(1);
});
