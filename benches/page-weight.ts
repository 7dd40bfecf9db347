/**
 * The chat page's weight and paint times against a local server: `wick serve`'s app on
 * 127.0.0.1 with SmolLM2 loaded, the page opened `--runs` times in Debian's headless Chromium
 * (scripts/chromium.sh), each in a fresh browser context (cold cache, empty IndexedDB). Per
 * run: the bytes transferred (Chromium's encodedDataLength over every response, headers
 * included), the requests made, first paint and first contentful paint (the Paint Timing API)
 * and "ready" (the model list filled from /api/tags and /api/ps). Prints a Markdown table of
 * medians (min–max); `--results benches/RESULTS.md` appends it as a dated section.
 *
 *   npx tsx benches/page-weight.ts [--runs 20] [--results benches/RESULTS.md]
 */
import { parseArgs } from "node:util";
import { gzipSync } from "node:zlib";
import { readFileSync } from "node:fs";
import { PAGE } from "../scripts/build-ui.ts";
import { startPageServer } from "../scripts/page-server.ts";
import { appendResults } from "./lib/provenance.ts";

const { values: args } = parseArgs({ options: { runs: { type: "string", default: "20" }, results: { type: "string" } } });
const runs = Number(args.runs);
const { url, browser, built, close } = await startPageServer();

interface Run {
  bytes: number;
  pageBytes: number;
  requests: number;
  fp: number;
  fcp: number;
  ready: number;
}
const samples: Run[] = [];
try {
  for (let i = 0; i < runs + 1; i++) {
    const ctx = await browser.createBrowserContext();
    const page = await ctx.newPage();
    const cdp = await page.createCDPSession();
    await cdp.send("Network.enable");
    await cdp.send("Network.setCacheDisabled", { cacheDisabled: true });
    const urls = new Map<string, string>();
    let bytes = 0;
    let pageBytes = 0;
    cdp.on("Network.requestWillBeSent", (e) => urls.set(e.requestId, e.request.url));
    cdp.on("Network.loadingFinished", (e) => {
      bytes += e.encodedDataLength;
      if (urls.get(e.requestId) === url) pageBytes += e.encodedDataLength;
    });
    await page.goto(url, { waitUntil: "load" });
    await page.waitForSelector("body[data-ready]");
    const t = await page.evaluate(() => {
      const paint = Object.fromEntries(performance.getEntriesByType("paint").map((p) => [p.name, p.startTime]));
      return { fp: paint["first-paint"] ?? NaN, fcp: paint["first-contentful-paint"] ?? NaN, ready: performance.now() };
    });
    await new Promise((r) => setTimeout(r, 50)); // the last loadingFinished events
    if (i > 0) samples.push({ bytes, pageBytes, requests: urls.size, ...t }); // run 0 warms the server's code paths
    await ctx.close();
  }
} finally {
  await close();
}

const stat = (k: keyof Run, digits = 0) => {
  const xs = samples.map((s) => s[k]).sort((a, b) => a - b);
  const f = (x: number) => x.toFixed(digits);
  return `${f(xs[Math.floor(xs.length / 2)])} (${f(xs[0])}–${f(xs[xs.length - 1])})`;
};
const html = readFileSync(PAGE);
const table = [
  `ui/build/index.html: ${built.bytes} bytes (script ${built.js}, style ${built.css}; ${gzipSync(html).length} gzipped — the server sends it uncompressed). ${samples.length} cold loads, medians (min–max):`,
  "",
  "| transferred, all requests (B) | of which the page (B) | requests | first paint (ms) | first contentful paint (ms) | ready: models listed (ms) |",
  "| --- | --- | --- | --- | --- | --- |",
  `| ${stat("bytes")} | ${stat("pageBytes")} | ${stat("requests")} | ${stat("fp", 1)} | ${stat("fcp", 1)} | ${stat("ready", 1)} |`,
].join("\n");
console.log(table);
if (args.results) appendResults(args.results, "benches/page-weight.ts", "chat page weight and first paint (headless Chromium, 127.0.0.1)", table);
