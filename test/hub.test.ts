/**
 * Pulling from a loopback hub that serves real GGUF files with the hub's routes: bytes and
 * digests, progress, resume after a dropped connection or a crash, corruption, retries,
 * shared concurrent pulls, clear errors, and the token kept out of every message.
 */
import { createHash } from "node:crypto";
import { mkdtempSync, promises as fsp, readdirSync, readFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { needs } from "./helpers/assets.ts";
import { realGgufs, startHub, tinyGguf } from "./helpers/hub.ts";
import { createModel } from "../ts/store/create.ts";
import { StoreError } from "../ts/store/errors.ts";
import { openFileSink } from "../ts/store/fs-atomic.ts";
import { readGgufHeader } from "../ts/store/gguf-header.ts";
import { HubClient, type PullProgress } from "../ts/store/hub.ts";
import { ModelStore } from "../ts/store/store.ts";

const [modelAsset] = realGgufs(1);
const { path: modelFile, test } = needs(modelAsset);

const sha = (b: Buffer) => createHash("sha256").update(b).digest("hex");
const REPO = "wick-test/Tiny-GGUF";
const TOKEN = "hf_s3cretTOKENvalue123";

async function setup(opts: { token?: string } = {}) {
  const hub = await startHub();
  const bytes = readFileSync(modelFile!);
  const projector = tinyGguf({ architecture: "clip", fileType: 1 });
  await hub.addRepo(REPO, [
    { path: "README.md", source: Buffer.from("# tiny\n"), notLfs: true },
    { path: "Tiny-Q8_0.gguf", source: tinyGguf({ salt: "q8" }) },
    { path: "Tiny-Q4_K_M.gguf", source: modelFile! },
    { path: "mmproj-Tiny-F16.gguf", source: projector },
  ]);
  await hub.addRepo("wick-test/no-gguf", [
    { path: "config.json", source: Buffer.from("{}"), notLfs: true },
    { path: "model.safetensors", source: Buffer.from("x".repeat(100)) },
  ]);
  const store = new ModelStore({ home: mkdtempSync(path.join(os.tmpdir(), "wick-hub-")) });
  // token "" (not undefined) so an HF_TOKEN in the environment does not leak into the tests.
  const client = new HubClient(store, { endpoint: hub.url, token: opts.token ?? "", backoffMs: 5, progressIntervalMs: 0 });
  return { hub, store, client, bytes, projector };
}

async function withHub<T>(fn: (s: Awaited<ReturnType<typeof setup>>) => Promise<T>, opts: { token?: string } = {}): Promise<T> {
  const s = await setup(opts);
  try {
    return await fn(s);
  } finally {
    await s.hub.close();
  }
}

test("a pull stores the GGUF and its projector byte for byte, checks digests and writes the manifest", (t) =>
  withHub(async ({ hub, store, client, bytes, projector }) => {
    const events: PullProgress[] = [];
    const result = await client.pull(`hf.co/${REPO}:q4_k_m`, (p) => events.push(p));
    t.is(result.name, `hf.co/${REPO}:q4_k_m`);
    t.is(result.files.model.path, "Tiny-Q4_K_M.gguf");
    t.is(sha(readFileSync(result.modelPath)), sha(bytes));
    t.is(path.basename(result.modelPath), `sha256-${sha(bytes)}`);
    t.is(sha(readFileSync(result.projectorPath!)), sha(projector));

    const [listed] = await store.list();
    t.is(listed.name, `hf.co/${REPO}:q4_k_m`);
    t.is(listed.size, bytes.length + projector.length);
    const header = await readGgufHeader(modelFile!);
    t.like(listed.config, { model_family: header.architecture, file_type: header.fileType });
    const resolved = await store.resolve(`hf.co/${REPO}:Q4_K_M`);
    t.is(resolved.modelPath, result.modelPath);
    t.is(resolved.projectorPath, result.projectorPath);
    t.deepEqual(readdirSync(store.tmpDir), [], "no partial left behind");

    // Ollama's order: manifest, each layer (completed rising to total), verify, write, success.
    const statuses = events.map((e) => e.status.replace(/^pulling [0-9a-f]{12}$/, "pulling <digest>"));
    t.is(statuses[0], "pulling manifest");
    t.deepEqual(statuses.slice(-3), ["verifying sha256 digest", "writing manifest", "success"]);
    const layers = events.filter((e) => e.digest);
    t.deepEqual([...new Set(layers.map((e) => e.digest))], [`sha256:${sha(bytes)}`, `sha256:${sha(projector)}`]);
    const modelEvents = layers.filter((e) => e.digest === `sha256:${sha(bytes)}`);
    t.is(modelEvents[0].status, `pulling ${sha(bytes).slice(0, 12)}`);
    t.true(modelEvents.every((e, i) => e.total === bytes.length && (i === 0 || e.completed! >= modelEvents[i - 1].completed!)));
    t.is(modelEvents.at(-1)!.completed, bytes.length);
    t.is(hub.bytesServedFor(sha(bytes)), bytes.length);
    t.true(
      hub.requests.some((r) => r.url.startsWith(`/${REPO}/resolve/main/Tiny-Q4_K_M.gguf`)),
      "fetched through resolve (302 to the CDN)",
    );
  }));

test("a pull with no quant picks Q4_K_M and stores it under :latest; a second pull downloads nothing", (t) =>
  withHub(async ({ hub, store, client, bytes }) => {
    const a = await client.pull(`hf.co/${REPO}`);
    t.is(a.name, `hf.co/${REPO}:latest`);
    t.is(a.files.quant, "Q4_K_M");
    const served = hub.bytesServed();
    const b = await client.pull(`${REPO}:Q4_K_M`); // the org/repo shorthand
    t.is(hub.bytesServed(), served, "the blobs were already there");
    t.is(b.modelPath, a.modelPath);
    t.deepEqual((await store.list()).map((m) => m.name).sort(), [`hf.co/${REPO}:Q4_K_M`, `hf.co/${REPO}:latest`]);
    t.is(served, bytes.length + (await fsp.stat(a.projectorPath!)).size);
  }));

test("a download dropped mid-way resumes with Range from where it stopped and verifies the digest", (t) =>
  withHub(async ({ hub, client, bytes }) => {
    const cut = Math.floor(bytes.length / 2);
    hub.faults.dropOnce = { path: "Tiny-Q4_K_M.gguf", afterBytes: cut };
    const result = await client.pull(`hf.co/${REPO}:Q4_K_M`);
    t.is(sha(readFileSync(result.modelPath)), sha(bytes));
    const ranged = hub.requests.filter((r) => r.url.startsWith(`/cdn/${sha(bytes)}`) && r.headers.range);
    t.is(ranged.length, 1);
    const from = Number(/^bytes=(\d+)-$/.exec(ranged[0].headers.range as string)![1]);
    t.true(from > 0 && from <= cut, `resumed from byte ${from}`);
    t.is(hub.bytesServedFor(sha(bytes)), cut + (bytes.length - from), "nothing before the cut was sent twice");
    t.true(hub.bytesServedFor(sha(bytes)) < bytes.length * 1.5);
  }));

test("a partial download left by an earlier process is resumed, not restarted", (t) =>
  withHub(async ({ hub, store, client, bytes }) => {
    const have = Math.floor(bytes.length / 3);
    await fsp.mkdir(store.tmpDir, { recursive: true });
    await fsp.writeFile(path.join(store.tmpDir, `sha256-${sha(bytes)}.partial`), bytes.subarray(0, have));
    const result = await client.pull(`hf.co/${REPO}:Q4_K_M`);
    t.is(sha(readFileSync(result.modelPath)), sha(bytes));
    t.is(hub.bytesServedFor(sha(bytes)), bytes.length - have);
  }));

test("a corrupted download is rejected, its partial deleted, nothing listed; the next pull succeeds", (t) =>
  withHub(async ({ hub, store, client, bytes }) => {
    hub.faults.corrupt = { path: "Tiny-Q4_K_M.gguf", once: true };
    const err = await t.throwsAsync(client.pull(`hf.co/${REPO}:Q4_K_M`), { instanceOf: StoreError });
    t.is(err?.code, "DIGEST_MISMATCH");
    t.regex(err?.message ?? "", new RegExp(`Tiny-Q4_K_M\\.gguf is corrupt \\(the download hashes to sha256:[0-9a-f]{64}, the hub's sha256 is ${sha(bytes)}\\)`));
    t.deepEqual(await store.list(), []);
    t.deepEqual(readdirSync(store.tmpDir), []);
    t.is(await store.blobSize(`sha256:${sha(bytes)}`), null);
    const ok = await client.pull(`hf.co/${REPO}:Q4_K_M`);
    t.is(sha(readFileSync(ok.modelPath)), sha(bytes));
  }));

test("a 500 from the hub is retried with backoff", (t) =>
  withHub(async ({ hub, client }) => {
    hub.faults.fail500Once = { match: "/tree/main" };
    await client.pull(`hf.co/${REPO}:Q4_K_M`);
    t.is(hub.requests.filter((r) => r.url.includes("/tree/main")).length, 2);
  }));

test("a hub that keeps failing gives up after the retries with a clear error", (t) =>
  withHub(async ({ hub, store }) => {
    const client = new HubClient(store, { endpoint: hub.url, token: "", retries: 2, backoffMs: 1 });
    await hub.close();
    const err = await t.throwsAsync(client.pull(`hf.co/${REPO}`), { instanceOf: StoreError });
    t.is(err?.code, "HUB_ERROR");
    t.regex(err?.message ?? "", /cannot reach the hub for the file list of hf\.co\/wick-test\/Tiny-GGUF: .*gave up after 3 attempts/);
  }));

test("two concurrent pulls of the same model download it once and both get progress", (t) =>
  withHub(async ({ hub, client, bytes }) => {
    const a: PullProgress[] = [];
    const b: PullProgress[] = [];
    const [ra, rb] = await Promise.all([client.pull(`hf.co/${REPO}:Q4_K_M`, (p) => a.push(p)), client.pull(`hf.co/${REPO}:q4_k_m`, (p) => b.push(p))]);
    t.is(ra, rb, "one shared promise");
    t.is(hub.bytesServedFor(sha(bytes)), bytes.length);
    t.is(a.at(-1)?.status, "success");
    t.is(b.at(-1)?.status, "success");
  }));

test("a repo without GGUF files and an unknown quant are clear errors listing what exists", (t) =>
  withHub(async ({ client, store }) => {
    const none = await t.throwsAsync(client.pull("hf.co/wick-test/no-gguf"), { instanceOf: StoreError });
    t.is(none?.code, "HUB_NO_GGUF");
    t.is(none?.message, "hf.co/wick-test/no-gguf has no GGUF model files (it has: config.json, model.safetensors)");
    const quant = await t.throwsAsync(client.pull(`hf.co/${REPO}:Q2_K`), { instanceOf: StoreError });
    t.is(quant?.code, "HUB_QUANT_NOT_FOUND");
    t.is(quant?.message, `hf.co/${REPO} has no Q2_K GGUF; quants available: Q4_K_M, Q8_0 (files: Tiny-Q4_K_M.gguf, Tiny-Q8_0.gguf)`);
    const missing = await t.throwsAsync(client.pull("hf.co/wick-test/nope"), { instanceOf: StoreError });
    t.is(missing?.code, "HUB_NOT_FOUND");
    t.deepEqual(await store.list(), []);
  }));

test("HF_TOKEN is sent as a Bearer token to the hub and appears in no error message", async (t) => {
  await withHub(
    async ({ hub, client }) => {
      hub.faults.requireToken = TOKEN;
      await client.pull(`hf.co/${REPO}:Q4_K_M`);
      const toHub = hub.requests.filter((r) => !r.url.startsWith("/cdn/"));
      t.true(toHub.length >= 2);
      t.true(toHub.every((r) => r.headers.authorization === `Bearer ${TOKEN}`));
      const errors = [await t.throwsAsync(client.pull("hf.co/wick-test/nope")), await t.throwsAsync(client.pull(`hf.co/${REPO}:Q2_K`))];
      hub.faults.requireToken = "another-token";
      errors.push(await t.throwsAsync(client.pull(`hf.co/${REPO}:Q8_0`)));
      t.is((errors[2] as StoreError).code, "HUB_UNAUTHORIZED");
      t.regex(errors[2].message, /refused the token \(HF_TOKEN\)/);
      await hub.close();
      errors.push(await t.throwsAsync(client.pull(`hf.co/${REPO}:Q8_0`)));
      for (const e of errors) {
        t.false(e.message.includes(TOKEN), e.message);
        t.false(String(e.stack).includes(TOKEN));
      }
    },
    { token: TOKEN },
  );
  await withHub(async ({ hub, client }) => {
    hub.faults.requireToken = TOKEN;
    const err = await t.throwsAsync(client.pull(`hf.co/${REPO}:Q4_K_M`), { instanceOf: StoreError });
    t.is(err?.code, "HUB_UNAUTHORIZED");
    t.regex(err?.message ?? "", /set HF_TOKEN/);
  });
});

test("a paginated file listing is followed to the end", (t) =>
  withHub(async ({ hub, client }) => {
    hub.faults.pageSize = 1;
    const files = await client.listFiles(REPO);
    t.deepEqual(files.map((f) => f.path).sort(), ["README.md", "Tiny-Q4_K_M.gguf", "Tiny-Q8_0.gguf", "mmproj-Tiny-F16.gguf"]);
    t.is(files.find((f) => f.path === "README.md")?.sha256, undefined, "non-LFS files have no sha256");
  }));

test("a full disk mid-download is DISK_FULL, lists nothing, and the partial resumes once there is space", (t) =>
  withHub(async ({ hub, store, client, bytes }) => {
    const limit = Math.floor(bytes.length / 2);
    let used = 0;
    const full = new ModelStore({
      home: store.root,
      openSink: async (file, mode) => {
        const real = await openFileSink(file, mode);
        return {
          async write(chunk) {
            if (used + chunk.byteLength > limit) {
              await real.write(chunk.subarray(0, limit - used)); // the disk takes what fits, then fails
              used = limit;
              throw Object.assign(new Error("ENOSPC: no space left on device, write"), { code: "ENOSPC" });
            }
            used += chunk.byteLength;
            await real.write(chunk);
          },
          sync: () => real.sync(),
          close: () => real.close(),
        };
      },
    });
    const fullClient = new HubClient(full, { endpoint: hub.url, token: "", backoffMs: 1 });
    const err = await t.throwsAsync(fullClient.pull(`hf.co/${REPO}:Q4_K_M`), { instanceOf: StoreError });
    t.is(err?.code, "DISK_FULL");
    t.regex(err?.message ?? "", /no space left on device/);
    t.deepEqual(await store.list(), []);
    const partial = path.join(store.tmpDir, `sha256-${sha(bytes)}.partial`);
    const kept = (await fsp.stat(partial)).size;
    t.true(kept > 0 && kept <= limit, "the partial holds only bytes that were hashed");
    const served = hub.bytesServedFor(sha(bytes));
    const ok = await client.pull(`hf.co/${REPO}:Q4_K_M`);
    t.is(sha(readFileSync(ok.modelPath)), sha(bytes));
    t.is(hub.bytesServedFor(sha(bytes)) - served, bytes.length - kept, "resumed from the partial");
  }));

test("create FROM a hub reference pulls it first, then builds on it", (t) =>
  withHub(async ({ store, client }) => {
    const statuses: string[] = [];
    await createModel(store, "mine", `FROM hf.co/${REPO}:Q4_K_M\nSYSTEM be brief`, { hub: client, onProgress: (p) => statuses.push(p.status) });
    t.true(statuses.includes("pulling manifest"));
    t.is(statuses.at(-1), "success");
    t.deepEqual(await store.locate(`${REPO}:Q4_K_M`), { kind: "store", name: { host: "hf.co", namespace: "wick-test", model: "Tiny-GGUF", tag: "Q4_K_M" } }, "a pulled hub model is a store model");
    const mine = await store.resolve("mine");
    const pulled = await store.resolve(`hf.co/${REPO}:Q4_K_M`);
    t.is(mine.modelPath, pulled.modelPath);
    t.is(mine.projectorPath, pulled.projectorPath);
    t.is(mine.system, "be brief");
  }));
