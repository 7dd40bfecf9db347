/**
 * Creating a model from a local GGUF as Ollama's clients do it, against a real server on
 * 127.0.0.1 with a temp store: the blob uploaded to POST /api/blobs/:digest (raw bytes, streamed
 * as `ollama create` and the Python client's `create_blob` send them), then the real `ollama`
 * npm client's `create` with `files`, then list, show, chat and delete. Bad uploads (wrong
 * digest, oversized, malformed digest) are 4xx in Ollama's shape, leave nothing in the store,
 * and the server keeps serving.
 */
import { createHash } from "node:crypto";
import { createReadStream, promises as fsp, readFileSync } from "node:fs";
import { request } from "node:http";
import path from "node:path";
import { Readable } from "node:stream";
import test from "ava";
import { fixture, fixturesDir, needs } from "./helpers/assets.ts";
import { startServer, type RunningServer } from "./helpers/server.ts";
import { send, startStoreServer, type StoreServer } from "./helpers/store-server.ts";

const need = needs(fixture("scripted-lfm2-plain-answer.gguf"), fixture("tiny-llama-q8_0.gguf"), fixture("scripted-lfm2.json"));
const gguf = need.path ?? "";
const tinyLlama = path.join(fixturesDir, "tiny-llama-q8_0.gguf");
const answer = () => (JSON.parse(readFileSync(path.join(fixturesDir, "scripted-lfm2.json"), "utf8")) as Record<string, { text: string }>)["scripted-lfm2-plain-answer.gguf"].text;

const sha256 = (bytes: Buffer | string) => `sha256:${createHash("sha256").update(bytes).digest("hex")}`;
const fileDigest = async (file: string) => sha256(await fsp.readFile(file));

/** POST /api/blobs/:digest with the file streamed (chunked, no Content-Length), as the Python client sends it. */
async function uploadFile(url: string, digest: string, file: string): Promise<Response> {
  const body = Readable.toWeb(createReadStream(file, { highWaterMark: 64 * 1024 })) as ReadableStream<Uint8Array>;
  return fetch(`${url}/api/blobs/${digest}`, { method: "POST", body, duplex: "half" } as RequestInit);
}

/** The store's blob files (temp files of a failed upload included). */
const blobFiles = async (s: { home: string }) => (await fsp.readdir(path.join(s.home, "blobs")).catch(() => [] as string[])).sort();

let s: StoreServer;
test.before(async () => {
  if (need.path) s = await startStoreServer();
});
test.after.always(async () => s?.close());

need.serial("create from a local GGUF via blobs: HEAD 404, POST 201, HEAD 200, the client's create with files, then list, show, chat, delete", async (t) => {
  const digest = await fileDigest(gguf);
  t.is((await fetch(`${s.url}/api/blobs/${digest}`, { method: "HEAD" })).status, 404);
  const up = await uploadFile(s.url, digest, gguf);
  t.is(up.status, 201, await up.text());
  t.is((await fetch(`${s.url}/api/blobs/${digest}`, { method: "HEAD" })).status, 200);
  const stored = await fsp.readFile(path.join(s.home, "blobs", digest.replace(":", "-")));
  t.true(stored.equals(await fsp.readFile(gguf)), "the blob is the file, byte for byte");
  const again = await uploadFile(s.url, digest, gguf);
  t.is(again.status, 200, "already there: 200");

  const events: string[] = [];
  const files = { "plain-answer.gguf": digest };
  const request = { model: "weather", files, system: "You report the weather.", parameters: { temperature: 0, num_predict: 32 }, license: "MIT", stream: true };
  for await (const p of await s.ollama.create(request as never)) events.push((p as { status: string }).status);
  t.is(events.at(-1), "success", events.join(" | "));
  t.true(events.includes("parsing GGUF"), events.join(" | "));

  const listed = (await s.ollama.list()).models.find((m) => m.name === "weather:latest");
  t.truthy(listed);
  t.like(listed!.details, { format: "gguf", family: "lfm2", families: ["lfm2"] });
  const shown = await s.ollama.show({ model: "weather" });
  t.is(shown.system, "You report the weather.");
  t.is(shown.license, "MIT");
  t.regex(shown.parameters, /temperature\s+0/);
  t.regex(shown.parameters, /num_predict\s+32/);
  t.is(shown.details.family, "lfm2");

  const chat = await s.ollama.chat({ model: "weather", messages: [{ role: "user", content: "Weather in Paris?" }] });
  t.is(chat.message.content, answer(), "the scripted answer, greedy from the created model's PARAMETER");

  await s.ollama.delete({ model: "weather" });
  t.false((await s.ollama.list()).models.some((m) => m.name === "weather:latest"));
  t.is((await fetch(`${s.url}/api/blobs/${digest}`, { method: "HEAD" })).status, 404, "the blob went with the only model using it");
});

need.serial("create with files: a missing blob, a file that is not GGUF, two model files, adapters, quantize → 400 in Ollama's shape", async (t) => {
  const llama = await fileDigest(tinyLlama);
  t.is((await uploadFile(s.url, llama, tinyLlama)).status, 201);
  const text = Buffer.from("not a model\n");
  const textDigest = sha256(text);
  t.is((await fetch(`${s.url}/api/blobs/${textDigest}`, { method: "POST", body: text })).status, 201);
  const missing = `sha256:${"0".repeat(64)}`;
  const cases: [string, Record<string, unknown>, RegExp][] = [
    ["missing blob", { files: { "m.gguf": missing } }, /not in the store: upload it first/],
    ["not a GGUF", { files: { "notes.gguf": textDigest } }, /notes\.gguf is not a usable GGUF file/],
    ["malformed digest", { files: { "m.gguf": "sha256:xyz" } }, /invalid digest "sha256:xyz"/],
    ["adapters naming a model, not an adapter", { files: { "m.gguf": llama }, adapters: { "lora.gguf": llama } }, /lora\.gguf is not a LoRA adapter/],
    ["adapters naming a missing blob", { files: { "m.gguf": llama }, adapters: { "lora.gguf": missing } }, /not in the store: upload it first/],
    ["quantize", { files: { "m.gguf": llama }, quantize: "q4_K_M" }, /quantize is not supported/],
    ["safetensors", { files: { "model.safetensors": llama } }, /only GGUF files can be imported/],
    ["nothing", { files: {} }, /neither 'from', 'files' nor 'modelfile'/],
  ];
  for (const [what, body, message] of cases) {
    const res = await send(`${s.url}/api/create`, { model: "bad", stream: false, ...body });
    const json = (await res.json()) as { error: string };
    t.is(res.status, 400, `${what}: ${JSON.stringify(json)}`);
    t.deepEqual(Object.keys(json), ["error"], what);
    t.regex(json.error, message, what);
  }
  t.false(
    (await s.ollama.list()).models.some((m) => m.name.startsWith("bad")),
    "nothing was created",
  );
});

need.serial("two model GGUFs in files → 400 saying one model file", async (t) => {
  const a = await fileDigest(tinyLlama);
  const b = await fileDigest(gguf);
  for (const [d, f] of [
    [a, tinyLlama],
    [b, gguf],
  ])
    await uploadFile(s.url, d, f);
  const res = await send(`${s.url}/api/create`, { model: "two", files: { "a.gguf": a, "b.gguf": b }, stream: false });
  t.is(res.status, 400);
  t.regex(((await res.json()) as { error: string }).error, /exactly one model GGUF: 2 model files/);
});

need.serial("bad uploads: wrong digest 400, oversized 413 (declared and streamed), malformed digest 400; nothing kept, the server keeps serving", async (t) => {
  const small = await startStoreServerWithLimit(4096);
  try {
    const before = await blobFiles(small);
    const bytes = Buffer.alloc(3000, 7);
    const wrong = await fetch(`${small.url}/api/blobs/${sha256("other")}`, { method: "POST", body: bytes });
    t.is(wrong.status, 400);
    t.regex(((await wrong.json()) as { error: string }).error, /^digest mismatch: content has digest sha256:[0-9a-f]{64}, expected sha256:/);

    const big = Buffer.alloc(64 * 1024, 1);
    const declared = await fetch(`${small.url}/api/blobs/${sha256(big)}`, { method: "POST", body: big });
    t.is(declared.status, 413);
    t.deepEqual(await declared.json(), { error: `The blob of ${big.length} bytes is larger than this server's limit of 4096 bytes` });

    const streamed = await postChunked(`${small.url}/api/blobs/${sha256(big)}`, big);
    t.is(streamed.status, 413);
    t.deepEqual(JSON.parse(streamed.body), { error: "The blob is larger than this server's limit of 4096 bytes" });

    for (const bad of ["sha256:abc", "md5:" + "0".repeat(32), "sha256:" + "g".repeat(64)]) {
      const res = await fetch(`${small.url}/api/blobs/${bad}`, { method: "POST", body: bytes });
      t.is(res.status, 400, bad);
      t.regex(((await res.json()) as { error: string }).error, /^invalid digest/, bad);
      t.is((await fetch(`${small.url}/api/blobs/${bad}`, { method: "HEAD" })).status, 400, `HEAD ${bad}`);
    }
    const json = await fetch(`${small.url}/api/blobs/${sha256("{}")}`, { method: "POST", headers: { "content-type": "application/json" }, body: "{}" });
    t.is(json.status, 201, "a JSON-looking body is bytes too, never parsed");
    t.deepEqual(await blobFiles(small), [...before, sha256("{}").replace(":", "-")].sort(), "only the good upload is in the store, no temp files");
    const tags = await fetch(`${small.url}/api/tags`);
    t.is(tags.status, 200, "still serving");
  } finally {
    await small.close();
  }
});

/** A server with a small blob limit (and its own temp store). */
async function startStoreServerWithLimit(limit: number): Promise<{ url: string; home: string; close(): Promise<void> }> {
  const base = await startStoreServer();
  const limited: RunningServer = await startServer({ models: base.models, blobLimit: limit });
  return {
    url: limited.url,
    home: base.home,
    close: async () => {
      await limited.close();
      await base.close();
    },
  };
}

/** A chunked POST (no Content-Length): the limit is found while counting. */
function postChunked(url: string, body: Buffer): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request(url, { method: "POST" }, (res) => {
      let text = "";
      res.setEncoding("utf8");
      res.on("data", (c: string) => (text += c));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, body: text }));
    });
    req.on("error", reject);
    for (let i = 0; i < body.length; i += 1024) req.write(body.subarray(i, i + 1024));
    req.end();
  });
}
