/**
 * Security (issue #18): the API key guards every route but the liveness ones (and /metrics
 * unless --metrics-public); CORS is off unless --cors names origins; the key a client sends is
 * never logged (the JSON log of a real `wick serve` child at trace level); error bodies carry
 * no stack traces or server paths; store names and FROM paths cannot leave their roots through
 * /api/create, /api/pull, /api/copy, /api/delete or /api/show; binding to a non-loopback
 * address without a key warns on stderr.
 */
import test from "ava";
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { toApiError, toOllamaError } from "../ts/server/errors.ts";
import { fixture, needs, repoRoot } from "./helpers/assets.ts";
import { BIN } from "./helpers/cli.ts";
import { ended } from "./helpers/process.ts";
import { freePort, startServer } from "./helpers/server.ts";
import { send, startStoreServer } from "./helpers/store-server.ts";

const KEY = "sk-wick-test-0123456789abcdef";
const WRONG = "sk-wrong-key-fedcba9876543210";

const { path: tiny, test: withTiny } = needs(fixture("tiny-llama-q8_0.gguf"));

async function get(url: string, headers: Record<string, string> = {}, method = "GET") {
  const res = await fetch(url, { method, headers });
  await res.arrayBuffer();
  return res;
}

test("--api-key guards every route but /health, / and /api/version; /metrics opens with --metrics-public", async (t) => {
  for (const metricsPublic of [false, true]) {
    const s = await startServer({ apiKey: KEY, metricsPublic });
    try {
      for (const open of ["/health", "/", "/api/version"]) t.is((await get(s.url + open)).status, 200, open);
      for (const guarded of ["/v1/models", "/api/tags", "/api/ps", "/no/such/route"]) {
        t.is((await get(s.url + guarded)).status, 401, `${guarded} without a key`);
        t.is((await get(s.url + guarded, { "x-api-key": WRONG })).status, 401, `${guarded} with a wrong key`);
      }
      t.is((await get(`${s.url}/v1/models`, { authorization: `Bearer ${KEY}` })).status, 200);
      t.is((await get(`${s.url}/api/tags`, { "x-api-key": KEY })).status, 200);
      t.is((await get(`${s.url}/metrics`)).status, metricsPublic ? 200 : 401, `/metrics without a key, metricsPublic=${metricsPublic}`);
      t.is((await get(`${s.url}/metrics`, { authorization: `Bearer ${KEY}` })).status, 200);
    } finally {
      await s.close();
    }
  }
});

test("CORS is off by default: no Access-Control-* header, whatever the Origin", async (t) => {
  const s = await startServer({});
  try {
    const res = await get(`${s.url}/v1/models`, { origin: "https://evil.example" });
    t.is(res.headers.get("access-control-allow-origin"), null);
    const pre = await get(`${s.url}/v1/chat/completions`, { origin: "https://evil.example", "access-control-request-method": "POST" }, "OPTIONS");
    t.is(pre.headers.get("access-control-allow-origin"), null);
  } finally {
    await s.close();
  }
});

test("--cors: an allowed origin is echoed and its preflight answered before the key check; others get no CORS header", async (t) => {
  const s = await startServer({ apiKey: KEY, cors: ["https://app.example", "http://localhost:3000"] });
  try {
    const pre = await get(
      `${s.url}/v1/chat/completions`,
      { origin: "https://app.example", "access-control-request-method": "POST", "access-control-request-headers": "authorization, content-type, x-stainless-os" },
      "OPTIONS",
    );
    t.is(pre.status, 204, "the preflight needs no key");
    t.is(pre.headers.get("access-control-allow-origin"), "https://app.example");
    t.regex(pre.headers.get("access-control-allow-methods")!, /POST/);
    t.regex(pre.headers.get("access-control-allow-headers")!, /authorization/);
    t.regex(pre.headers.get("vary")!, /Origin/);

    const ok = await get(`${s.url}/v1/models`, { origin: "http://localhost:3000", authorization: `Bearer ${KEY}` });
    t.is(ok.status, 200);
    t.is(ok.headers.get("access-control-allow-origin"), "http://localhost:3000");
    t.regex(ok.headers.get("access-control-expose-headers")!, /X-Request-Id/);
    // An error answer (wrong key) still carries the header, so the page can read why.
    const denied = await get(`${s.url}/v1/models`, { origin: "https://app.example" });
    t.is(denied.status, 401);
    t.is(denied.headers.get("access-control-allow-origin"), "https://app.example");

    const evil = await get(`${s.url}/v1/models`, { origin: "https://evil.example", authorization: `Bearer ${KEY}` });
    t.is(evil.headers.get("access-control-allow-origin"), null);
    const evilPre = await get(`${s.url}/v1/chat/completions`, { origin: "https://evil.example", "access-control-request-method": "POST" }, "OPTIONS");
    t.is(evilPre.headers.get("access-control-allow-origin"), null);
    t.not(evilPre.status, 204);
  } finally {
    await s.close();
  }
  const any = await startServer({ cors: "*" });
  try {
    const res = await get(`${any.url}/api/tags`, { origin: "https://anything.example" });
    t.is(res.headers.get("access-control-allow-origin"), "*");
  } finally {
    await any.close();
  }
});

test("server-side failures carry no stack trace and no absolute path in their body", (t) => {
  const err = new Error("ENOENT: no such file or directory, open '/home/alice/.wick/blobs/sha256-abc'");
  for (const body of [JSON.stringify(toApiError(err).body), JSON.stringify(toOllamaError(err).body)]) {
    t.false(body.includes("/home/alice"), body);
    t.false(/\n\s+at /.test(body) || body.includes("\\n    at "), body);
    t.true(body.includes("sha256-abc"), "the file's own name stays, to say what failed");
  }
});

/** Every name a client could use to leave the store, per route. */
const ESCAPES = ["../../evil", "x/../../../evil", "../ok", "/etc/passwd", "..", "a:../../b", "hf.co/../../x", "..\\..\\evil", "ok/../../../../tmp/evil"];

withTiny("store names and FROM paths cannot leave their roots through /api/create, /api/pull, /api/copy, /api/delete, /api/show; error bodies name no server path", async (t) => {
  const s = await startStoreServer();
  const outside = mkdtempSync(path.join(os.tmpdir(), "wick-outside-"));
  try {
    t.is((await send(`${s.url}/api/create`, { model: "ok", from: tiny, stream: false })).status, 200);
    const bodies: string[] = [];
    const expectRefused = async (route: string, body: unknown, method = "POST") => {
      const res = await send(`${s.url}${route}`, body, method);
      const text = await res.text();
      bodies.push(text);
      t.true(res.status >= 400 && res.status < 500, `${route} ${JSON.stringify(body)} → ${res.status} ${text}`);
    };
    for (const name of ESCAPES) {
      await expectRefused("/api/create", { model: name, from: tiny, stream: false });
      await expectRefused("/api/pull", { model: name, stream: false });
      await expectRefused("/api/copy", { source: "ok", destination: name });
      await expectRefused("/api/copy", { source: name, destination: "b" });
      await expectRefused("/api/delete", { model: name }, "DELETE");
      await expectRefused("/api/show", { model: name });
    }
    // FROM: relative paths would resolve against the server's folder; only absolute ones are taken.
    for (const from of ["../../etc/passwd", "../../../../etc/passwd.gguf", "./nope.gguf", "~/nope.gguf", "../ok"]) {
      await expectRefused("/api/create", { model: "c", modelfile: `FROM ${from}` });
      await expectRefused("/api/create", { model: "c", from });
    }
    await expectRefused("/api/create", { model: "c", from: path.join(outside, "missing.gguf") });
    writeFileSync(path.join(outside, "passwd.gguf"), "root:x:0:0:root:/root:/bin/bash\n");
    await expectRefused("/api/create", { model: "c", from: path.join(outside, "passwd.gguf") });

    // Nothing was written outside the store, and inside only the one model.
    t.deepEqual(readdirSync(outside), ["passwd.gguf"]);
    t.false(existsSync(path.join(s.home, "..", "evil")));
    t.false(existsSync("/tmp/evil"));
    const manifests = path.join(s.home, "manifests");
    t.deepEqual(
      readdirSync(manifests, { recursive: true })
        .map(String)
        .filter((p) => p.split(path.sep).length === 4),
      ["registry.ollama.ai/library/ok/latest"],
    );

    // A server-side failure (a corrupt manifest) names the model, not the store's path.
    writeFileSync(path.join(manifests, "registry.ollama.ai/library/ok/latest"), "{not json");
    for (const [route, body] of [
      ["/api/show", { model: "ok" }],
      ["/api/generate", { model: "ok", prompt: "hi", stream: false }],
      ["/v1/chat/completions", { model: "ok", messages: [{ role: "user", content: "hi" }] }],
    ] as const) {
      const res = await send(`${s.url}${route}`, body);
      const text = await res.text();
      t.is(res.status, 500, text);
      t.regex(text, /ok:latest/);
      bodies.push(text);
    }
    for (const text of bodies) {
      t.false(text.includes(s.home), `no store path: ${text}`);
      t.false(text.includes(repoRoot), `no source path: ${text}`);
      t.false(/\bat .*\(.*:\d+:\d+\)/.test(text), `no stack: ${text}`);
    }
  } finally {
    rmSync(outside, { recursive: true, force: true });
    await s.close();
  }
});

/** `wick serve` with `args` until its listening line; then `run`, SIGTERM, and everything it printed. */
async function serveChild(args: string[], run: (url: string) => Promise<void>): Promise<{ stdout: string; stderr: string; code: number | null }> {
  const home = mkdtempSync(path.join(os.tmpdir(), "wick-sec-"));
  const child = spawn(process.execPath, [BIN, "serve", ...args], {
    cwd: repoRoot,
    env: { ...process.env, HF_TOKEN: "", WICK_HOME: home, WICK_HOST: "", WICK_API_KEY: "" },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stdout = "";
  let stderr = "";
  child.stdout.setEncoding("utf8").on("data", (d: string) => (stdout += d));
  // The exit code once every line the child wrote has been read (the test reads them after).
  const exited = ended(child).then(({ code }) => code);
  try {
    const url = await new Promise<string>((resolve, reject) => {
      child.stderr.setEncoding("utf8").on("data", (d: string) => {
        stderr += d;
        const m = /wick: serving .* at (http:\/\/\S+)\/v1\n/.exec(stderr);
        if (m) resolve(m[1].replace("0.0.0.0", "127.0.0.1"));
      });
      void exited.then((code) => reject(new Error(`wick serve exited ${code}: ${stderr}`)));
    });
    await run(url);
    child.kill("SIGTERM");
    return { stdout, stderr, code: await exited };
  } finally {
    if (child.exitCode === null) child.kill("SIGKILL");
    rmSync(home, { recursive: true, force: true });
  }
}

test("the API key a client sends, right or wrong, never reaches the log (trace level)", async (t) => {
  const port = await freePort();
  const { stdout, stderr, code } = await serveChild(["--api-key", KEY, "--host", "127.0.0.1", "--port", String(port), "--log-level", "trace"], async (url) => {
    const sets: Record<string, string>[] = [{ authorization: `Bearer ${KEY}` }, { "x-api-key": KEY }, { authorization: `Bearer ${WRONG}` }, { "x-api-key": WRONG }, { authorization: WRONG }];
    for (const headers of sets) {
      await get(`${url}/v1/models`, headers);
      await get(`${url}/api/tags`, headers);
      await get(`${url}/metrics`, headers);
      await send(`${url}/v1/chat/completions`, { model: "nope", messages: [{ role: "user", content: "hi" }] }).then((r) => r.text());
      await fetch(`${url}/api/show`, { method: "POST", headers: { ...headers, "content-type": "application/json" }, body: "{bad json" }).then((r) => r.text());
    }
  });
  t.is(code, 0);
  const requests = stdout.split("\n").filter((l) => l.includes('"msg":"request"'));
  t.true(requests.length >= 20, `the requests are logged (${requests.length} lines)`);
  t.true(
    requests.some((l) => l.includes('"status":401')),
    "the refused ones too",
  );
  for (const secret of [KEY, WRONG, KEY.slice(0, 12), WRONG.slice(0, 12)]) {
    t.false(stdout.includes(secret), `stdout holds ${secret}`);
    t.false(stderr.includes(secret), `stderr holds ${secret}`);
  }
  t.notRegex(stderr, /warning: listening/, "no warning on loopback");
});

test("binding to a non-loopback address without an API key warns on stderr; with a key it does not", async (t) => {
  const port = await freePort();
  const open = await serveChild(["--host", "0.0.0.0", "--port", String(port)], async () => {});
  t.regex(open.stderr, /^wick: warning: listening on 0\.0\.0\.0 without --api-key/m);
  const keyed = await serveChild(["--host", "0.0.0.0", "--port", String(port), "--api-key", KEY], async () => {});
  t.notRegex(keyed.stderr, /warning: listening/);
});
