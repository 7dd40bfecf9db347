/** Entry point of the `wick` command (bin/wick.js runs this through tsx). */
import { bench } from "./bench.ts";
import { convert } from "./convert.ts";
import { runCli } from "./program.ts";
import { CliError, serve } from "./serve.ts";
import { show } from "./show.ts";

try {
  await runCli(process.argv.slice(2), { serve, bench, show, convert });
} catch (err) {
  // Expected failures are one line; anything else is a bug and keeps its stack.
  if (err instanceof CliError) process.stderr.write(`wick: ${err.message}\n`);
  else process.stderr.write(`wick: ${(err as Error).stack ?? String(err)}\n`);
  process.exit(1);
}
