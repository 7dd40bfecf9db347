/**
 * A real server as `wick serve` runs it without -m: a model store in a temp WICK_HOME, a hub
 * client pointed at a loopback hub (test/helpers/hub.ts) that serves real GGUF files, and the
 * model manager loading store models on first use. The store's disk can be made to fill up
 * (ENOSPC on the next write) to test a full disk mid-operation.
 */
import { mkdtempSync, promises as fsp } from "node:fs";
import os from "node:os";
import path from "node:path";
import { Ollama } from "ollama";
import { ModelManager, type ModelManagerOptions } from "../../ts/service/models.ts";
import { ModelRegistry } from "../../ts/service/registry.ts";
import { openFileSink, type SinkOpener } from "../../ts/store/fs-atomic.ts";
import { HubClient, ModelStore } from "../../ts/store/index.ts";
import { startHub, type LoopbackHub } from "./hub.ts";
import { startServer, type RunningServer } from "./server.ts";

export interface StoreServer {
  home: string;
  store: ModelStore;
  hub: LoopbackHub;
  models: ModelManager;
  registry: ModelRegistry;
  server: RunningServer;
  url: string;
  ollama: Ollama;
  /** Engine loads so far (one per model load). */
  loads: () => number;
  /** While true, every store write fails with ENOSPC (after writing nothing). */
  disk: { full: boolean };
  close(): Promise<void>;
}

/** A sink opener that fails with ENOSPC while `disk.full` is set. */
function switchableDisk(disk: { full: boolean }): SinkOpener {
  return async (file, mode) => {
    const real = await openFileSink(file, mode);
    return {
      async write(chunk) {
        if (disk.full) throw Object.assign(new Error("ENOSPC: no space left on device, write"), { code: "ENOSPC" });
        await real.write(chunk);
      },
      sync: () => real.sync(),
      close: () => real.close(),
    };
  };
}

export async function startStoreServer(opts: Partial<ModelManagerOptions> = {}): Promise<StoreServer> {
  const home = mkdtempSync(path.join(os.tmpdir(), "wick-home-"));
  const disk = { full: false };
  const store = new ModelStore({ home, openSink: switchableDisk(disk) });
  const hub = await startHub();
  // token "" (not undefined): an HF_TOKEN in the environment must not reach the loopback hub.
  const hubClient = new HubClient(store, { endpoint: hub.url, token: "", backoffMs: 5, progressIntervalMs: 0 });
  const registry = new ModelRegistry();
  let loads = 0;
  const load = registry.load.bind(registry);
  registry.load = (o) => {
    loads++;
    return load(o);
  };
  const models = new ModelManager({ registry, store, hub: hubClient, load: { contextSize: 2048, maxSequences: 2 }, ...opts });
  const server = await startServer({ models });
  return {
    home,
    store,
    hub,
    models,
    registry,
    server,
    url: server.url,
    ollama: new Ollama({ host: server.url }),
    loads: () => loads,
    disk,
    async close() {
      await server.close();
      await hub.close();
      await models.close();
      await fsp.rm(home, { recursive: true, force: true });
    },
  };
}

/** Reads an NDJSON response into its objects. */
export async function ndjson(res: Response): Promise<any[]> {
  return (await res.text())
    .trim()
    .split("\n")
    .filter(Boolean)
    .map((l) => JSON.parse(l));
}

/** POSTs (or sends `method`) a JSON body and returns the raw Response. */
export function send(url: string, body: unknown, method = "POST"): Promise<Response> {
  return fetch(url, { method, headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
}
