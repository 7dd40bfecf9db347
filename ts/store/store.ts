/**
 * The on-disk model store, Ollama's layout under $WICK_HOME (default ~/.wick):
 *
 *   blobs/sha256-<hex>                          content-addressed layers (model, projector, …)
 *   manifests/<host>/<namespace>/<model>/<tag>  Ollama manifest JSON naming the layers
 *   tmp/                                        partial downloads, kept for resume
 *
 * A model exists once its manifest does, and a manifest is written only after every blob it
 * names is complete (ModelStore.writeManifest checks), each write atomic (fs-atomic.ts): a
 * crash or a full disk mid-pull or mid-create never leaves a half model listed.
 */
import { createHash } from "node:crypto";
import { createReadStream, promises as fsp } from "node:fs";
import os from "node:os";
import path from "node:path";
import { StoreError, errnoCode, writeError } from "./errors.ts";
import { exists, isTempName, openFileSink, removeEmptyDirs, sha256File, syncDir, tempNameFor, writeFileAtomic, type FileSink, type SinkOpener } from "./fs-atomic.ts";
import { CONFIG_MEDIA_TYPE, DIGEST_RE, MEDIA, blobFileName, manifestSchema, type Layer, type Manifest, type ModelConfig } from "./manifest.ts";
import { DEFAULT_TAG, HUB_HOST, formatName, nameKey, nameParts, parseModelName, parseReference, type ModelName } from "./reference.ts";
import type { BlobRef, BlobSource, ListedModel, Located, ResolvedModel, StoredManifest } from "./store-types.ts";

export type * from "./store-types.ts";

export interface StoreOptions {
  /** The store's root; default $WICK_HOME, else ~/.wick. */
  home?: string;
  /** How files are opened for writing (tests inject a disk that fills up). */
  openSink?: SinkOpener;
}

export function defaultHome(): string {
  return process.env.WICK_HOME || path.join(os.homedir(), ".wick");
}

export class ModelStore {
  readonly root: string;
  readonly blobsDir: string;
  readonly manifestsDir: string;
  readonly tmpDir: string;
  /**
   * Where the engine saves models' repacked weights so the next load maps them instead of
   * packing again (safe to delete): WICK_PACK_CACHE when it names a directory, none when it
   * is `off`, else `<root>/cache/packs`.
   */
  readonly packCacheDir: string | undefined;
  readonly openSink: SinkOpener;

  /** Blobs an operation in this process is writing a manifest for: delete/prune leave them. */
  private readonly pinned = new Map<string, number>();

  constructor(opts: StoreOptions = {}) {
    this.root = path.resolve(opts.home ?? defaultHome());
    this.blobsDir = path.join(this.root, "blobs");
    this.manifestsDir = path.join(this.root, "manifests");
    this.tmpDir = path.join(this.root, "tmp");
    const packs = process.env.WICK_PACK_CACHE?.trim();
    this.packCacheDir = packs === "off" ? undefined : path.resolve(packs || path.join(this.root, "cache", "packs"));
    this.openSink = opts.openSink ?? openFileSink;
  }

  /** The load option for the pack cache (none with `--no-mmap`, `mmap: false`, or no cache). */
  packCache(mmap?: boolean): { packCacheDir?: string } {
    return this.packCacheDir && mmap !== false ? { packCacheDir: this.packCacheDir } : {};
  }

  blobPath(digest: string): string {
    if (!DIGEST_RE.test(digest)) throw new StoreError("INVALID_NAME", `invalid digest ${JSON.stringify(digest)}: expected sha256:<64 lowercase hex>`);
    return path.join(this.blobsDir, blobFileName(digest));
  }

  /** The blob's size if it exists, else null. */
  async blobSize(digest: string): Promise<number | null> {
    try {
      return (await fsp.stat(this.blobPath(digest))).size;
    } catch {
      return null;
    }
  }

  /** Keeps `digests` from delete/prune until the returned function is called. */
  pin(digests: string[]): () => void {
    for (const d of digests) this.pinned.set(d, (this.pinned.get(d) ?? 0) + 1);
    let done = false;
    return () => {
      if (done) return;
      done = true;
      for (const d of digests) {
        const n = (this.pinned.get(d) ?? 1) - 1;
        if (n <= 0) this.pinned.delete(d);
        else this.pinned.set(d, n);
      }
    };
  }

  /**
   * Copies a file or a byte stream into blobs/, hashing while it copies. With `expectDigest`
   * a mismatch is an error and nothing is added. Any failure removes the temp file.
   */
  async importBlob(source: BlobSource, opts: { expectDigest?: string; onBytes?: (n: number) => void } = {}): Promise<BlobRef> {
    await fsp.mkdir(this.blobsDir, { recursive: true });
    const tmp = tempNameFor(path.join(this.blobsDir, "import"));
    const hash = createHash("sha256");
    let size = 0;
    let sink: FileSink | undefined;
    let sourceError: unknown;
    try {
      sink = await this.openSink(tmp, "create");
      const chunks: AsyncIterable<Uint8Array> = typeof source === "string" ? createReadStream(source, { highWaterMark: 1 << 20 }) : source;
      // What the source itself throws (a client gone mid-upload, a size limit) is not a write error.
      const watched = (async function* () {
        try {
          yield* chunks;
        } catch (err) {
          sourceError = err;
          throw err;
        }
      })();
      for await (const chunk of watched) {
        await sink.write(chunk);
        hash.update(chunk);
        size += chunk.byteLength;
        opts.onBytes?.(chunk.byteLength);
      }
      await sink.sync();
      await sink.close();
      sink = undefined;
      const digest = `sha256:${hash.digest("hex")}`;
      if (opts.expectDigest && digest !== opts.expectDigest) {
        throw new StoreError("DIGEST_MISMATCH", `content has digest ${digest}, expected ${opts.expectDigest}; nothing was added to the store`);
      }
      await this.adoptFile(tmp, digest);
      return { digest, size };
    } catch (err) {
      await sink?.close().catch(() => {});
      await fsp.rm(tmp, { force: true }).catch(() => {});
      if (sourceError !== undefined && err === sourceError && typeof source !== "string") throw err;
      if (typeof source === "string" && errnoCode(err) === "ENOENT" && !(await exists(source))) {
        throw new StoreError("FILE_NOT_FOUND", `no such file: ${source}`, { cause: err });
      }
      throw writeError(err, `a blob into ${this.blobsDir}`);
    }
  }

  /** Stores small text/JSON content (template, params, config) as a blob. */
  importBytes(data: string | Uint8Array): Promise<BlobRef> {
    const bytes = typeof data === "string" ? Buffer.from(data, "utf8") : data;
    return this.importBlob(
      (async function* () {
        yield bytes;
      })(),
    );
  }

  /** Moves a complete, verified file (same filesystem) to blobs/ under `digest`. */
  async adoptFile(file: string, digest: string): Promise<void> {
    await fsp.mkdir(this.blobsDir, { recursive: true });
    await fsp.rename(file, this.blobPath(digest));
    await syncDir(this.blobsDir);
  }

  /** Writes `manifest` under `name` once every blob it names exists with its size. Returns the manifest digest. */
  async writeManifest(nameOrRaw: ModelName | string, manifest: Manifest): Promise<string> {
    const name = typeof nameOrRaw === "string" ? parseModelName(nameOrRaw) : nameOrRaw;
    const parsed = manifestSchema.parse(manifest);
    for (const layer of [parsed.config, ...parsed.layers]) {
      const size = await this.blobSize(layer.digest);
      if (size === null) throw new StoreError("CORRUPT_MODEL", `cannot write ${formatName(name)}: blob ${layer.digest} is not in the store`);
      if (size !== layer.size) throw new StoreError("CORRUPT_MODEL", `cannot write ${formatName(name)}: blob ${layer.digest} has ${size} bytes, the manifest says ${layer.size}`);
    }
    const bytes = Buffer.from(JSON.stringify(parsed), "utf8");
    const file = (await this.findManifestFile(name)) ?? path.join(this.manifestsDir, ...nameParts(name));
    try {
      await writeFileAtomic(file, bytes, this.openSink);
    } catch (err) {
      throw writeError(err, `the manifest of ${formatName(name)}`);
    }
    return `sha256:${createHash("sha256").update(bytes).digest("hex")}`;
  }

  /** The manifest file for `name`: exact path first, else a case-insensitive match (names compare case-insensitively). */
  private async findManifestFile(name: ModelName): Promise<string | null> {
    const exact = path.join(this.manifestsDir, ...nameParts(name));
    if (await exists(exact)) return exact;
    let dir = this.manifestsDir;
    for (const part of nameParts(name)) {
      const entries = await fsp.readdir(dir).catch(() => [] as string[]);
      const match = entries.find((e) => e.toLowerCase() === part.toLowerCase());
      if (!match) return null;
      dir = path.join(dir, match);
    }
    return dir;
  }

  async readManifest(nameOrRaw: ModelName | string): Promise<StoredManifest | null> {
    const name = typeof nameOrRaw === "string" ? parseModelName(nameOrRaw) : nameOrRaw;
    const file = await this.findManifestFile(name);
    if (!file) return null;
    return this.readManifestFile(file);
  }

  private async readManifestFile(file: string): Promise<StoredManifest> {
    const [bytes, stat] = await Promise.all([fsp.readFile(file), fsp.stat(file)]);
    const rel = path.relative(this.manifestsDir, file).split(path.sep);
    const name: ModelName = { host: rel[0], namespace: rel[1], model: rel[2], tag: rel[3] };
    let manifest: Manifest;
    try {
      manifest = manifestSchema.parse(JSON.parse(bytes.toString("utf8")));
    } catch (err) {
      throw new StoreError("CORRUPT_MODEL", `the manifest of ${formatName(name)} (${file}) is not a valid manifest: ${(err as Error).message}`);
    }
    return { name, manifest, digest: `sha256:${createHash("sha256").update(bytes).digest("hex")}`, file, modifiedAt: stat.mtime };
  }

  /** Every manifest file under manifests/<host>/<ns>/<model>/<tag> (temp files skipped). */
  private async manifestFiles(): Promise<string[]> {
    const out: string[] = [];
    const walk = async (dir: string, depth: number): Promise<void> => {
      const entries = await fsp.readdir(dir, { withFileTypes: true }).catch(() => []);
      for (const e of entries) {
        if (isTempName(e.name) || e.name.startsWith(".")) continue;
        const p = path.join(dir, e.name);
        if (depth === 3) {
          if (e.isFile()) out.push(p);
        } else if (e.isDirectory()) await walk(p, depth + 1);
      }
    };
    await walk(this.manifestsDir, 0);
    return out.sort();
  }

  /** Every model, newest first, each checked cheaply (blob present with the right size). */
  async list(): Promise<ListedModel[]> {
    const models: ListedModel[] = [];
    for (const file of await this.manifestFiles()) {
      let m: StoredManifest;
      try {
        m = await this.readManifestFile(file);
      } catch (err) {
        const rel = path.relative(this.manifestsDir, file).split(path.sep);
        const modelName = { host: rel[0], namespace: rel[1], model: rel[2], tag: rel[3] };
        models.push({ name: formatName(modelName), modelName, digest: "", size: 0, modifiedAt: new Date(0), problem: (err as Error).message });
        continue;
      }
      const problems = await this.check(m.manifest, false);
      models.push({
        name: formatName(m.name),
        modelName: m.name,
        digest: m.digest.slice("sha256:".length),
        size: m.manifest.layers.reduce((s, l) => s + l.size, 0),
        modifiedAt: m.modifiedAt,
        config: await this.readConfig(m.manifest),
        problem: problems[0],
      });
    }
    return models.sort((a, b) => b.modifiedAt.getTime() - a.modifiedAt.getTime());
  }

  /** Problems with a manifest's blobs: missing, wrong size, and with `deep` a wrong sha256. */
  async check(manifest: Manifest, deep: boolean): Promise<string[]> {
    const problems: string[] = [];
    for (const layer of [manifest.config, ...manifest.layers]) {
      const size = await this.blobSize(layer.digest);
      if (size === null) problems.push(`blob ${layer.digest} (${layer.mediaType}) is missing`);
      else if (size !== layer.size) problems.push(`blob ${layer.digest} (${layer.mediaType}) has ${size} bytes, the manifest says ${layer.size}`);
      else if (deep) {
        const actual = await sha256File(this.blobPath(layer.digest));
        if (actual !== layer.digest) problems.push(`blob ${layer.digest} (${layer.mediaType}) is corrupt: its content hashes to ${actual}`);
      }
    }
    return problems;
  }

  /** Checks a stored model; `deep` rehashes every blob. Empty = healthy. */
  async verify(raw: string | ModelName, opts: { deep?: boolean } = {}): Promise<string[]> {
    const m = await this.mustRead(raw);
    return this.check(m.manifest, opts.deep ?? false);
  }

  private async mustRead(raw: string | ModelName): Promise<StoredManifest> {
    const m = await this.readManifest(raw);
    if (!m) throw new StoreError("MODEL_NOT_FOUND", `model '${typeof raw === "string" ? raw : formatName(raw)}' not found`);
    return m;
  }

  private async readConfig(manifest: Manifest): Promise<ModelConfig | undefined> {
    if (manifest.config.mediaType !== CONFIG_MEDIA_TYPE) return undefined;
    try {
      return JSON.parse(await fsp.readFile(this.blobPath(manifest.config.digest), "utf8")) as ModelConfig;
    } catch {
      return undefined;
    }
  }

  /** Resolves a store name to its files and Modelfile parts; a damaged model is an error naming the blob. */
  async resolve(raw: string | ModelName): Promise<ResolvedModel> {
    const m = await this.mustRead(raw);
    const display = formatName(m.name);
    const problems = await this.check(m.manifest, false);
    if (problems.length) throw new StoreError("CORRUPT_MODEL", `model '${display}' is damaged: ${problems.join("; ")}; pull or create it again`);
    const layer = (type: string) => m.manifest.layers.filter((l) => l.mediaType === type);
    const text = async (l: Layer) => fsp.readFile(this.blobPath(l.digest), "utf8");
    const json = async <T>(l: Layer, what: string): Promise<T> => {
      try {
        return JSON.parse(await text(l)) as T;
      } catch {
        throw new StoreError("CORRUPT_MODEL", `model '${display}' is damaged: its ${what} layer ${l.digest} is not JSON`);
      }
    };
    const model = layer(MEDIA.model)[0];
    if (!model) throw new StoreError("CORRUPT_MODEL", `model '${display}' has no model layer`);
    const [projector] = layer(MEDIA.projector);
    const [template] = layer(MEDIA.template);
    const [system] = layer(MEDIA.system);
    const [params] = layer(MEDIA.params);
    const [messages] = layer(MEDIA.messages);
    return {
      name: display,
      modelName: m.name,
      digest: m.digest,
      modelPath: this.blobPath(model.digest),
      projectorPath: projector && this.blobPath(projector.digest),
      adapterPaths: layer(MEDIA.adapter).map((l) => this.blobPath(l.digest)),
      template: template && (await text(template)),
      system: system && (await text(system)),
      license: layer(MEDIA.license).length ? await Promise.all(layer(MEDIA.license).map(text)) : undefined,
      params: params ? await json<ResolvedModel["params"]>(params, "params") : {},
      messages: messages ? await json<ResolvedModel["messages"]>(messages, "messages") : [],
      config: await this.readConfig(m.manifest),
      manifest: m.manifest,
      size: m.manifest.layers.reduce((s, l) => s + l.size, 0),
      modifiedAt: m.modifiedAt,
    };
  }

  /**
   * Where a user's reference points: a path, a store model, or a hub model to pull. The
   * two-part `org/repo[:tag]` is the store model when the store has it, else the hub repo; a
   * hub model already pulled is a store model.
   */
  async locate(raw: string, opts: { baseDir?: string } = {}): Promise<Located> {
    const ref = parseReference(raw, opts);
    if (ref.kind === "path") return ref;
    if (ref.kind === "name" && (!ref.hub || (await this.readManifest(ref.name)))) return { kind: "store", name: ref.name };
    const hub = ref.hub!;
    const [namespace, model] = hub.repo.split("/");
    const name: ModelName = { host: HUB_HOST, namespace, model, tag: hub.quant ?? DEFAULT_TAG };
    // A hub model pulled before is served from the store, without asking the hub.
    return (await this.readManifest(name)) ? { kind: "store", name } : { kind: "hub", hub, name };
  }

  /** Copies `source` to `destination` (the same blobs under a second name). */
  async copy(source: string | ModelName, destination: string | ModelName): Promise<void> {
    const m = await this.mustRead(source);
    const dst = typeof destination === "string" ? parseModelName(destination) : destination;
    await this.writeManifest(dst, m.manifest);
  }

  /** Deletes a model and the blobs no other manifest references; returns the removed digests. */
  async delete(raw: string | ModelName): Promise<string[]> {
    const m = await this.mustRead(raw);
    await fsp.rm(m.file);
    await syncDir(path.dirname(m.file));
    await removeEmptyDirs(path.dirname(m.file), this.manifestsDir);
    return this.removeUnreferenced([m.manifest.config, ...m.manifest.layers].map((l) => l.digest));
  }

  /** Removes every unreferenced blob and temp files older than `staleMs` (default 1 h). */
  async prune(opts: { staleMs?: number } = {}): Promise<string[]> {
    const staleBefore = Date.now() - (opts.staleMs ?? 3_600_000);
    const entries = await fsp.readdir(this.blobsDir).catch(() => [] as string[]);
    for (const e of entries.filter(isTempName)) {
      const p = path.join(this.blobsDir, e);
      const stat = await fsp.stat(p).catch(() => null);
      if (stat && stat.mtimeMs < staleBefore) await fsp.rm(p, { force: true });
    }
    const digests = entries.filter((e) => /^sha256-[0-9a-f]{64}$/.test(e)).map((e) => e.replace("-", ":"));
    return this.removeUnreferenced(digests);
  }

  private async removeUnreferenced(candidates: string[]): Promise<string[]> {
    const referenced = new Set<string>();
    for (const file of await this.manifestFiles()) {
      const m = await this.readManifestFile(file).catch(() => null);
      if (!m) continue;
      for (const l of [m.manifest.config, ...m.manifest.layers]) referenced.add(l.digest);
    }
    const removed: string[] = [];
    for (const d of new Set(candidates)) {
      if (referenced.has(d) || this.pinned.has(d)) continue;
      await fsp.rm(this.blobPath(d), { force: true });
      await this.removePackCaches(d);
      removed.push(d);
    }
    if (removed.length) await syncDir(this.blobsDir);
    return removed;
  }

  /** The engine's pack cache files of blob `digest` (named after the blob's file): they go with it. */
  private async removePackCaches(digest: string): Promise<void> {
    if (!this.packCacheDir) return;
    const prefix = `${path.basename(this.blobPath(digest))}-`;
    const files = await fsp.readdir(this.packCacheDir).catch(() => [] as string[]);
    for (const f of files.filter((f) => f.startsWith(prefix) && f.endsWith(".wpack"))) await fsp.rm(path.join(this.packCacheDir, f), { force: true });
  }

  /** Case-insensitive identity of a name, for maps of in-flight work. */
  key(name: ModelName): string {
    return `${this.root}|${nameKey(name)}`;
  }
}
