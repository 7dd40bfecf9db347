/**
 * The chat page (ui/, served on `/` to browsers by ts/server/routes/ui.ts) in a real headless
 * Chromium (Debian's, found or installed by scripts/chromium.sh, driven by puppeteer-core)
 * against a real server on 127.0.0.1 with real models: SmolLM2 for streaming, stop and
 * persistence, the LFM2-VL fixture for images, scripted LFM2 fixtures for a tool call and
 * reasoning. Every page records each request it makes, and every test checks that they all
 * went to the server's own origin.
 */
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import test, { type ExecutionContext } from "ava";
import puppeteer, { type Browser, type Page } from "puppeteer-core";
import { Engine } from "../ts/engine/index.ts";
import { ModelRegistry } from "../ts/service/registry.ts";
import { buildUi } from "../scripts/build-ui.ts";
import { fixture, fixturesDir, needs, repoRoot, smollm2, type Asset } from "./helpers/assets.ts";
import { testImage } from "./helpers/images.ts";
import { postJson, startServer, type RunningServer } from "./helpers/server.ts";
import { startStoreServer } from "./helpers/store-server.ts";

function chromium(): Asset {
  try {
    return { path: execFileSync("bash", [path.join(repoRoot, "scripts/chromium.sh")], { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] }).trim() };
  } catch (err) {
    return { missing: `no Chromium for the browser tests (${String((err as { stderr?: string }).stderr ?? "").trim() || "scripts/chromium.sh failed"})` };
  }
}

const browserAsset = chromium();
const smol = smollm2();
const vlText = fixture("tiny-lfm2-vl-q8_0.gguf");
const vlProj = fixture("mmproj-tiny-lfm2-vl-q8_0.gguf");
const TOOLS = ["scripted-lfm2-pythonic-call.gguf", "scripted-lfm2-thinking.gguf"];
const need = needs(browserAsset, smol, vlText, vlProj, ...TOOLS.map(fixture));
const { serial } = need;

const SMOL = "SmolLM2-135M-Instruct.Q4_1";
const VL = "tiny-lfm2-vl";
const KEY = "ui-test-key";
const engines: Engine[] = [];
const registry = new ModelRegistry();
let server: RunningServer;
let keyed: RunningServer;
let browser: Browser;

test.before(async () => {
  if (!need.path) return;
  await buildUi();
  const load = async (id: string, modelPath: string, mmproj?: string) => {
    const engine = await Engine.load({ modelPath, contextSize: 2048, maxSequences: 2, ...(mmproj ? { mmproj } : {}) });
    engines.push(engine);
    registry.add(engine, { path: modelPath, id });
  };
  await load(SMOL, (smol as { path: string }).path);
  await load(VL, (vlText as { path: string }).path, (vlProj as { path: string }).path);
  await load("pythonic-call", path.join(fixturesDir, TOOLS[0]));
  await load("thinking", path.join(fixturesDir, TOOLS[1]));
  server = await startServer({ registry });
  keyed = await startServer({ registry, apiKey: KEY });
  browser = await puppeteer.launch({ executablePath: need.path, headless: true, args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"] });
});
test.after.always(async () => {
  await browser?.close();
  await server?.close();
  await keyed?.close();
  await Promise.all(engines.map((e) => e.unload()));
});

interface Opened {
  page: Page;
  /** Every URL the page asked for, in order. */
  requests: string[];
  /** Uncaught script errors on the page. */
  errors: string[];
}

/** A page in a fresh browser context (its own IndexedDB and localStorage), recording its requests. */
async function open(t: ExecutionContext, url: string): Promise<Opened> {
  const ctx = await browser.createBrowserContext();
  t.teardown(() => ctx.close());
  const page = await ctx.newPage();
  await page.setViewport({ width: 1100, height: 800 });
  const requests: string[] = [];
  await page.setRequestInterception(true);
  page.on("request", (r) => {
    requests.push(r.url());
    void r.continue();
  });
  const errors: string[] = [];
  page.on("pageerror", (e) => errors.push((e as Error).message));
  // The page's CSP blocks other origins before a request is made: a blocked attempt is an error too.
  await page.exposeFunction("cspViolation", (uri: string) => errors.push(`CSP blocked ${uri}`));
  await page.evaluateOnNewDocument(() => {
    document.addEventListener("securitypolicyviolation", (e) => void (window as unknown as { cspViolation(u: string): void }).cspViolation(`${e.violatedDirective} ${e.blockedURI}`));
  });
  const res = await page.goto(url, { waitUntil: "load" });
  t.is(res?.status(), 200);
  await page.waitForSelector("body[data-ready]");
  return { page, requests, errors };
}

/** Every request went to the server's own origin (data: and blob: URLs are not requests), and no script failed. */
function sameOrigin(t: ExecutionContext, { requests, errors }: Opened, origin: string): void {
  t.deepEqual(errors, [], "no script errors on the page");
  const outside = requests.filter((u) => !u.startsWith("data:") && !u.startsWith("blob:") && new URL(u).origin !== origin);
  t.deepEqual(outside, [], "the page asked for nothing outside the server's origin");
  t.true(requests.length > 1);
}

async function settings(page: Page, values: Record<string, string>): Promise<void> {
  if (await page.$eval("#settings", (e) => (e as HTMLElement).hidden)) await page.click("#settings-button");
  for (const [id, v] of Object.entries(values)) {
    await page.$eval(`#${id}`, (e) => ((e as HTMLInputElement).value = ""));
    await page.type(`#${id}`, v);
  }
}

/** Sends `text`, recording the last answer's text length at each DOM change until the answer ends. */
async function send(page: Page, text: string, { wait = true } = {}): Promise<void> {
  await page.evaluate(() => {
    const w = window as unknown as { lens: number[] };
    w.lens = [];
    new MutationObserver(() => {
      const bodies = document.querySelectorAll("#messages article.assistant .body");
      const last = bodies[bodies.length - 1];
      if (last) w.lens.push(last.textContent.length);
    }).observe(document.getElementById("messages")!, { childList: true, subtree: true, characterData: true });
  });
  await page.type("#input", text);
  await page.keyboard.press("Enter");
  await page.waitForSelector('body[data-state="streaming"]', { timeout: 10_000 }).catch(() => undefined);
  if (wait) await page.waitForSelector('body[data-state="idle"]', { timeout: 120_000 });
}

const lens = (page: Page) => page.evaluate(() => (window as unknown as { lens: number[] }).lens);

/** The conversations as the page stored them in IndexedDB. */
function stored(page: Page): Promise<any[]> {
  return page.evaluate(
    () =>
      new Promise<any[]>((resolve, reject) => {
        const r = indexedDB.open("wick-chat");
        r.onerror = () => reject(new Error(String(r.error)));
        r.onsuccess = () => {
          const q = r.result.transaction("conversations").objectStore("conversations").getAll();
          q.onsuccess = () => resolve(q.result);
          q.onerror = () => reject(new Error(String(q.error)));
        };
      }),
  );
}
const lastAnswer = async (page: Page) => {
  const [c] = (await stored(page)).sort((a, b) => b.updated - a.updated);
  return c.messages[c.leaf];
};

function metric(text: string, name: string, labels: string): number {
  const line = text.split("\n").find((l) => l.startsWith(`${name}{`) && labels.split(",").every((x) => l.includes(x)));
  return line ? Number(line.slice(line.lastIndexOf(" ") + 1)) : 0;
}

serial("GET / gives a browser the page (no key needed) and every other client the heartbeat", async (t) => {
  for (const s of [server, keyed]) {
    const page = await fetch(`${s.url}/`, { headers: { accept: "text/html,application/xhtml+xml,*/*;q=0.8" } });
    t.is(page.status, 200);
    t.regex(page.headers.get("content-type")!, /^text\/html/);
    const html = await page.text();
    t.regex(html, /Content-Security-Policy" content="default-src 'none'; script-src 'sha256-/);
    t.notRegex(html, /https?:\/\//, "the page names no URL to fetch");
    const plain = await fetch(`${s.url}/`);
    t.is(await plain.text(), "Wick is running");
    const head = await fetch(`${s.url}/`, { method: "HEAD" });
    t.is(head.status, 200);
    t.regex(head.headers.get("content-type")!, /^text\/plain/);
  }
});

serial("picks SmolLM2, streams the answer token by token, counts tokens; a reload finds the conversation", async (t) => {
  const o = await open(t, server.url);
  const { page } = o;
  const options = await page.$$eval("#model option", (os) => os.map((x) => ({ value: x.value, text: x.textContent })));
  t.true(
    options.some((x) => x.value === SMOL && x.text.includes("loaded")),
    JSON.stringify(options),
  );
  await page.select("#model", SMOL);
  // An answer that runs to max_tokens (a short one, ended by EOS in a few frames, left too few
  // DOM updates to see on a loaded machine: the test's flake).
  const prompt = "Count from 1 to 40, separated by commas.";
  await settings(page, { temperature: "0", max_tokens: "64" });
  await send(page, prompt);
  const seen = await lens(page);
  const growing = new Set(seen.filter((n) => n > 0));
  t.true(growing.size >= 3, `the answer grew over several DOM updates (${seen.join(",")})`);
  const m = await lastAnswer(page);
  t.log(`DOM lengths while streaming: ${seen.join(",")}`);
  t.falsy(m.error);
  t.true(m.content.length > 0);
  // The same request through the API answers the same (greedy), with the token count the page shows.
  const api = await postJson(`${server.url}/v1/chat/completions`, { model: SMOL, messages: [{ role: "user", content: prompt }], temperature: 0, max_tokens: 64 });
  t.is(m.content, api.json.choices[0].message.content);
  const stats = await page.$eval("#messages article.assistant .stats", (e) => e.textContent);
  t.true(stats.includes(`${api.json.usage.completion_tokens} tokens`), stats);
  t.regex(stats, /[\d.]+ tok\/s/);
  await page.reload({ waitUntil: "load" });
  await page.waitForSelector("body[data-ready]");
  const titles = await page.$$eval("#conversations .conv > button:first-child", (bs) => bs.map((b) => b.textContent));
  t.deepEqual(titles, [prompt]);
  await page.click("#conversations .conv > button:first-child");
  const shown = await page.$$eval("#messages article", (as) => as.map((a) => a.dataset.role));
  t.deepEqual(shown, ["user", "assistant"]);
  sameOrigin(t, o, server.url);
  t.true(o.requests.some((u) => u.endsWith("/v1/chat/completions")));
});

serial("Esc stops an answer mid-stream and the server cancels its sequence", async (t) => {
  const o = await open(t, server.url);
  const { page } = o;
  const before = await (await fetch(`${server.url}/metrics`)).text();
  await page.select("#model", SMOL);
  await settings(page, { temperature: "0", max_tokens: "1500" });
  await send(page, "Count from 1 to 2000, one number per line.", { wait: false });
  await page.waitForFunction(() => (window as unknown as { lens: number[] }).lens.filter((n) => n > 0).length >= 5, { timeout: 60_000 });
  await page.keyboard.press("Escape");
  await page.waitForSelector('body[data-state="idle"]', { timeout: 10_000 });
  const m = await lastAnswer(page);
  t.true(m.stopped);
  t.falsy(m.error);
  // The server cancels at its next step: nothing runs for the model any more and no token is
  // made after that. (A cancelled sequence is not in request_success_total: the metrics wrapper
  // never sees its done event once the client is gone, so the gauge and the token count are the
  // signal here.)
  const tokens = (text: string) => metric(text, "wick:inter_token_latency_seconds_count", `model_name="${SMOL}"`);
  let running = -1;
  let text = "";
  for (let i = 0; i < 100 && running !== 0; i++) {
    text = await (await fetch(`${server.url}/metrics`)).text();
    running = metric(text, "wick:num_requests_running", `model_name="${SMOL}"`);
    if (running !== 0) await new Promise((r) => setTimeout(r, 20));
  }
  t.is(running, 0, "nothing runs after Esc");
  const made = tokens(text) - tokens(before);
  t.true(made > 5 && made < 1000, `tokens made before the stop: ${made} (max_tokens 1500)`);
  await new Promise((r) => setTimeout(r, 500));
  t.is(tokens(await (await fetch(`${server.url}/metrics`)).text()), tokens(text), "no token after the stop");
  t.true(await page.$eval("#messages article.assistant .stats", (e) => e.textContent.includes("stopped")));
  t.false(await page.$eval("#send", (e) => (e as HTMLElement).hidden));
  sameOrigin(t, o, server.url);
});

serial("regenerate adds a version; editing a past message starts a branch, both switchable", async (t) => {
  const o = await open(t, server.url);
  const { page } = o;
  await page.select("#model", SMOL);
  await settings(page, { max_tokens: "6" });
  await send(page, "Hi");
  await page.click("#messages article.assistant .meta button[title^='Answer again']");
  await page.waitForSelector('body[data-state="idle"]', { timeout: 60_000 });
  t.is(await page.$eval("#messages article.assistant .branch", (e) => e.textContent), "2/2");
  await page.click("#messages article.user .meta button[title^='Edit']");
  await page.$eval(".edit textarea", (e) => (e.value = ""));
  await page.type(".edit textarea", "Hello there");
  await page.keyboard.press("Enter");
  await page.waitForSelector('body[data-state="idle"]', { timeout: 60_000 });
  t.is(await page.$eval("#messages article.user .branch", (e) => e.textContent), "2/2");
  t.is(await page.$eval("#messages article.user .body", (e) => e.textContent), "Hello there");
  await page.click("#messages article.user .meta button[title='Previous version']");
  t.is(await page.$eval("#messages article.user .body", (e) => e.textContent), "Hi");
  t.is(await page.$eval("#messages article.assistant .branch", (e) => e.textContent), "2/2", "the first branch keeps its two answers");
  sameOrigin(t, o, server.url);
});

serial("an image attached on LFM2-VL gets the answer the API gives for the same bytes (greedy)", async (t) => {
  const o = await open(t, server.url);
  const { page } = o;
  const img = testImage(64, 48, 3);
  const file = path.join(mkdtempSync(path.join(os.tmpdir(), "wick-ui-")), "picture.png");
  writeFileSync(file, img.png);
  await page.select("#model", VL);
  await settings(page, { temperature: "0", max_tokens: "16" });
  const input = await page.$("input#file");
  await input!.uploadFile(file);
  await page.waitForSelector("#attachments .chip img");
  await send(page, "What is in this picture?");
  const m = await lastAnswer(page);
  t.falsy(m.error);
  const api = await postJson(`${server.url}/v1/chat/completions`, {
    model: VL,
    messages: [
      {
        role: "user",
        content: [
          { type: "image_url", image_url: { url: img.dataUri } },
          { type: "text", text: "What is in this picture?" },
        ],
      },
    ],
    temperature: 0,
    max_tokens: 16,
  });
  t.is(api.status, 200);
  t.is(m.content, api.json.choices[0].message.content);
  t.is(await page.$eval("#messages article.user img.thumb", (e) => e.src), img.dataUri);
  sameOrigin(t, o, server.url);
});

serial("a scripted tool call and reasoning show collapsible; bad tools are the API's error in place", async (t) => {
  const o = await open(t, server.url);
  const { page } = o;
  await page.select("#model", "pythonic-call");
  const weather = { type: "function", function: { name: "get_weather", parameters: { type: "object", properties: { city: { type: "string" }, days: { type: "integer" } } } } };
  await settings(page, { temperature: "0", tools: JSON.stringify([weather]) });
  await send(page, "What is the weather in Paris?");
  t.is(await page.$eval("#messages article.assistant details.tool-call summary code", (e) => e.textContent), "get_weather");
  t.deepEqual(JSON.parse(await page.$eval("#messages article.assistant details.tool-call pre", (e) => e.textContent)), { city: "Paris", days: 3 });
  t.false(await page.$eval("#messages article.assistant details.tool-call", (e) => e.open), "collapsed");

  await page.click("#new-chat");
  await page.select("#model", "thinking");
  await send(page, "Weather?");
  t.is(await page.$eval("#messages article.assistant details.reasoning-block .reasoning", (e) => e.textContent), "Let me check the weather");
  t.is(await page.$eval("#messages article.assistant .body", (e) => e.textContent.trim()), "It is sunny today.");

  await page.click("#new-chat");
  await page.select("#model", "pythonic-call");
  await settings(page, { tools: '{"not": "a list"}' });
  await send(page, "Weather?");
  const api = await postJson(`${server.url}/v1/chat/completions`, { model: "pythonic-call", messages: [{ role: "user", content: "Weather?" }], tools: { not: "a list" } });
  t.is(api.status, 400);
  t.is(await page.$eval("#messages article.assistant .error", (e) => e.textContent), api.json.error.message);
  sameOrigin(t, o, server.url);
});

serial("behind --api-key the page loads, asks for the key, says clearly when it is wrong, and works with the right one", async (t) => {
  const o = await open(t, keyed.url);
  const { page } = o;
  await page.waitForSelector("#key-form:not([hidden])");
  t.regex(await page.$eval("#key-reason", (e) => e.textContent), /needs an API key/);
  await page.type("#key-input", "not-the-key");
  await page.click("#key-form button[type=submit]");
  await page.waitForFunction(() => /Wrong API key/.test(document.getElementById("key-reason")!.textContent) && !document.getElementById("key-form")!.hidden);
  t.regex(await page.$eval("#banner", (e) => e.textContent), /Wrong API key: the server refused it \(Incorrect API key provided\.\)/);
  await page.type("#key-input", KEY);
  await page.click("#key-form button[type=submit]");
  await page.waitForFunction(() => document.querySelectorAll("#model option").length > 1);
  t.true(await page.$eval("#banner", (e) => (e as HTMLElement).hidden));
  await page.select("#model", SMOL);
  await settings(page, { max_tokens: "4" });
  await send(page, "Hi");
  t.falsy((await lastAnswer(page)).error);
  // Kept in the browser: a reload needs no key again.
  await page.reload({ waitUntil: "load" });
  await page.waitForSelector("body[data-ready]");
  t.true(await page.$eval("#key-form", (e) => (e as HTMLElement).hidden));
  sameOrigin(t, o, keyed.url);
});

serial("pulls a hub reference with a progress bar, lists it in the picker and chats with it", async (t) => {
  const store = await startStoreServer();
  t.teardown(() => store.close());
  await store.hub.addRepo("wick-test/Smol-GGUF", [{ path: "Smol-Q4_1.gguf", source: (smol as { path: string }).path }]);
  const o = await open(t, store.url);
  const { page } = o;
  t.regex(await page.$eval("#model", (e) => e.textContent), /No models/);
  await page.click("#pull-box summary");
  await page.evaluate(() => {
    const w = window as unknown as { progress: number[] };
    w.progress = [];
    const bar = document.getElementById("pull-progress") as HTMLProgressElement;
    new MutationObserver(() => w.progress.push(bar.value / bar.max)).observe(bar, { attributes: true });
  });
  await page.type("#pull-ref", "hf.co/wick-test/Smol-GGUF:Q4_1");
  await page.click("#pull-form button");
  await page.waitForFunction(() => /^pulled /.test(document.getElementById("pull-status")!.textContent), { timeout: 120_000 });
  const progress = await page.evaluate(() => (window as unknown as { progress: number[] }).progress);
  t.true(progress.filter((x) => x > 0 && x < 1).length >= 2, `the bar moved in steps: ${progress.map((x) => x.toFixed(2)).join(" ")}`);
  t.is(progress.at(-1), 1);
  const picked = await page.$eval("#model", (e) => (e as HTMLSelectElement).value);
  t.is(picked, "hf.co/wick-test/Smol-GGUF:Q4_1");
  await settings(page, { max_tokens: "4" });
  await send(page, "Hi");
  const m = await lastAnswer(page);
  t.falsy(m.error);
  t.is(m.model, picked);
  t.true(m.usage.completion > 0);
  // Loaded by that request: the picker marks it once the answer is done.
  await page.waitForFunction(() => /loaded/.test(document.querySelector("#model option:checked")!.textContent), { timeout: 5000 });
  // A reference the hub does not have is the API's error, in place.
  await page.$eval("#pull-ref", (e) => ((e as HTMLInputElement).value = ""));
  await page.type("#pull-ref", "hf.co/wick-test/Nothing-GGUF");
  await page.click("#pull-form button");
  await page.waitForSelector("#pull-status.error");
  t.regex(await page.$eval("#pull-status", (e) => e.textContent), /not found|404|does not exist/i);
  sameOrigin(t, o, store.url);
});

serial("model and user text is only ever text; a narrow screen has a drawer; the theme toggle overrides the system's", async (t) => {
  const o = await open(t, server.url);
  const { page } = o;
  await page.select("#model", SMOL);
  await settings(page, { max_tokens: "4" });
  const hostile = "<img src=x onerror=\"document.title='pwned'\"> <script>document.title='pwned'</script> **bold**";
  await send(page, hostile);
  t.is(await page.$eval("#messages article.user .body", (e) => e.textContent), hostile);
  t.is(await page.$$eval("#messages img, #messages script", (es) => es.length), 0);
  t.not(await page.title(), "pwned");
  for (const f of ["api", "chat", "db", "main", "markdown", "models", "view"]) {
    t.notRegex(readFileSync(path.join(repoRoot, "ui", `${f}.ts`), "utf8"), /\.(innerHTML|outerHTML)\s*=|insertAdjacentHTML\(|document\.write\(|createContextualFragment/, `ui/${f}.ts writes no HTML`);
  }

  await page.emulateMediaFeatures([{ name: "prefers-color-scheme", value: "dark" }]);
  const bg = () => page.evaluate(() => getComputedStyle(document.body).backgroundColor);
  t.is(await bg(), "rgb(22, 24, 28)");
  await page.click("#theme"); // auto -> light
  t.is(await bg(), "rgb(255, 255, 255)");
  await page.click("#theme"); // light -> dark
  t.is(await bg(), "rgb(22, 24, 28)");
  await page.click("#theme"); // dark -> auto (the system's dark)
  t.is(await bg(), "rgb(22, 24, 28)");

  await page.setViewport({ width: 390, height: 844 });
  // The list slides off screen (a short transition).
  await page.waitForFunction(() => document.getElementById("side")!.getBoundingClientRect().right <= 0, { timeout: 2000 });
  await page.click("#open-side");
  await page.waitForFunction(() => document.getElementById("side")!.getBoundingClientRect().left >= 0);
  await page.click("#conversations .conv > button:first-child");
  await page.waitForFunction(() => document.getElementById("side")!.getBoundingClientRect().right <= 0);
  const input = await page.$eval("#input", (e) => e.getBoundingClientRect().width);
  t.true(input > 200, `the message box keeps its room (${input}px)`);
  sameOrigin(t, o, server.url);
});
