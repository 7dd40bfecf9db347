/**
 * Takes the README's screenshots of the chat page: docs/chat-page-wide.png (1280×800, light)
 * and docs/chat-page-narrow.png (390×844, a phone, dark), of a real server on 127.0.0.1 with
 * SmolLM2 (scripts/fetch_models.py) answering greedily in Debian's Chromium
 * (scripts/chromium.sh). Run: `npx tsx scripts/screenshots.ts`.
 */
import path from "node:path";
import type { Page } from "puppeteer-core";
import { startPageServer } from "./page-server.ts";

const root = path.resolve(import.meta.dirname, "..");
const { url, browser, close } = await startPageServer();

async function ask(page: Page, text: string, maxTokens: string): Promise<void> {
  await page.click("#settings-button");
  await page.type("#temperature", "0");
  await page.type("#max_tokens", maxTokens);
  await page.click("#settings-button");
  await page.type("#input", text);
  await page.keyboard.press("Enter");
  await page.waitForSelector('body[data-state="idle"] #messages article.assistant .stats', { timeout: 120_000 });
}

async function shot(file: string, width: number, height: number, dark: boolean): Promise<void> {
  const ctx = await browser.createBrowserContext();
  const page = await ctx.newPage();
  await page.setViewport({ width, height, deviceScaleFactor: 1 });
  await page.emulateMediaFeatures([{ name: "prefers-color-scheme", value: dark ? "dark" : "light" }]);
  await page.goto(url);
  await page.waitForSelector("body[data-ready]");
  await ask(page, "Name three colors of the rainbow.", "40");
  if (width < 720) {
    await page.click("#open-side"); // the list is a drawer on a narrow screen
    await new Promise((r) => setTimeout(r, 300));
  }
  await page.click("#new-chat");
  await ask(page, "Write a Python function that reverses a string, with an example.", "160");
  await page.screenshot({ path: path.join(root, "docs", file) });
  console.log(`docs/${file}`);
  await ctx.close();
}

try {
  await shot("chat-page-wide.png", 1280, 800, false);
  await shot("chat-page-narrow.png", 390, 844, true);
} finally {
  await close();
}
