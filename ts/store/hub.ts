/**
 * Pulls GGUF models from a Hugging Face-compatible hub into the store, as `ollama pull
 * hf.co/org/repo:QUANT` does:
 *
 *   list   GET {endpoint}/api/models/{repo}/tree/main?recursive=true   (Link-paginated)
 *   fetch  GET {endpoint}/{repo}/resolve/main/{file}                    (302 to a CDN, Range)
 *
 * Downloads go to tmp/sha256-<oid>.partial and resume from it with `Range` (after a dropped
 * connection now, or a crash earlier); the bytes are hashed as they arrive and checked against
 * the LFS oid before the file becomes a blob, a mismatch deletes the partial. Connection errors
 * and 5xx are retried with exponential backoff, bounded. HF_TOKEN goes only to the endpoint's
 * origin (never to the CDN a redirect points at) and never into a message.
 *
 * Concurrent pulls of one name in a process share one promise; concurrent downloads of one
 * blob (two tags of the same file) share one download.
 */
import { createHash, type Hash } from "node:crypto";
import { createReadStream, promises as fsp } from "node:fs";
import path from "node:path";
import { z } from "zod";
import { manifestFor } from "./config.ts";
import { StoreError, errnoCode, writeError } from "./errors.ts";
import { pickFiles, type HubChoice, type HubFile } from "./hub-files.ts";
import { MEDIA, type Layer } from "./manifest.ts";
import { DEFAULT_TAG, HUB_HOST, formatName, parseReference, type HubRef, type ModelName } from "./reference.ts";
import type { ModelStore } from "./store.ts";

/** Ollama's pull progress line. */
export interface PullProgress {
  status: string;
  digest?: string;
  total?: number;
  completed?: number;
}
export type ProgressFn = (p: PullProgress) => void;

export interface HubOptions {
  /** Base URL; default $HF_ENDPOINT, else https://huggingface.co. */
  endpoint?: string;
  /** Bearer token; default $HF_TOKEN. */
  token?: string;
  /** Attempts after the first on connection errors and 5xx (reset when bytes arrived). Default 5. */
  retries?: number;
  /** First backoff; doubles per retry, capped at 30 s. Default 500 ms. */
  backoffMs?: number;
  maxRedirects?: number;
  /** Minimum ms between two progress events of one blob (the last is always sent). Default 100. */
  progressIntervalMs?: number;
}

export interface PullResult {
  name: string;
  modelName: ModelName;
  /** Manifest digest, sha256:<hex>. */
  digest: string;
  modelPath: string;
  projectorPath?: string;
  /** The repo files the model came from. */
  files: HubChoice;
}

const treeSchema = z.array(
  z.looseObject({
    type: z.string(),
    path: z.string(),
    size: z.number().optional(),
    lfs: z.looseObject({ oid: z.string(), size: z.number() }).optional(),
  }),
);

/** Work in flight, shared by callers that ask for the same thing; each caller's listener gets the events. */
interface Shared<T> {
  promise: Promise<T>;
  listeners: Set<ProgressFn>;
}
const pulls = new Map<string, Shared<PullResult>>();
const downloads = new Map<string, Shared<string>>();

function share<T>(map: Map<string, Shared<T>>, key: string, onProgress: ProgressFn | undefined, run: (emit: ProgressFn) => Promise<T>): Promise<T> {
  const running = map.get(key);
  if (running) {
    if (onProgress) running.listeners.add(onProgress);
    return running.promise;
  }
  const listeners = new Set<ProgressFn>(onProgress ? [onProgress] : []);
  const entry: Shared<T> = { listeners, promise: run((p) => listeners.forEach((l) => l(p))).finally(() => map.delete(key)) };
  map.set(key, entry);
  return entry.promise;
}

class RetryableError extends Error {}

export class HubClient {
  readonly endpoint: string;
  private readonly token: string | undefined;
  private readonly retries: number;
  private readonly backoffMs: number;
  private readonly maxRedirects: number;
  private readonly progressIntervalMs: number;

  constructor(
    private readonly store: ModelStore,
    opts: HubOptions = {},
  ) {
    this.endpoint = (opts.endpoint ?? process.env.HF_ENDPOINT ?? "https://huggingface.co").replace(/\/+$/, "");
    this.token = opts.token ?? (process.env.HF_TOKEN || undefined);
    this.retries = opts.retries ?? 5;
    this.backoffMs = opts.backoffMs ?? 500;
    this.maxRedirects = opts.maxRedirects ?? 5;
    this.progressIntervalMs = opts.progressIntervalMs ?? 100;
  }

  /** Every file of the repo at `main`, with sizes and LFS sha256s. */
  async listFiles(repo: string): Promise<HubFile[]> {
    const files: HubFile[] = [];
    let url: string | undefined = `${this.endpoint}/api/models/${repo}/tree/main?recursive=true`;
    for (let page = 0; url && page < 100; page++) {
      const res = await this.withRetries(() => this.get(url!, {}, `the file list of hf.co/${repo}`));
      let entries: z.infer<typeof treeSchema>;
      try {
        entries = treeSchema.parse(await res.json());
      } catch (err) {
        throw new StoreError("HUB_ERROR", `the hub's file list for hf.co/${repo} is not in the expected shape: ${this.redact((err as Error).message)}`);
      }
      for (const e of entries) {
        if (e.type !== "file") continue;
        const sha256 = e.lfs && /^[0-9a-f]{64}$/.test(e.lfs.oid) ? e.lfs.oid : undefined;
        files.push({ path: e.path, size: e.lfs?.size ?? e.size ?? 0, sha256 });
      }
      url = nextLink(res.headers.get("link"), url);
    }
    return files;
  }

  /** Pulls `hf.co/org/repo[:QUANT]` (a reference string or a HubRef) into the store. */
  pull(ref: string | HubRef, onProgress?: ProgressFn): Promise<PullResult> {
    const hub = typeof ref === "string" ? hubRefOf(ref) : ref;
    const [namespace, model] = hub.repo.split("/");
    const name: ModelName = { host: HUB_HOST, namespace, model, tag: hub.quant ?? DEFAULT_TAG };
    return share(pulls, this.store.key(name), onProgress, (emit) => this.pullOnce(hub, name, emit));
  }

  private async pullOnce(hub: HubRef, name: ModelName, emit: ProgressFn): Promise<PullResult> {
    emit({ status: "pulling manifest" });
    const choice = pickFiles(hub.repo, await this.listFiles(hub.repo), hub.quant);
    const parts: [HubFile, string][] = [[choice.model, MEDIA.model]];
    if (choice.projector) parts.push([choice.projector, MEDIA.projector]);
    const release = this.store.pin(parts.flatMap(([f]) => (f.sha256 ? [`sha256:${f.sha256}`] : [])));
    try {
      const layers: Layer[] = [];
      for (const [file, mediaType] of parts) {
        const digest = await this.fetchBlob(hub.repo, file, emit);
        layers.push({ mediaType, digest, size: file.size });
      }
      emit({ status: "verifying sha256 digest" });
      emit({ status: "writing manifest" });
      const manifest = await manifestFor(this.store, this.store.blobPath(layers[0].digest), layers);
      const digest = await this.store.writeManifest(name, manifest);
      emit({ status: "success" });
      return {
        name: formatName(name),
        modelName: name,
        digest,
        modelPath: this.store.blobPath(layers[0].digest),
        projectorPath: layers[1] && this.store.blobPath(layers[1].digest),
        files: choice,
      };
    } finally {
      release();
    }
  }

  /** The blob for `file`: already stored, or downloaded (once per digest at a time). Returns its digest. */
  private async fetchBlob(repo: string, file: HubFile, emit: ProgressFn): Promise<string> {
    if (file.sha256) {
      const digest = `sha256:${file.sha256}`;
      const progress = { status: `pulling ${file.sha256.slice(0, 12)}`, digest, total: file.size };
      if ((await this.store.blobSize(digest)) === file.size) {
        emit({ ...progress, completed: file.size });
        return digest;
      }
    }
    const key = `${this.store.root}|${file.sha256 ?? `${repo}/${file.path}`}`;
    return share(downloads, key, emit, (shared) => this.download(repo, file, shared));
  }

  /** Downloads into the partial file, resuming what is there, then verifies and adopts it as a blob. */
  private async download(repo: string, file: HubFile, emit: ProgressFn): Promise<string> {
    await fsp.mkdir(this.store.tmpDir, { recursive: true });
    const id = file.sha256 ?? createHash("sha256").update(`${repo}/${file.path}`).digest("hex");
    const partial = path.join(this.store.tmpDir, `sha256-${id}.partial`);
    const label = file.sha256 ? `sha256:${file.sha256}` : undefined;
    const status = `pulling ${id.slice(0, 12)}`;
    let { hash, offset } = await hashExisting(partial);
    if (offset > file.size) ({ hash, offset } = await restart(partial));

    let last = 0;
    const report = (force: boolean) => {
      const now = Date.now();
      if (!force && now - last < this.progressIntervalMs) return;
      last = now;
      emit({ status, digest: label, total: file.size, completed: offset });
    };
    report(true);

    const url = `${this.endpoint}/${repo}/resolve/main/${file.path.split("/").map(encodeURIComponent).join("/")}`;
    await this.withRetries(
      async () => {
        if (offset === file.size) return;
        const res = await this.get(url, offset > 0 ? { range: `bytes=${offset}-` } : {}, `hf.co/${repo}/${file.path}`, [416]);
        if (res.status === 200 && offset > 0) {
          ({ hash, offset } = await restart(partial)); // the server ignored the Range: take the whole body
        } else if (res.status !== 200 && !(res.status === 206 && rangeStart(res) === offset)) {
          await res.body?.cancel().catch(() => {});
          const from = offset;
          ({ hash, offset } = await restart(partial));
          throw new RetryableError(`the hub cannot continue hf.co/${repo}/${file.path} from byte ${from} (${res.status}); starting over`);
        }
        await this.appendBody(res, partial, hash, (n) => ((offset += n), report(false)), file);
        if (offset < file.size) throw new RetryableError(`the hub closed hf.co/${repo}/${file.path} at byte ${offset} of ${file.size}`);
      },
      () => offset,
    );
    report(true);

    const digest = `sha256:${hash.digest("hex")}`;
    if (offset !== file.size || (file.sha256 && digest !== `sha256:${file.sha256}`)) {
      await fsp.rm(partial, { force: true });
      const why = offset !== file.size ? `${offset} bytes arrived, the hub listed ${file.size}` : `the download hashes to ${digest}, the hub's sha256 is ${file.sha256}`;
      throw new StoreError("DIGEST_MISMATCH", `hf.co/${repo}/${file.path} is corrupt (${why}); the partial download was deleted, pull again`);
    }
    try {
      await this.store.adoptFile(partial, digest);
    } catch (err) {
      throw writeError(err, `hf.co/${repo}/${file.path} into the store`);
    }
    return digest;
  }

  /** Streams a response body onto the partial file, hashing what was written. */
  private async appendBody(res: Response, partial: string, hash: Hash, advance: (n: number) => void, file: HubFile): Promise<void> {
    if (!res.body) throw new RetryableError(`empty body for ${file.path}`);
    const sink = await this.store.openSink(partial, "append");
    const start = (await fsp.stat(partial)).size;
    let written = 0;
    try {
      for await (const chunk of res.body as AsyncIterable<Uint8Array>) {
        try {
          await sink.write(chunk);
        } catch (err) {
          // A write that failed part-way leaves bytes the hash has not seen: cut them off.
          await sink.close().catch(() => {});
          await fsp.truncate(partial, start + written).catch(() => {});
          throw writeError(err, `hf.co download of ${file.path}`);
        }
        hash.update(chunk);
        written += chunk.byteLength;
        advance(chunk.byteLength);
      }
      await sink.sync();
    } catch (err) {
      if (err instanceof StoreError) throw err;
      throw new RetryableError(`the connection dropped while downloading ${file.path}: ${this.redact(describe(err))}`);
    } finally {
      await sink.close().catch(() => {});
    }
  }

  /** GET with bounded manual redirects; the token only goes to the endpoint's origin. Non-OK statuses become errors. */
  private async get(url: string, headers: Record<string, string>, what: string, okStatuses: number[] = []): Promise<Response> {
    const origin = new URL(this.endpoint).origin;
    let current = url;
    for (let hop = 0; hop <= this.maxRedirects; hop++) {
      const h: Record<string, string> = { "user-agent": "wick", ...headers };
      if (this.token && new URL(current).origin === origin) h.authorization = `Bearer ${this.token}`;
      let res: Response;
      try {
        res = await fetch(current, { headers: h, redirect: "manual" });
      } catch (err) {
        throw new RetryableError(`cannot reach the hub for ${what}: ${this.redact(describe(err))}`);
      }
      if (res.status >= 300 && res.status < 400 && res.headers.get("location")) {
        await res.body?.cancel().catch(() => {});
        current = new URL(res.headers.get("location")!, current).toString();
        continue;
      }
      if (res.ok || okStatuses.includes(res.status)) return res;
      await res.body?.cancel().catch(() => {});
      if (res.status >= 500 || res.status === 429) throw new RetryableError(`the hub answered ${res.status} for ${what}`);
      if (res.status === 401 || res.status === 403) {
        const hint = this.token ? "the hub refused the token (HF_TOKEN)" : "it may be private or gated: set HF_TOKEN";
        throw new StoreError("HUB_UNAUTHORIZED", `not authorized to read ${what} (${res.status}): ${hint}`);
      }
      if (res.status === 404) throw new StoreError("HUB_NOT_FOUND", `${what} was not found on the hub (${this.endpoint})`);
      throw new StoreError("HUB_ERROR", `the hub answered ${res.status} for ${what}`);
    }
    throw new StoreError("HUB_ERROR", `too many redirects (over ${this.maxRedirects}) for ${what}`);
  }

  /** Runs `fn`, retrying RetryableErrors with exponential backoff; `progress` (bytes so far) resets the count when it grows. */
  private async withRetries<T>(fn: () => Promise<T>, progress: () => number = () => 0): Promise<T> {
    let attempt = 0;
    let seen = progress();
    for (;;) {
      try {
        return await fn();
      } catch (err) {
        if (!(err instanceof RetryableError)) throw err;
        if (progress() > seen) {
          seen = progress();
          attempt = 0;
        }
        if (attempt >= this.retries) throw new StoreError("HUB_ERROR", `${err.message} (gave up after ${attempt + 1} attempts)`);
        await new Promise((r) => setTimeout(r, Math.min(this.backoffMs * 2 ** attempt, 30_000)));
        attempt++;
      }
    }
  }

  /** Removes the token from text that may end up in a message or a log. */
  private redact(text: string): string {
    return this.token ? text.split(this.token).join("[HF_TOKEN]") : text;
  }
}

function hubRefOf(raw: string): HubRef {
  const ref = parseReference(raw);
  if (ref.kind === "hub") return ref.hub;
  if (ref.kind === "name" && ref.hub) return ref.hub;
  throw new StoreError("INVALID_NAME", `${JSON.stringify(raw)} is not a hub reference (expected hf.co/org/repo[:QUANT] or org/repo[:QUANT])`);
}

async function hashExisting(file: string): Promise<{ hash: Hash; offset: number }> {
  const hash = createHash("sha256");
  let offset = 0;
  try {
    for await (const chunk of createReadStream(file, { highWaterMark: 1 << 20 })) {
      hash.update(chunk as Buffer);
      offset += (chunk as Buffer).byteLength;
    }
  } catch (err) {
    if (errnoCode(err) !== "ENOENT") throw err;
  }
  return { hash, offset };
}

async function restart(partial: string): Promise<{ hash: Hash; offset: number }> {
  await fsp.rm(partial, { force: true });
  return { hash: createHash("sha256"), offset: 0 };
}

/** The first byte of a 206's Content-Range (`bytes 100-199/200` → 100). */
function rangeStart(res: Response): number {
  const m = /^bytes (\d+)-/.exec(res.headers.get("content-range") ?? "");
  return m ? Number(m[1]) : -1;
}

/** The `rel="next"` target of a Link header, resolved against the current URL. */
function nextLink(link: string | null, current: string): string | undefined {
  const m = link && /<([^>]+)>\s*;\s*rel="?next"?/.exec(link);
  return m ? new URL(m[1], current).toString() : undefined;
}

function describe(err: unknown): string {
  const e = err as { message?: string; cause?: { code?: string; message?: string } };
  const cause = e?.cause?.code ?? e?.cause?.message;
  return cause ? `${e.message} (${cause})` : String(e?.message ?? err);
}
