/**
 * Bad input to the store-backed native API, against a real server (temp WICK_HOME, loopback
 * hub): unknown models, malformed Modelfiles (line numbers), wrong types, hub repos without
 * GGUF files, names that try to leave the store, a full disk mid-create and mid-pull. Each is a
 * clear `{"error": …}` with its status, the store is left as it was, and the server keeps serving.
 */
import { promises as fsp } from "node:fs";
import path from "node:path";
import { fixture, needs } from "./helpers/assets.ts";
import { ndjson, send, startStoreServer, type StoreServer } from "./helpers/store-server.ts";
import test from "ava";

const tinyAsset = fixture("tiny-llama-q8_0.gguf");
const { path: tiny, serial } = needs(tinyAsset);

let s: StoreServer;

test.before(async () => {
  if (!tiny) return;
  s = await startStoreServer();
  await s.hub.addRepo("wick-test/no-gguf", [
    { path: "config.json", source: Buffer.from("{}"), notLfs: true },
    { path: "model.safetensors", source: Buffer.from("x".repeat(100)) },
  ]);
  await s.hub.addRepo("wick-test/tiny", [{ path: "Tiny-Q8_0.gguf", source: tiny }]);
  const r = await send(`${s.url}/api/create`, { model: "a", from: tiny, stream: false });
  if (r.status !== 200) throw new Error(`create a: ${await r.text()}`);
});
test.after.always(async () => s?.close());

/** The store's files (blobs and manifests), for "nothing changed" checks. */
async function storeFiles(): Promise<string[]> {
  const out: string[] = [];
  for (const dir of ["blobs", "manifests"]) {
    const root = path.join(s.home, dir);
    const entries = await fsp.readdir(root, { recursive: true, withFileTypes: true }).catch(() => []);
    for (const e of entries) if (e.isFile()) out.push(path.relative(s.home, path.join(e.parentPath, e.name)));
  }
  return out.sort();
}

async function expectError(t: import("ava").ExecutionContext, res: Response, status: number, pattern: RegExp, what: string) {
  const text = await res.text();
  t.is(res.status, status, `${what}: ${text}`);
  let body: any;
  try {
    body = JSON.parse(text);
  } catch {
    body = {};
  }
  t.deepEqual(Object.keys(body), ["error"], what);
  t.regex(String(body.error), pattern, what);
}

serial("unknown models: 404 in Ollama's words on /api, model_not_found on /v1", async (t) => {
  const hi = [{ role: "user", content: "hi" }];
  await expectError(t, await send(`${s.url}/api/generate`, { model: "nope", prompt: "x" }), 404, /^model 'nope' not found, try pulling it first$/, "generate");
  await expectError(t, await send(`${s.url}/api/chat`, { model: "nope:7b", messages: hi }), 404, /^model 'nope:7b' not found, try pulling it first$/, "chat");
  await expectError(t, await send(`${s.url}/api/chat`, { model: "hf.co/org/repo:Q4_K_M", messages: hi }), 404, /not found, try pulling it first/, "a hub reference never pulled");
  await expectError(t, await send(`${s.url}/api/show`, { model: "nope" }), 404, /^model 'nope' not found$/, "show");
  const v1 = await send(`${s.url}/v1/chat/completions`, { model: "nope", messages: hi });
  t.is(v1.status, 404);
  t.like((await v1.json()).error, { code: "model_not_found", param: "model" });
  t.is((await fetch(`${s.url}/v1/models/nope`)).status, 404);
});

serial("create: malformed Modelfiles and fields are 400 naming the line or field, before any progress is streamed", async (t) => {
  const before = await storeFiles();
  const cases: [string, Record<string, unknown>, number, RegExp][] = [
    ["an unknown instruction (line 3)", { modelfile: "FROM a\n\nFOO bar" }, 400, /^Modelfile \(line 3\): unknown instruction "FOO"/],
    ["a PARAMETER of the wrong type", { modelfile: "FROM a\n# greedy\nPARAMETER temperature hot" }, 400, /^Modelfile \(line 3\): invalid float value for temperature: "hot"$/],
    ['an unclosed """', { modelfile: 'FROM a\nSYSTEM """never closed' }, 400, /line 2.*not closed/],
    ["no FROM", { modelfile: "SYSTEM hi" }, 400, /no FROM line/],
    ["neither from, files nor modelfile", {}, 400, /neither 'from', 'files' nor 'modelfile'/],
    ["JSON parameters of the wrong type", { from: "a", parameters: { temperature: "hot" } }, 400, /parameters\.temperature: expected a number, got "hot"/],
    ["an unknown JSON parameter", { from: "a", parameters: { temprature: 1 } }, 400, /unknown parameter 'temprature'/],
    ["a TEMPLATE that does not parse", { from: "a", template: "{{ .Prompt " }, 400, /template/i],
    ["an ADAPTER path that is not absolute", { modelfile: "FROM a\nADAPTER ./lora.gguf" }, 400, /ADAPTER path sent to the server must be absolute/],
    ["quantize", { from: "a", quantize: "q4_K_M" }, 400, /quantize is not supported/],
    ["files naming a blob the store lacks", { files: { "m.gguf": `sha256:${"0".repeat(64)}` } }, 400, /is not in the store: upload it first with POST \/api\/blobs/],
    ["FROM a model that does not exist", { from: "nope" }, 404, /^from "nope": model 'nope:latest' not found/],
    ["FROM a file that does not exist", { modelfile: "FROM /no/such/model.gguf" }, 404, /^Modelfile \(line 1\): FROM \/no\/such\/model\.gguf: no such file/],
    ["a model name with ../", { model: "../evil", from: "a" }, 400, /invalid model name "\.\.\/evil"/],
    ["a model name with a slash-dot-dot inside", { model: "me/../../x", from: "a" }, 400, /invalid model name/],
    ["a model name that is a path", { model: "/tmp/x", from: "a" }, 400, /invalid model name/],
    ["a model that is not a string", { model: 5, from: "a" }, 400, /'model'.*string/],
  ];
  for (const [what, body, status, pattern] of cases) {
    // Streaming (the default): still an ordinary error response, not a 200 stream.
    await expectError(t, await send(`${s.url}/api/create`, { model: "new", ...body }), status, pattern, what);
  }
  t.deepEqual(await storeFiles(), before, "nothing was written");
  t.deepEqual(
    (await s.ollama.list()).models.map((m) => m.name),
    ["a:latest"],
  );
});

serial("native generation: bad options types, keep_alive and template are 400 naming the field", async (t) => {
  const cases: [string, string, Record<string, unknown>, RegExp][] = [
    ["temperature a string", "/api/generate", { model: "a", prompt: "x", options: { temperature: "hot" } }, /options\.temperature/],
    ["num_predict a string", "/api/chat", { model: "a", messages: [{ role: "user", content: "x" }], options: { num_predict: "3" } }, /options\.num_predict/],
    ["stop not an array", "/api/generate", { model: "a", prompt: "x", options: { stop: "\n" } }, /options\.stop/],
    ["keep_alive not a duration", "/api/generate", { model: "a", prompt: "x", keep_alive: "soon" }, /keep_alive "soon"/],
    ["keep_alive an object", "/api/chat", { model: "a", messages: [], keep_alive: { m: 5 } }, /keep_alive/],
    ["a template that does not parse", "/api/generate", { model: "a", prompt: "x", template: "{{ if .Prompt }}x" }, /Invalid template/],
    ["a model name that leaves the store", "/api/chat", { model: "../../etc/passwd", messages: [{ role: "user", content: "x" }] }, /invalid model name/],
  ];
  for (const [what, route, body, pattern] of cases) await expectError(t, await send(s.url + route, body), 400, pattern, what);
  const ok = await s.ollama.generate({ model: "a", prompt: "hi", options: { num_predict: 2 } });
  t.is(ok.eval_count, 2);
});

serial("pull: a repo without GGUF files, an unknown repo or quant, and an Ollama library name are clear errors", async (t) => {
  const before = await storeFiles();
  const cases: [string, Record<string, unknown>, number, RegExp][] = [
    ["a repo without GGUF files", { model: "hf.co/wick-test/no-gguf" }, 400, /hf\.co\/wick-test\/no-gguf has no GGUF model files \(it has: config\.json, model\.safetensors\)/],
    ["the same, not streamed", { model: "wick-test/no-gguf", stream: false }, 400, /has no GGUF model files/],
    ["an unknown repo", { model: "hf.co/wick-test/nothing-here" }, 404, /not found on the hub/],
    ["an unknown quant", { model: "hf.co/wick-test/tiny:Q2_K" }, 400, /has no Q2_K GGUF; quants available: Q8_0/],
    ["an Ollama library name", { model: "llama3.2" }, 400, /from the Ollama library is not supported.*hf\.co/],
    ["a name with ..", { name: "hf.co/../x" }, 400, /invalid model name/],
    ["no model", {}, 400, /^model is required$/],
  ];
  for (const [what, body, status, pattern] of cases) await expectError(t, await send(`${s.url}/api/pull`, body), status, pattern, what);
  t.deepEqual(await storeFiles(), before);
  // Through the ollama client: the status and message come back as a ResponseError.
  const err = await t.throwsAsync(s.ollama.pull({ model: "hf.co/wick-test/no-gguf", stream: true }));
  t.is((err as Error & { status_code?: number }).status_code, 400);
  t.regex(err.message, /has no GGUF model files/);
});

serial("delete, copy, push: 404 / 400 / 501 with a reason", async (t) => {
  await expectError(t, await send(`${s.url}/api/delete`, { model: "nope" }, "DELETE"), 404, /^model 'nope' not found$/, "delete unknown");
  await expectError(t, await send(`${s.url}/api/delete`, { model: "../a" }, "DELETE"), 400, /invalid model name/, "delete ../");
  await expectError(t, await send(`${s.url}/api/delete`, {}, "DELETE"), 400, /model is required/, "delete without a name");
  await expectError(t, await send(`${s.url}/api/copy`, { source: "a", destination: "x/../../y" }), 400, /invalid model name/, "copy to ../");
  await expectError(t, await send(`${s.url}/api/copy`, { source: "a" }), 400, /destination/, "copy without a destination");
  await expectError(t, await send(`${s.url}/api/push`, { model: "a" }), 501, /push is not supported/, "push");
  const escaped = await fsp.readdir(path.dirname(s.home));
  t.false(
    escaped.some((e) => e === "evil" || e === "y"),
    "no name wrote outside the store",
  );
});

serial("a full disk mid-create and mid-pull: 507 (in-band once streaming), nothing half-written, then it works", async (t) => {
  const before = await storeFiles();
  s.disk.full = true;
  try {
    await expectError(t, await send(`${s.url}/api/create`, { model: "big", from: tiny, stream: false }), 507, /no space left on device.*nothing was added/, "create, not streamed");
    const streamed = await send(`${s.url}/api/create`, { model: "big", from: tiny });
    t.is(streamed.status, 200, "streaming: the copy had begun");
    const lines = await ndjson(streamed);
    t.true(lines.some((l) => String(l.status).startsWith("copying file")));
    t.regex(lines.at(-1).error, /no space left on device/);
    t.false(lines.some((l) => l.status === "success"));
    await expectError(t, await send(`${s.url}/api/pull`, { model: "hf.co/wick-test/tiny:Q8_0", stream: false }), 507, /no space left on device/, "pull, not streamed");
  } finally {
    s.disk.full = false;
  }
  t.deepEqual(await storeFiles(), before, "no blob or manifest was added");
  t.deepEqual(
    (await s.ollama.list()).models.map((m) => m.name),
    ["a:latest"],
  );
  const tmp = await fsp.readdir(path.join(s.home, "blobs")).then((es) => es.filter((e) => e.endsWith(".tmp")));
  t.deepEqual(tmp, [], "no temp files left in blobs/");
  // The server keeps serving, and the same operations succeed once there is room.
  t.is((await s.ollama.generate({ model: "a", prompt: "hi", options: { num_predict: 2 } })).eval_count, 2);
  t.deepEqual(await (await send(`${s.url}/api/create`, { model: "big", from: tiny, stream: false })).json(), { status: "success" });
  t.deepEqual(await s.ollama.pull({ model: "hf.co/wick-test/tiny:Q8_0" }), { status: "success" });
  t.deepEqual((await s.ollama.list()).models.map((m) => m.name).sort(), ["a:latest", "big:latest", "hf.co/wick-test/tiny:Q8_0"]);
});
