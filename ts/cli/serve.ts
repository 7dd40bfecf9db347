/**
 * `wick serve`: load the model, start the HTTP server, shut down cleanly on SIGINT/SIGTERM.
 * Logs are pino JSON on stdout; the human lines (listening address, fatal errors) go to stderr.
 */
import type { AddressInfo } from "node:net";
import { pino } from "pino";
import { createApp } from "../server/app.ts";
import { ModelRegistry } from "../service/registry.ts";
import type { ServeFlags } from "./flags.ts";
import { hostPort } from "./values.ts";

const DEFAULT_HOST = "127.0.0.1";
const DEFAULT_PORT = 11434;

/** A failure the user can fix: print one line and exit non-zero. */
export class CliError extends Error {}

export async function serve(flags: ServeFlags): Promise<void> {
  const env = envHost();
  const host = flags.host ?? env.host ?? DEFAULT_HOST;
  const port = flags.port ?? env.port ?? DEFAULT_PORT;
  const apiKey = flags.apiKey ?? (process.env.WICK_API_KEY || undefined);
  const log = pino({ level: flags.logLevel ?? "info" });

  const registry = new ModelRegistry();
  const started = performance.now();
  let model;
  try {
    model = await registry.load({
      modelPath: flags.model,
      id: flags.alias,
      contextSize: flags.ctxSize,
      maxSequences: flags.parallel,
      threads: flags.threads,
      // -1 = the whole prompt in one pass (the engine's 0).
      prefillChunk: flags.chunkedPrefillSize === -1 ? 0 : flags.chunkedPrefillSize,
      stepTokens: flags.maxBatchedTokens,
      kvTokens: flags.maxTotalTokens,
      prefixCache: !flags.disablePrefixCache,
      toolCallParser: flags.toolCallParser,
    });
  } catch (err) {
    throw new CliError(`cannot load ${flags.model}: ${(err as Error).message}`);
  }
  log.info(
    { model: model.id, architecture: model.info.architecture, contextSize: model.info.contextSize, templateFallback: model.templateIsFallback, ms: Math.round(performance.now() - started) },
    "model loaded",
  );

  const app = createApp({ registry, apiKey, logger: log });
  const server = app.listen({ host, port });
  await new Promise<void>((resolve, reject) => {
    server.once("listening", resolve);
    server.once("error", (err) => reject(new CliError(`cannot listen on ${host}:${port}: ${err.message}`)));
  });
  const addr = server.address() as AddressInfo;
  const url = `http://${addr.family === "IPv6" ? `[${addr.address}]` : addr.address}:${addr.port}`;
  log.info({ url, auth: apiKey ? "api-key" : "none" }, "listening");
  process.stderr.write(`wick: serving ${model.id} at ${url}/v1\n`);

  let stopping = false;
  const stop = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    log.info({ signal }, "shutting down");
    server.close();
    server.closeAllConnections();
    await registry.unloadAll();
    process.exit(0);
  };
  process.once("SIGINT", () => void stop("SIGINT"));
  process.once("SIGTERM", () => void stop("SIGTERM"));
}

function envHost(): { host?: string; port?: number } {
  const raw = process.env.WICK_HOST;
  if (!raw) return {};
  try {
    return hostPort(raw);
  } catch (err) {
    throw new CliError(`WICK_HOST=${raw}: ${(err as Error).message}`);
  }
}
