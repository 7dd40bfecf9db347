/**
 * A real `wick serve` app on 127.0.0.1 (port 0) around a real engine, plus the clients the
 * tests talk to it with: the `openai` npm client and plain fetch for raw HTTP details.
 */
import type { AddressInfo } from "node:net";
import type { Server } from "node:http";
import test from "ava";
import OpenAI from "openai";
import { Engine, type LoadOptions } from "../../ts/engine/index.ts";
import { createApp, type AppOptions } from "../../ts/server/app.ts";
import { ModelRegistry } from "../../ts/service/registry.ts";
import { smollm2 } from "./assets.ts";

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

/**
 * SmolLM2-135M-Instruct through the fetch script. Only when the fetch itself fails are the
 * file's tests skipped, with a test that logs why; a load failure later is a real failure.
 */
export function smolLM2Tests(): { path: string | null; serial: typeof test.serial } {
  const found = smollm2();
  if ("path" in found) return { path: found.path, serial: test.serial };
  test("SmolLM2 tests", (t) => {
    t.log(`SKIPPED: ${found.skip}`);
    t.pass();
  });
  return { path: null, serial: test.serial.skip as unknown as typeof test.serial };
}

export interface LoadedModel {
  registry: ModelRegistry;
  engine: Engine;
}

/** Loads a model once for a test file and serves it under its file name. */
export async function loadModel(modelPath: string, options: Partial<LoadOptions> = {}): Promise<LoadedModel> {
  const engine = await Engine.load({ modelPath, contextSize: 2048, maxSequences: 4, ...options });
  const registry = new ModelRegistry();
  registry.add(engine, { path: modelPath });
  return { registry, engine };
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
