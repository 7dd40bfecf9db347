/**
 * The on-disk store: import, manifests, list/resolve/copy/delete, damage detection, and that
 * crashes, full disks and concurrent writers never leave a half model listed.
 */
import { createHash } from "node:crypto";
import { mkdtempSync, promises as fsp, readdirSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import test from "ava";
import { tinyGguf } from "./helpers/hub.ts";
import { manifestFor } from "../ts/store/config.ts";
import { openFileSink, type SinkOpener } from "../ts/store/fs-atomic.ts";
import { MEDIA } from "../ts/store/manifest.ts";
import { ModelStore } from "../ts/store/store.ts";
import { StoreError } from "../ts/store/errors.ts";

const tmpHome = () => mkdtempSync(path.join(os.tmpdir(), "wick-store-"));
const sha = (b: Buffer | string) => `sha256:${createHash("sha256").update(b).digest("hex")}`;

/** Writes a GGUF to disk, imports it with a template, and writes the manifest under `name`. */
async function addModel(store: ModelStore, name: string, gguf = tinyGguf()) {
  const file = path.join(path.dirname(store.root), `${path.basename(store.root)}-${name.replace(/\W/g, "_")}.gguf`);
  await fsp.writeFile(file, gguf);
  const model = await store.importBlob(file);
  const template = await store.importBytes("{{ .Prompt }}");
  const params = await store.importBytes(JSON.stringify({ temperature: 0.5, stop: ["<|end|>"] }));
  const layers = [
    { mediaType: MEDIA.model, ...model },
    { mediaType: MEDIA.template, ...template },
    { mediaType: MEDIA.params, ...params },
  ];
  const manifest = await manifestFor(store, store.blobPath(model.digest), layers);
  const digest = await store.writeManifest(name, manifest);
  return { file, model, digest, manifest };
}

/** A sink opener whose disk is full after `limit` bytes in total (the bytes before it are really written). */
function fullDiskAfter(limit: number): SinkOpener {
  let used = 0;
  return async (file, mode) => {
    const real = await openFileSink(file, mode);
    return {
      async write(chunk) {
        if (used + chunk.byteLength > limit) {
          const fits = Math.max(0, limit - used);
          await real.write(chunk.subarray(0, fits));
          used += fits;
          throw Object.assign(new Error("ENOSPC: no space left on device, write"), { code: "ENOSPC" });
        }
        used += chunk.byteLength;
        await real.write(chunk);
      },
      sync: () => real.sync(),
      close: () => real.close(),
    };
  };
}

/** Every file under the store except tmp/, relative. */
async function filesIn(root: string): Promise<string[]> {
  const out: string[] = [];
  for (const e of await fsp.readdir(root, { recursive: true, withFileTypes: true })) {
    if (e.isFile()) out.push(path.relative(root, path.join(e.parentPath, e.name)));
  }
  return out.sort();
}

test("import, manifest, list and resolve round-trip in Ollama's layout", async (t) => {
  const store = new ModelStore({ home: tmpHome() });
  const gguf = tinyGguf();
  const { model, digest } = await addModel(store, "tiny:q4");
  t.is(model.digest, sha(gguf));
  t.is(model.size, gguf.length);
  t.true(readdirSync(store.blobsDir).includes(`sha256-${sha(gguf).slice(7)}`));
  const manifestFile = path.join(store.manifestsDir, "registry.ollama.ai", "library", "tiny", "q4");
  const manifest = JSON.parse(await fsp.readFile(manifestFile, "utf8"));
  t.is(manifest.schemaVersion, 2);
  t.is(manifest.mediaType, "application/vnd.docker.distribution.manifest.v2+json");
  t.is(manifest.config.mediaType, "application/vnd.docker.container.image.v1+json");
  t.deepEqual(
    manifest.layers.map((l: { mediaType: string }) => l.mediaType),
    [MEDIA.model, MEDIA.template, MEDIA.params],
  );
  t.is(digest, sha(await fsp.readFile(manifestFile)));

  const [listed] = await store.list();
  t.is(listed.name, "tiny:q4");
  t.is(listed.digest, digest.slice(7));
  t.is(
    listed.size,
    manifest.layers.reduce((s: number, l: { size: number }) => s + l.size, 0),
  );
  t.is(listed.problem, undefined);
  t.like(listed.config, { model_format: "gguf", model_family: "llama", file_type: "Q4_K_M", model_type: "10" });

  const resolved = await store.resolve("TINY:Q4"); // names compare case-insensitively
  t.is(resolved.modelPath, store.blobPath(model.digest));
  t.is(resolved.template, "{{ .Prompt }}");
  t.deepEqual(resolved.params, { temperature: 0.5, stop: ["<|end|>"] });
  t.deepEqual(resolved.messages, []);
  t.is(resolved.projectorPath, undefined);
});

test("a crash between blob and manifest leaves nothing listed, and prune removes the orphan blob", async (t) => {
  const store = new ModelStore({ home: tmpHome() });
  const blob = await store.importBytes(tinyGguf());
  // The crash: a manifest write that got as far as its temp file.
  const dir = path.join(store.manifestsDir, "registry.ollama.ai", "library", "half");
  await fsp.mkdir(dir, { recursive: true });
  await fsp.writeFile(path.join(dir, ".latest.0123456789ab.tmp"), '{"schemaVersion":2,"lay');
  t.deepEqual(await store.list(), []);
  await t.throwsAsync(store.resolve("half"), { code: "MODEL_NOT_FOUND" } as never);
  t.deepEqual(await store.prune(), [blob.digest]);
  t.is(await store.blobSize(blob.digest), null);
});

test("a manifest naming a blob that is not in the store is refused", async (t) => {
  const store = new ModelStore({ home: tmpHome() });
  const { manifest } = await addModel(store, "a");
  const broken = { ...manifest, layers: [...manifest.layers, { mediaType: MEDIA.system, digest: sha("never written"), size: 13 }] };
  const err = await t.throwsAsync(store.writeManifest("b", broken), { instanceOf: StoreError });
  t.is(err?.code, "CORRUPT_MODEL");
  t.regex(err?.message ?? "", /is not in the store/);
  t.deepEqual(
    (await store.list()).map((m) => m.name),
    ["a:latest"],
  );
});

test("ENOSPC mid-blob is a DISK_FULL error and leaves the store as it was", async (t) => {
  const home = tmpHome();
  const good = new ModelStore({ home });
  await addModel(good, "keep");
  const before = await filesIn(home);
  const src = path.join(home, "..", `${path.basename(home)}-big.gguf`);
  await fsp.writeFile(src, tinyGguf({ padding: 3 << 20 }));
  const full = new ModelStore({ home, openSink: fullDiskAfter(1 << 20) });
  const err = await t.throwsAsync(full.importBlob(src), { instanceOf: StoreError });
  t.is(err?.code, "DISK_FULL");
  t.regex(err?.message ?? "", /no space left on device.*nothing was added/);
  t.deepEqual(await filesIn(home), before, "no temp file, no new blob");
  t.deepEqual(
    (await full.list()).map((m) => m.name),
    ["keep:latest"],
  );
  t.truthy(await full.resolve("keep"));
});

test("ENOSPC while overwriting a manifest keeps the old manifest whole", async (t) => {
  const home = tmpHome();
  const store = new ModelStore({ home });
  const a = await addModel(store, "a");
  const b = await addModel(store, "b", tinyGguf({ salt: "other" }));
  const full = new ModelStore({ home, openSink: fullDiskAfter(10) });
  await t.throwsAsync(full.copy("b", "a"), { code: "DISK_FULL" } as never);
  t.is((await store.resolve("a")).digest, a.digest);
  t.not(a.digest, b.digest);
  t.false((await filesIn(home)).some((f) => f.endsWith(".tmp")));
});

test("concurrent writers of the same blob produce one intact blob", async (t) => {
  const store = new ModelStore({ home: tmpHome() });
  const bytes = tinyGguf({ padding: 1 << 20 });
  const results = await Promise.all(Array.from({ length: 8 }, () => store.importBytes(bytes)));
  t.true(results.every((r) => r.digest === sha(bytes)));
  t.deepEqual(readdirSync(store.blobsDir), [`sha256-${sha(bytes).slice(7)}`]);
  t.is(sha(await fsp.readFile(store.blobPath(sha(bytes)))), sha(bytes));
});

test("an import whose content does not match the expected digest adds nothing", async (t) => {
  const store = new ModelStore({ home: tmpHome() });
  const err = await t.throwsAsync(
    store.importBlob(
      (async function* () {
        yield Buffer.from("hello");
      })(),
      { expectDigest: sha("other") },
    ),
  );
  t.is((err as StoreError).code, "DIGEST_MISMATCH");
  t.deepEqual(readdirSync(store.blobsDir), []);
});

test("copy shares blobs; delete removes only blobs no other manifest references", async (t) => {
  const store = new ModelStore({ home: tmpHome() });
  const { model } = await addModel(store, "a");
  await store.copy("a", "me/b:v2");
  t.deepEqual((await store.list()).map((m) => m.name).sort(), ["a:latest", "me/b:v2"]);
  t.deepEqual(await store.delete("a"), []);
  t.is(await store.blobSize(model.digest), model.size);
  const removed = await store.delete("me/b:v2");
  t.true(removed.includes(model.digest));
  t.is(await store.blobSize(model.digest), null);
  t.deepEqual(await filesIn(store.root), [], "empty manifest folders are removed too");
  await t.throwsAsync(store.delete("a"), { code: "MODEL_NOT_FOUND", message: "model 'a' not found" } as never);
  await t.throwsAsync(store.copy("nope", "x"), { code: "MODEL_NOT_FOUND" } as never);
});

test("a model whose blob is missing or corrupt is detected, listed with the problem, and does not resolve", async (t) => {
  const store = new ModelStore({ home: tmpHome() });
  const { model } = await addModel(store, "m");
  const blob = store.blobPath(model.digest);
  const bytes = await fsp.readFile(blob);
  bytes[bytes.length - 1] ^= 1;
  await fsp.writeFile(blob, bytes); // same size, wrong content
  t.deepEqual(await store.verify("m"), [], "a cheap check sees sizes only");
  const deep = await store.verify("m", { deep: true });
  t.is(deep.length, 1);
  t.regex(deep[0], /is corrupt: its content hashes to sha256:/);
  await fsp.rm(blob);
  const [listed] = await store.list();
  t.regex(listed.problem ?? "", new RegExp(`blob ${model.digest} .* is missing`));
  const err = await t.throwsAsync(store.resolve("m"), { instanceOf: StoreError });
  t.is(err?.code, "CORRUPT_MODEL");
  t.regex(err?.message ?? "", /model 'm:latest' is damaged: .*missing; pull or create it again/);
});

test("a manifest that is not valid JSON is listed as damaged, not thrown", async (t) => {
  const store = new ModelStore({ home: tmpHome() });
  const file = path.join(store.manifestsDir, "registry.ollama.ai", "library", "bad", "latest");
  await fsp.mkdir(path.dirname(file), { recursive: true });
  await fsp.writeFile(file, "{not json");
  const [listed] = await store.list();
  t.is(listed.name, "bad:latest");
  t.regex(listed.problem ?? "", /not a valid manifest/);
});

test("names cannot escape the store", async (t) => {
  const store = new ModelStore({ home: tmpHome() });
  const { manifest } = await addModel(store, "ok");
  for (const bad of ["../x", "../../etc/passwd", "/abs", "a/../../b", "a\0b"]) {
    await t.throwsAsync(store.writeManifest(bad, manifest), { code: "INVALID_NAME" } as never, bad);
  }
  t.throws(() => store.blobPath("sha256:../../x"), { code: "INVALID_NAME" } as never);
});

test("org/repo is the store model when the store has it, else the hub repo", async (t) => {
  const store = new ModelStore({ home: tmpHome() });
  t.like(await store.locate("org/repo:Q8_0"), { kind: "hub", hub: { repo: "org/repo", quant: "Q8_0" }, name: { host: "hf.co", tag: "Q8_0" } });
  await addModel(store, "org/repo:Q8_0");
  t.like(await store.locate("org/repo:Q8_0"), { kind: "store", name: { host: "registry.ollama.ai", namespace: "org" } });
  t.like(await store.locate("hf.co/org/repo"), { kind: "hub" });
  t.like(await store.locate("./m.gguf", { baseDir: "/x" }), { kind: "path", path: "/x/m.gguf" });
});

test("importing a file that does not exist names it", async (t) => {
  const store = new ModelStore({ home: tmpHome() });
  await t.throwsAsync(store.importBlob("/nonexistent/m.gguf"), { code: "FILE_NOT_FOUND", message: "no such file: /nonexistent/m.gguf" } as never);
});
