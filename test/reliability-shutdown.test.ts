/**
 * Graceful shutdown of a real `wick serve` child (issue #18): SIGTERM/SIGINT close the
 * listener (new connections refused), requests in flight finish — or, past
 * --shutdown-timeout, are cancelled with a final `shutting_down` frame —, the logs are flushed
 * and the process exits 0. A second signal exits at once, non-zero.
 */
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fixture, needs, repoRoot } from "./helpers/assets.ts";
import { BIN } from "./helpers/cli.ts";
import { spawnServe, type ServedProcess } from "./helpers/process.ts";
import { freePort } from "./helpers/server.ts";

const { path: tiny, serial } = needs(fixture("tiny-llama-q8_0.gguf"));

type Served = ServedProcess & { home: string };

async function serve(args: string[]): Promise<Served> {
  const home = mkdtempSync(path.join(os.tmpdir(), "wick-shutdown-"));
  const port = await freePort();
  const s = await spawnServe(BIN, ["-m", tiny!, "--port", String(port), ...args], {
    cwd: repoRoot,
    env: { ...process.env, HF_TOKEN: "", WICK_HOME: home, WICK_HOST: "" },
  });
  return { ...s, home };
}

/** Runs `body` against a fresh `wick serve` with `args`; the server is killed (if still up) and its home removed after. */
async function withServed(args: string[], body: (s: Served) => Promise<void>): Promise<void> {
  const s = await serve(args);
  try {
    await body(s);
  } finally {
    if (s.child.exitCode === null && s.child.signalCode === null) {
      s.child.kill("SIGKILL");
      await s.exit;
    }
    rmSync(s.home, { recursive: true, force: true });
  }
}

/** A streaming chat request: resolves once the first frame arrives; `rest` is the whole body. */
async function openStream(url: string, maxTokens: number) {
  const res = await fetch(`${url}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model: "m", stream: true, max_tokens: maxTokens, ignore_eos: true, messages: [{ role: "user", content: "Go on." }] }),
  });
  const reader = res.body!.getReader();
  const decoder = new TextDecoder();
  let text = "";
  while (!text.includes("\n\n")) {
    const { value, done } = await reader.read();
    if (done) break;
    text += decoder.decode(value, { stream: true });
  }
  const rest = (async () => {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return text;
      text += decoder.decode(value, { stream: true });
    }
  })();
  return { status: res.status, rest };
}

/** Waits (up to a minute) until the server's gauge shows `n` requests running. */
async function running(url: string, n: number): Promise<boolean> {
  let seen = -1;
  const poll = async () => {
    const page = await (await fetch(`${url}/metrics`)).text();
    seen = Number(/^wick:num_requests_running(?:\{[^}]*\})? (\S+)$/m.exec(page)?.[1] ?? -1);
  };
  await poll();
  for (let i = 0; i < 600 && seen !== n; i++) {
    await new Promise((r) => setTimeout(r, 100));
    await poll();
  }
  return seen === n;
}

/** Whether a new TCP connection to `url` is refused. */
async function refused(url: string): Promise<boolean> {
  try {
    await fetch(`${url}/health`);
    return false;
  } catch (err) {
    return String((err as { cause?: { code?: string } }).cause?.code) === "ECONNREFUSED";
  }
}

serial("SIGTERM: new connections are refused, a stream in flight finishes with [DONE], logs are flushed, exit 0", async (t) => {
  await withServed(["--shutdown-timeout", "60"], async (s) => {
    const stream = await openStream(s.url, 400);
    t.is(stream.status, 200);
    s.child.kill("SIGTERM");
    // The listener closes at once; the stream keeps going.
    let isRefused = false;
    for (let i = 0; i < 100 && !isRefused; i++) {
      isRefused = await refused(s.url);
      if (!isRefused) await new Promise((r) => setTimeout(r, 20));
    }
    t.true(isRefused, "new connections are refused while draining");
    const body = await stream.rest;
    t.true(body.trimEnd().endsWith("data: [DONE]"), body.slice(-200));
    t.false(body.includes('"error"'));
    const { code } = await s.exit;
    t.is(code, 0);
    const msgs = s.logs().map((l) => l.msg);
    t.true(msgs.includes("shutting down: no new connections; requests in flight get the shutdown timeout"));
    // The last log line is written (flushed) before the exit, with what the drain did.
    const stopped = s.logs().find((l) => l.msg === "stopped");
    t.truthy(stopped, s.stdout().slice(-400));
    t.is(stopped!.cancelled, 0);
    t.regex(s.stderr(), /wick: SIGTERM: finishing requests in flight/);
  });
});

serial("SIGINT past --shutdown-timeout: the stream in flight ends with a shutting_down error frame, a whole answer with 503, exit 0", async (t) => {
  await withServed(["--shutdown-timeout", "1", "-c", "32768"], async (s) => {
    const stream = await openStream(s.url, 30_000);
    const whole = fetch(`${s.url}/api/generate`, {
      method: "POST",
      body: JSON.stringify({ model: "m", prompt: "Go on.", raw: true, stream: false, options: { num_predict: 30_000 } }),
    });
    // Both run before the signal (a fixed sleep would not say so on a loaded machine).
    t.true(await running(s.url, 2), "both requests run before the signal");
    s.child.kill("SIGINT");
    const res = await whole;
    t.is(res.status, 503);
    t.is(res.headers.get("retry-after"), "1");
    t.regex(((await res.json()) as { error: string }).error, /shut down before this request finished/);
    const body = await stream.rest;
    const frames = body.split("\n\n").filter(Boolean);
    const last = JSON.parse(frames.at(-1)!.replace(/^data: /, ""));
    t.is(last.error?.code, "shutting_down", frames.at(-1));
    t.is(last.error?.type, "server_error");
    t.false(body.includes("[DONE]"));
    t.true(frames.length < 30_000, "cut short");
    const { code } = await s.exit;
    t.is(code, 0);
    const stopped = s.logs().find((l) => l.msg === "stopped");
    t.is(stopped?.cancelled, 2);
    t.truthy(s.logs().find((l) => l.msg === "shutdown timeout passed: cancelling the requests still in flight"));
  });
});

serial("a second signal exits at once with a non-zero status", async (t) => {
  await withServed(["--shutdown-timeout", "600", "-c", "32768"], async (s) => {
    const stream = await openStream(s.url, 30_000);
    s.child.kill("SIGTERM");
    await new Promise((r) => setTimeout(r, 300));
    t.is(s.child.exitCode, null, "still draining after the first signal");
    s.child.kill("SIGTERM");
    const { code } = await s.exit;
    t.is(code, 143);
    await stream.rest.catch(() => "");
  });
});
