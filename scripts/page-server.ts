/**
 * The chat page served as `wick serve` serves it — the app on 127.0.0.1 with SmolLM2
 * (scripts/fetch_models.py) loaded, the page freshly built — and Debian's headless Chromium
 * (scripts/chromium.sh): what scripts/screenshots.ts and benches/page-weight.ts open.
 */
import { execFileSync } from "node:child_process";
import path from "node:path";
import puppeteer, { type Browser } from "puppeteer-core";
import { Engine } from "../ts/engine/index.ts";
import { createApp } from "../ts/server/app.ts";
import { ModelRegistry } from "../ts/service/registry.ts";
import { buildUi } from "./build-ui.ts";

export interface PageServer {
  /** The page's address (`http://127.0.0.1:PORT/`). */
  url: string;
  browser: Browser;
  /** What `buildUi` reported of the page it built. */
  built: Awaited<ReturnType<typeof buildUi>>;
  close(): Promise<void>;
}

export async function startPageServer(): Promise<PageServer> {
  const root = path.resolve(import.meta.dirname, "..");
  const last = (cmd: string, args: string[]) => execFileSync(cmd, args, { cwd: root, encoding: "utf8" }).trim().split("\n").at(-1)!;
  const built = await buildUi();
  const modelPath = last("python3", ["scripts/fetch_models.py", "smollm2-135m"]);
  const engine = await Engine.load({ modelPath, contextSize: 2048, maxSequences: 2 });
  const registry = new ModelRegistry();
  registry.add(engine, { path: modelPath });
  const server = createApp({ registry }).listen(0, "127.0.0.1");
  await new Promise((r) => server.once("listening", r));
  const url = `http://127.0.0.1:${(server.address() as { port: number }).port}/`;
  const browser = await puppeteer.launch({ executablePath: last("bash", ["scripts/chromium.sh"]), headless: true, args: ["--no-sandbox", "--disable-gpu"] });
  const close = async () => {
    await browser.close();
    server.close();
    server.closeAllConnections();
    await engine.unload();
  };
  return { url, browser, built, close };
}
