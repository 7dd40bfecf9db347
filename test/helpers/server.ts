/**
 * A real `wick serve` app on 127.0.0.1 (port 0) around a real engine, plus the clients the
 * tests talk to it with: the `openai` npm client and plain fetch for raw HTTP details.
 */
import { createServer, type AddressInfo } from "node:net";
import type { Server } from "node:http";
import test from "ava";
import OpenAI from "openai";
import { Engine, type LoadOptions } from "../../ts/engine/index.ts";
import { createApp, type AppOptions } from "../../ts/server/app.ts";
import { ModelRegistry } from "../../ts/service/registry.ts";

export interface RunningServer {
  /** http://127.0.0.1:<port> */
  url: string;
  server: Server;
  close(): Promise<void>;
}

export async function startServer(opts: AppOptions): Promise<RunningServer> {
  const server = createApp(opts).listen(0, "127.0.0.1");
  await new Promise<void>((resolve, reject) => {
    server.once("listening", resolve);
    server.once("error", reject);
  });
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    server,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

/** The real openai client, without retries so every status reaches the test as it was sent. */
export function openaiClient(url: string, apiKey = "unused"): OpenAI {
  return new OpenAI({ baseURL: `${url}/v1`, apiKey, maxRetries: 0, timeout: 120_000 });
}

export interface LoadedModel {
  registry: ModelRegistry;
  engine: Engine;
}

/** Loads a model and serves it under its file name. */
export async function loadModel(modelPath: string, options: Partial<LoadOptions> = {}): Promise<LoadedModel> {
  const engine = await Engine.load({ modelPath, contextSize: 2048, maxSequences: 4, ...options });
  const registry = new ModelRegistry();
  registry.add(engine, { path: modelPath });
  return { registry, engine };
}

export interface ServedModel extends LoadedModel {
  server: RunningServer;
  client: OpenAI;
}

/**
 * One model served for a whole test file: loaded and served in a `before` hook, closed and
 * unloaded in `after.always`. The fields are set once the hook has run; with no `modelPath`
 * (its asset is missing and the file's tests are skipped) nothing is loaded.
 */
export function serveModel(modelPath: string | null, options: Partial<LoadOptions> = {}): ServedModel {
  const served = {} as ServedModel;
  test.before(async () => {
    if (!modelPath) return;
    Object.assign(served, await loadModel(modelPath, options));
    served.server = await startServer({ registry: served.registry });
    served.client = openaiClient(served.server.url);
  });
  test.after.always(async () => {
    await served.server?.close();
    await served.engine?.unload();
  });
  return served;
}

/**
 * Loads models into one registry, each served under its id (`{id: path}`), for tests that talk
 * to several fixtures through one server; `unload` frees them all.
 */
export async function loadModels(paths: Record<string, string>, options: Partial<LoadOptions> = {}): Promise<{ registry: ModelRegistry; unload(): Promise<void> }> {
  const registry = new ModelRegistry();
  const engines: Engine[] = [];
  for (const [id, modelPath] of Object.entries(paths)) {
    const engine = await Engine.load({ contextSize: 1024, maxSequences: 4, ...options, modelPath });
    engines.push(engine);
    registry.add(engine, { path: modelPath, id });
  }
  return { registry, unload: async () => void (await Promise.all(engines.map((e) => e.unload()))) };
}

/** A loopback port free right now, for a server started in a child process. */
export async function freePort(): Promise<number> {
  const s = createServer().listen(0, "127.0.0.1");
  await new Promise((r) => s.once("listening", r));
  const { port } = s.address() as AddressInfo;
  await new Promise((r) => s.close(r));
  return port;
}

/** Waits until `check` holds, polling every few ms; returns the elapsed ms, or -1 at timeout. */
export async function waitFor(check: () => boolean, timeoutMs: number, stepMs = 2): Promise<number> {
  const start = performance.now();
  for (;;) {
    if (check()) return performance.now() - start;
    if (performance.now() - start > timeoutMs) return -1;
    await new Promise((r) => setTimeout(r, stepMs));
  }
}

/** POSTs JSON (or a raw string) and returns the status, headers and parsed body. */
export async function postJson(url: string, body: unknown, headers: Record<string, string> = {}) {
  const res = await fetch(url, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: typeof body === "string" ? body : JSON.stringify(body),
  });
  const text = await res.text();
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { status: res.status, headers: res.headers, text, json: json as any };
}
