/**
 * `wick serve`: open the model store ($WICK_HOME, default ~/.wick), load the `-m` model if one
 * is given (a path, a store name, or a hub reference pulled first with progress on stderr),
 * start the HTTP server, shut down gracefully on SIGINT/SIGTERM (stop accepting, let requests
 * in flight finish for --shutdown-timeout, cancel the rest, exit 0; a second signal exits at
 * once). Without `-m` the server starts empty, as `ollama serve` does, and loads store models on first use.
 * Logs are pino JSON on stdout; the human lines (listening address, pull progress, fatal
 * errors) go to stderr.
 */
import type { AddressInfo } from "node:net";
import { pino, type Logger } from "pino";
import { isDevice, selectAddon, type LoraAdapterSpec } from "../engine/index.ts";
import { defaultKeepAliveMs } from "../service/keep-alive.ts";
import { draftModelFromFlags, speculationFromFlags } from "../service/speculation.ts";
import { ModelManager } from "../service/models.ts";
import type { ReasoningMode } from "../service/reasoning-plan.ts";
import type { ServedModel } from "../service/registry.ts";
import { HubClient, ModelStore, looksLikePath, type HubRef, type ModelName } from "../store/index.ts";
import { resolveAddress } from "./address.ts";
import { CliError } from "./errors.ts";
import type { ServeFlags } from "./flags.ts";
import { progressReporter } from "./progress.ts";
const DEFAULT_SHUTDOWN_TIMEOUT_S = 10;

/** Secrets a log line could carry (a header dump, an options object): pino writes "[Redacted]". */
const REDACT = ["apiKey", "*.apiKey", "headers.authorization", 'headers["x-api-key"]', "*.headers.authorization", '*.headers["x-api-key"]'];

export { CliError };

export async function serve(flags: ServeFlags): Promise<void> {
  const { host, port } = resolveAddress(flags);
  const apiKey = flags.apiKey ?? (process.env.WICK_API_KEY || undefined);
  const log = pino({ level: flags.logLevel ?? "info", redact: REDACT });
  if (!apiKey && !isLoopback(host)) {
    process.stderr.write(`wick: warning: listening on ${host} without --api-key: anyone who can reach this address can use the API and manage the models\n`);
  }

  const device = flags.device ?? (process.env.WICK_DEVICE?.trim() || undefined);
  if (device !== undefined && !isDevice(device)) throw new CliError(`unknown device '${device}' in WICK_DEVICE (expected auto, cpu, cuda, cuda:N, metal or cpu-candle)`);
  // -ngl auto (-1) is the engine's default: every layer on the GPU when there is one.
  const gpuLayers = flags.nGpuLayers === undefined || flags.nGpuLayers < 0 ? undefined : flags.nGpuLayers;
  // The addon (CPU, or CUDA when it is installed and finds a GPU) is chosen before anything loads.
  const addon = selectAddon({ device, gpuLayers });
  log.info({ device: addon.device, addon: addon.kind, ...(addon.cudaAddon ? { cudaAddon: addon.cudaAddon } : {}), ...(addon.notice ? { notice: addon.notice } : {}) }, "addon");
  // On the terminal too when a GPU was asked for by name; under `auto` the log line says it.
  if (addon.notice && device?.startsWith("cuda")) process.stderr.write(`wick: note: ${addon.notice}\n`);

  const speculative = speculationFromFlags(flags);
  const store = new ModelStore();
  const hub = new HubClient(store);
  const models = new ModelManager({
    store,
    hub,
    log,
    keepAliveMs: flags.keepAlive ?? envKeepAlive(),
    maxLoaded: flags.maxLoadedModels,
    load: {
      contextSize: flags.ctxSize,
      maxSequences: flags.parallel,
      threads: flags.threads,
      // -1 = the whole prompt in one pass (the engine's 0).
      prefillChunk: flags.chunkedPrefillSize === -1 ? 0 : flags.chunkedPrefillSize,
      stepTokens: flags.maxBatchedTokens,
      kvTokens: flags.maxTotalTokens,
      ...(flags.kvCacheMemoryBytes !== undefined ? { kvCacheMemoryBytes: flags.kvCacheMemoryBytes } : {}),
      ...(flags.cacheTypeK !== undefined ? { cacheTypeK: flags.cacheTypeK } : {}),
      ...(flags.cacheTypeV !== undefined ? { cacheTypeV: flags.cacheTypeV } : {}),
      prefixCache: !flags.disablePrefixCache,
      ...store.packCache(flags.mmap),
      toolCallParser: flags.toolCallParser,
      reasoning: reasoningMode(flags),
      ...(flags.reasoningBudget !== undefined && flags.reasoningBudget >= 0 ? { reasoningBudget: flags.reasoningBudget } : {}),
      imageMinTokens: flags.imageMinTokens,
      imageMaxTokens: flags.imageMaxTokens,
      ...(device !== undefined ? { device } : {}),
      ...(gpuLayers !== undefined ? { gpuLayers } : {}),
      ...(flags.gpuMemoryUtilization !== undefined ? { gpuMemoryUtilization: flags.gpuMemoryUtilization } : {}),
      ...(speculative ? { speculative } : {}),
    },
  });
  if (flags.mmproj && !flags.model) throw new CliError("--mmproj needs -m (the projector belongs to that model)");
  if (draftModelFromFlags(flags) && !flags.model) throw new CliError("--model-draft needs -m (the draft model drafts for that model)");
  if (loraSpecs(flags).length && !flags.model) throw new CliError("--lora, --lora-scaled and --lora-modules need -m (the adapters belong to that model)");
  // The model loads on a worker thread while the HTTP side's modules (~50 ms) are evaluated
  // here: once its lookups are done and the load is on that thread.
  const dispatched = flags.model ? models.loadDispatched() : undefined;
  const loading = flags.model ? loadStartModel(models, flags, log) : undefined;
  loading?.catch(() => {}); // awaited below; not an unhandled rejection meanwhile
  if (loading) await Promise.race([dispatched, loading.catch(() => {})]);
  const [{ createApp }, { createHttpServer, DEFAULT_TIMEOUT_S }, { Shutdown }] = await Promise.all([import("../server/app.ts"), import("../server/limits.ts"), import("../server/shutdown.ts")]);
  const model = await loading;

  const images = {
    ...(flags.privateImageUrls === false ? { allowPrivate: false } : {}),
    ...(flags.imageMaxPixels ? { maxPixels: flags.imageMaxPixels } : {}),
    ...(flags.imageMaxBytes ? { maxBytes: flags.imageMaxBytes } : {}),
    ...(flags.imageTimeout ? { timeoutMs: flags.imageTimeout } : {}),
  };
  const timeoutMs = (flags.timeout ?? DEFAULT_TIMEOUT_S) * 1000;
  const shutdown = new Shutdown();
  const app = createApp({ models, apiKey, metricsPublic: flags.metricsPublic, cors: flags.cors, logger: log, images, shutdown, streams: { stallMs: timeoutMs } });
  const server = createHttpServer(app, { requestTimeoutMs: timeoutMs, maxConnections: flags.maxConnections ?? 0 });
  server.listen({ host, port });
  await new Promise<void>((resolve, reject) => {
    server.once("listening", resolve);
    server.once("error", (err) => reject(new CliError(`cannot listen on ${host}:${port}: ${err.message}`)));
  });
  const addr = server.address() as AddressInfo;
  const url = `http://${addr.family === "IPv6" ? `[${addr.address}]` : addr.address}:${addr.port}`;
  const shutdownMs = (flags.shutdownTimeout ?? DEFAULT_SHUTDOWN_TIMEOUT_S) * 1000;
  const stop = async (signal: NodeJS.Signals) => {
    if (shutdown.stopping) {
      // The second signal: the user wants out now.
      log.warn({ signal }, "second signal: exiting at once");
      log.flush();
      process.exit(128 + (signal === "SIGINT" ? 2 : 15));
    }
    log.info({ signal, timeoutMs: shutdownMs }, "shutting down: no new connections; requests in flight get the shutdown timeout");
    process.stderr.write(`wick: ${signal}: finishing requests in flight (up to ${shutdownMs / 1000} s; send it again to exit now)\n`);
    let code = 0;
    try {
      const drained = await shutdown.drain(server, shutdownMs, log);
      await models.close();
      log.info({ ...drained }, "stopped");
    } catch (err) {
      log.error({ err }, "shutdown failed");
      code = 1;
    }
    await new Promise<void>((resolve) => log.flush(() => resolve()));
    process.exit(code);
  };
  process.on("SIGINT", () => void stop("SIGINT"));
  process.on("SIGTERM", () => void stop("SIGTERM"));
  // Announced only once the signal handlers are in place: whoever reads this line may stop us at once.
  log.info(
    {
      url,
      auth: apiKey ? "api-key" : "none",
      metricsPublic: Boolean(flags.metricsPublic),
      cors: flags.cors ?? "off",
      timeoutS: timeoutMs / 1000,
      maxConnections: flags.maxConnections ?? null,
      store: store.root,
    },
    "listening",
  );
  process.stderr.write(model ? `wick: serving ${model.id} at ${url}/v1\n` : `wick: serving the models of ${store.root} (loaded on first use) at ${url}/v1\n`);
}

/** The -m model: a path as is, a store name from the store, a hub reference pulled first. Loaded before listening. */
async function loadStartModel(models: ModelManager, flags: ServeFlags, log: Logger): Promise<ServedModel> {
  const ref = flags.model!;
  const lora = loraSpecs(flags);
  const draftModel = draftModelFromFlags(flags);
  const opts = { id: flags.alias, keepAliveMs: flags.keepAlive, mmproj: flags.mmproj, ...(lora.length ? { lora } : {}), ...(draftModel ? { draftModel } : {}) };
  try {
    if (looksLikePath(ref) || ref.startsWith("/")) {
      models.setDefault({ path: ref }, opts);
    } else {
      const located = await models.store!.locate(ref);
      if (located.kind === "path") models.setDefault({ path: located.path }, opts);
      else {
        const name: ModelName = located.kind === "store" ? located.name : (await pullWithProgress(models, located.hub)).modelName;
        models.setDefault({ name }, opts);
      }
    }
    const started = performance.now();
    const model = await models.loadDefault();
    log.info({ model: model.id, templateFallback: model.templateIsFallback, ms: Math.round(performance.now() - started) }, "start-up model ready");
    return model;
  } catch (err) {
    throw new CliError(`cannot load ${ref}: ${(err as Error).message}`);
  }
}

/** A hub pull at start-up, its progress on stderr (a bar on a terminal, `wick: …` lines elsewhere). */
async function pullWithProgress(models: ModelManager, hub: HubRef) {
  const progress = progressReporter({ prefix: "wick: " });
  try {
    return await models.hub!.pull(hub, progress);
  } finally {
    progress.end();
  }
}

/**
 * The -m model's LoRA adapters, ids in this order: --lora, --lora-scaled, --lora-modules (named:
 * served as models of their own, off for requests naming the base); all at scale 0 with
 * --lora-init-without-apply.
 */
function loraSpecs(flags: ServeFlags): LoraAdapterSpec[] {
  const all = [...(flags.lora ?? []), ...(flags.loraScaled ?? []), ...(flags.loraModules ?? [])].flat();
  const names = new Set<string>();
  for (const a of all) {
    if (!a.name) continue;
    if (names.has(a.name)) throw new CliError(`--lora-modules: the name '${a.name}' is given twice`);
    names.add(a.name);
  }
  return all.map((a) => ({ path: a.path, scale: flags.loraInitWithoutApply ? 0 : a.scale, ...(a.name ? { name: a.name } : {}) }));
}

/** `--reasoning-format` or `--reasoning-parser` (one of them: they answer the same question). */
function reasoningMode(flags: ServeFlags): ReasoningMode {
  if (flags.reasoningParser && flags.reasoningFormat) throw new CliError("give --reasoning-format or --reasoning-parser, not both");
  return flags.reasoningParser ? { parser: flags.reasoningParser } : { format: flags.reasoningFormat ?? "auto" };
}

/** Loopback addresses only this machine reaches: no warning for them without a key. */
function isLoopback(host: string): boolean {
  const h = host.replace(/^\[|\]$/g, "").toLowerCase();
  return h === "localhost" || h === "::1" || /^127\.\d+\.\d+\.\d+$/.test(h) || h === "::ffff:127.0.0.1";
}

function envKeepAlive(): number {
  try {
    return defaultKeepAliveMs();
  } catch (err) {
    throw new CliError((err as Error).message);
  }
}
