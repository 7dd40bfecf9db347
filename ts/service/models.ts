/**
 * Which models are loaded, and when they load and unload — Ollama's scheduler rules:
 *
 * - a request names a model; it is loaded on first use (a store name through the store, or the
 *   `-m` model), and every request for a model that is loading waits for that one load;
 * - each request holds a lease until its response is finished; when the last lease of a model is
 *   released, its keep-alive starts (the request's `keep_alive`, else the server default;
 *   Infinity = stay, 0 = unload now);
 * - at most `maxLoaded` models are loaded, and a load that would not fit in free RAM first
 *   evicts idle models, least recently used first; a model with requests in flight is never
 *   unloaded (a load that needs its slot waits for it to go idle);
 * - a model that fails to load fails its own requests only.
 *
 * With `-m`, names that are neither loaded nor in the store reach the `-m` model (llama-server's
 * rule: clients send names such as "gpt-4o"); store names still reach their own models.
 * Models handed over already loaded (library use, tests) are served as they are and never unloaded.
 */
import { promises as fsp } from "node:fs";
import os from "node:os";
import path from "node:path";
import { pino, type Logger } from "pino";
import { cpuIsa, inspectModel, type LoadOptions, type LoraAdapter, type LoraAdapterSpec, type LoraScale } from "../engine/index.ts";
import { formatName, nameKey, StoreError, type HubClient, type ModelName, type ModelStore } from "../store/index.ts";
import { RequestError } from "./errors.ts";
import { DEFAULT_KEEP_ALIVE_MS } from "./keep-alive.ts";
import { profileOf, type ModelProfile } from "./profile.ts";
import { adapterView, loraError } from "./lora.ts";
import { modelIdFromPath, ModelRegistry, type ServedModel } from "./registry.ts";
import type { ReasoningMode } from "./reasoning-plan.ts";

/** Engine options every model this manager loads gets (the serve flags). */
export interface LoadDefaults extends Omit<LoadOptions, "modelPath" | "vocabOnly"> {
  toolCallParser?: string;
  reasoning?: ReasoningMode;
  /** `--reasoning-budget` (tokens); undefined: no limit. */
  reasoningBudget?: number;
}

export interface ModelManagerOptions {
  registry?: ModelRegistry;
  store?: ModelStore;
  hub?: HubClient;
  load?: LoadDefaults;
  /** Keep-alive when a request does not say (ms; Infinity = forever). Default 5 minutes. */
  keepAliveMs?: number;
  /** Most models loaded at once. Default 3. */
  maxLoaded?: number;
  /** Bytes a new model may take without evicting others (default: os.freemem). */
  freeMemory?: () => number;
  log?: Logger;
}

type Source = { kind: "path"; path: string } | { kind: "store"; name: ModelName } | { kind: "given" };

interface Entry {
  id: string;
  source: Source;
  model?: ServedModel;
  loading?: Promise<ServedModel>;
  unloading?: Promise<void>;
  /** Requests holding the model. */
  refs: number;
  defaultKeepAliveMs: number;
  keepAliveMs: number;
  timer?: NodeJS.Timeout;
  /** When an idle model unloads (epoch ms; Infinity = never). */
  expiresAt: number;
  lastUsed: number;
  /** Estimated bytes in memory (weights + KV cache). */
  size: number;
  /** The store changed under it: unload once idle, whatever the keep-alive says. */
  stale?: boolean;
  /** A vision projector loaded with it (`--mmproj` for the `-m` model). */
  mmproj?: string;
  /** A draft model loaded with it for speculative decoding (`--model-draft` for the `-m` model). */
  draftModel?: string;
  /** LoRA adapters loaded with it (the `-m` model's --lora flags, and adapters loaded at run time, so a reload keeps them). */
  lora?: LoraAdapterSpec[];
}

/** An adapter served under its own model id (vLLM's `--lora-modules`, `/v1/load_lora_adapter`; llama-server's `--lora`). */
export interface AdapterModel {
  adapter: LoraAdapter;
  base: ServedModel;
}

export interface Lease {
  model: ServedModel;
  /** Ends the request's hold; idempotent. */
  release(): void;
}

/** A model /api/show can describe: its file, and its Modelfile parts when it comes from the store. */
export interface ModelDescription {
  id: string;
  path: string;
  model?: ServedModel;
  profile?: ModelProfile;
  /** The vision projector it would load with (a not-yet-loaded model's `vision` capability). */
  projector?: string;
}

/** A loaded model as /api/ps lists it. */
export interface LoadedModel {
  model: ServedModel;
  size: number;
  expiresAt: Date;
}

/** Ollama's "forever": now + the largest Go duration (about 292 years). */
const FOREVER_MS = 9_223_372_036_854;

export class ModelManager {
  readonly registry: ModelRegistry;
  readonly store?: ModelStore;
  readonly hub?: HubClient;
  readonly keepAliveMs: number;
  readonly maxLoaded: number;
  private readonly loadDefaults: LoadDefaults;
  private readonly freeMemory: () => number;
  private readonly log: Logger;
  private readonly entries = new Map<string, Entry>();
  private defaultKey?: string;
  private loadQueue: Promise<unknown> = Promise.resolve();
  private waiters: (() => void)[] = [];
  /** Called when the next engine load is handed to the addon's worker thread. */
  private onDispatch: (() => void)[] = [];

  constructor(opts: ModelManagerOptions = {}) {
    this.registry = opts.registry ?? new ModelRegistry();
    this.store = opts.store;
    this.hub = opts.hub;
    this.loadDefaults = opts.load ?? {};
    this.keepAliveMs = opts.keepAliveMs ?? DEFAULT_KEEP_ALIVE_MS;
    this.maxLoaded = opts.maxLoaded ?? 3;
    this.freeMemory = opts.freeMemory ?? os.freemem;
    this.log = opts.log ?? pino({ level: "silent" });
  }

  /**
   * Resolves once the next model load is running on the addon's worker thread (its file
   * looked up, the room made): `wick serve` evaluates the HTTP side's modules only then, so
   * the two overlap instead of the load waiting behind them.
   */
  loadDispatched(): Promise<void> {
    return new Promise((resolve) => this.onDispatch.push(resolve));
  }

  /**
   * The `-m` model: a GGUF path or a store name. It keeps `keepAliveMs` (default: forever) and
   * takes every request whose name matches nothing else.
   */
  setDefault(ref: { path: string } | { name: ModelName }, opts: { id?: string; keepAliveMs?: number; mmproj?: string; draftModel?: string; lora?: LoraAdapterSpec[] } = {}): void {
    const source: Source = "path" in ref ? { kind: "path", path: path.resolve(ref.path) } : { kind: "store", name: ref.name };
    const id = opts.id ?? (source.kind === "path" ? modelIdFromPath(source.path) : formatName(source.name));
    const key = this.keyOf(source, id);
    const entry = this.entry(key, id, source);
    entry.defaultKeepAliveMs = entry.keepAliveMs = opts.keepAliveMs ?? Infinity;
    if (opts.mmproj) entry.mmproj = path.resolve(opts.mmproj);
    if (opts.draftModel) entry.draftModel = path.resolve(opts.draftModel);
    if (opts.lora?.length) entry.lora = opts.lora.map((a) => ({ ...a, path: path.resolve(a.path) }));
    this.defaultKey = key;
  }

  /** Loads the `-m` model now (start-up); throws what the load threw. */
  async loadDefault(): Promise<ServedModel> {
    const lease = await this.acquire(undefined);
    lease.release();
    return lease.model;
  }

  /** Waits until `name`'s model is loaded (loading it if needed) and holds it until `release`. */
  async acquire(name: string | null | undefined, opts: { keepAliveMs?: number } = {}): Promise<Lease> {
    // An adapter's name (vLLM's rule) picks its base model with that adapter alone, unless a model has the name.
    const adapter = name && !this.registry.find(name) ? this.adapterModel(name) : undefined;
    if (adapter) {
      const lease = await this.acquire(adapter.base.id, opts);
      const now = this.adapterModel(name!);
      if (!now || now.base !== lease.model) {
        lease.release();
        throw new RequestError("MODEL_NOT_FOUND", `The model '${name}' does not exist (its LoRA adapter was unloaded).`, "model");
      }
      return { model: adapterView(lease.model, now.adapter), release: () => lease.release() };
    }
    const entry = await this.find(name);
    for (;;) {
      if (entry.unloading) {
        await entry.unloading;
        continue;
      }
      if (entry.model && entry.source.kind !== "given" && !entry.model.engine.health().ok) {
        await this.dropDead(entry);
        continue;
      }
      entry.refs++;
      clearTimeout(entry.timer);
      entry.keepAliveMs = opts.keepAliveMs ?? entry.defaultKeepAliveMs;
      let model: ServedModel;
      try {
        model = entry.model ?? (await this.ensureLoaded(entry));
      } catch (err) {
        this.release(entry);
        throw err;
      }
      let held = true;
      return {
        model,
        release: () => {
          if (held) this.release(entry);
          held = false;
        },
      };
    }
  }

  /**
   * Unloads `name`'s model as `keep_alive: 0` asks: now when idle, else when its last request
   * ends. Unknown names throw as `acquire` does; a model that is not loaded is left alone.
   */
  async unload(name: string | null | undefined): Promise<void> {
    const entry = await this.find(name);
    entry.keepAliveMs = 0;
    if (entry.model && entry.refs === 0 && entry.source.kind !== "given") await this.unloadEntry(entry, "keep_alive 0");
  }

  /** A store model was re-created or deleted: its loaded copy is stale, unload it once idle. */
  async forget(name: ModelName): Promise<void> {
    const entry = this.entries.get(`store:${nameKey(name)}`);
    if (!entry?.model) return;
    entry.stale = true;
    if (entry.refs === 0) await this.unloadEntry(entry, "changed in the store");
  }

  /**
   * What `name` names exactly, loaded or not (no `-m` fallback): for /api/show. A store
   * model's Modelfile parts come with it; undefined when nothing has that name.
   */
  async describe(name: string): Promise<ModelDescription | undefined> {
    const loaded = this.registry.find(name);
    if (loaded) return { id: loaded.id, path: loaded.path, model: loaded, profile: loaded.profile };
    const fallback = this.defaultKey ? this.entries.get(this.defaultKey) : undefined;
    let stored: ModelName | undefined;
    let mmproj: string | undefined; // --mmproj given with -m
    if (fallback && (name === fallback.id || name === `${fallback.id}:latest`)) {
      if (fallback.source.kind === "path") return { id: fallback.id, path: fallback.source.path, projector: fallback.mmproj };
      if (fallback.source.kind === "store") [stored, mmproj] = [fallback.source.name, fallback.mmproj];
    }
    if (!stored && this.store) {
      const located = await this.store.locate(name);
      if (located.kind === "store" && (await this.store.readManifest(located.name))) stored = located.name;
    }
    if (!stored) return undefined;
    const resolved = await this.store!.resolve(stored);
    const projector = mmproj ?? (resolved.projectorPath ? await this.pairedProjector(resolved.projectorPath, resolved.name) : undefined);
    return { id: resolved.name, path: resolved.modelPath, profile: profileOf(resolved), projector };
  }

  /**
   * Models served from a GGUF file rather than the store, by served name: the `-m` file (loaded
   * or not) and models handed over loaded. /api/tags lists them beside the store's.
   */
  fileModels(): { id: string; path: string }[] {
    const out = new Map<string, string>();
    const fallback = this.defaultKey ? this.entries.get(this.defaultKey) : undefined;
    if (fallback?.source.kind === "path") out.set(fallback.id, fallback.source.path);
    for (const m of this.registry.list()) if (!m.profile?.store) out.set(m.id, m.path);
    return [...out].map(([id, file]) => ({ id, path: file }));
  }

  /** Loaded models, most recently used first. */
  loaded(): LoadedModel[] {
    const now = Date.now();
    return this.registry
      .list()
      .map((model) => ({ model, entry: this.entryOfLoaded(model) }))
      .sort((a, b) => b.entry.lastUsed - a.entry.lastUsed)
      .map(({ model, entry }) => {
        const until = entry.refs > 0 ? now + entry.keepAliveMs : entry.expiresAt;
        return { model, size: entry.size, expiresAt: new Date(Number.isFinite(until) ? until : now + FOREVER_MS) };
      });
  }

  // --- LoRA adapters (llama-server's /lora-adapters, vLLM's load/unload routes) ---

  /** The loaded adapter named `name` that is served as a model of its own (a store model's ADAPTER layers are not). */
  adapterModel(name: string): AdapterModel | undefined {
    return this.adapterModels().find((a) => a.adapter.name === name);
  }

  /** Every adapter served under its own name, with its base model: what /v1/models lists beside the models. */
  adapterModels(): AdapterModel[] {
    return this.registry.list().flatMap((base) => {
      const baked = new Set(base.profile?.store?.adapters ?? []);
      return base.engine
        .adapters()
        .filter((a) => !baked.has(a.path))
        .map((adapter) => ({ adapter, base }));
    });
  }

  /**
   * The model the adapter routes act on (they name none): the `-m` model, else the one loaded
   * model; loaded if need be and held until `release`.
   */
  adapterBase(): Promise<Lease> {
    return this.acquire(undefined);
  }

  /** `/v1/load_lora_adapter`: loads a GGUF adapter beside the base's (kept across reloads); returns its id. */
  async loadAdapter(spec: LoraAdapterSpec): Promise<{ id: number; base: ServedModel }> {
    const name = spec.name ?? modelIdFromPath(spec.path);
    if (this.adapterModel(name) || this.registry.find(name)) throw new RequestError("INVALID_REQUEST", `The lora adapter '${name}' has already been loaded.`, "lora_name");
    const lease = await this.adapterBase();
    try {
      const file = path.resolve(spec.path);
      const stat = await fsp.stat(file).catch(() => null);
      if (!stat?.isFile()) throw new RequestError("INVALID_REQUEST", `LoRA adapter ${spec.path}: no such file`, "lora_path");
      const id = await lease.model.engine.loadAdapter({ ...spec, path: file, name }).catch((err: unknown) => {
        throw loraError(err, "lora_path");
      });
      const entry = this.entryOfLoaded(lease.model);
      if (entry.source.kind !== "given") entry.lora = [...(entry.lora ?? []), { ...spec, path: file, name }];
      this.log.info({ model: lease.model.id, adapter: name, id, path: file }, "LoRA adapter loaded");
      return { id, base: lease.model };
    } finally {
      lease.release();
    }
  }

  /** `/v1/unload_lora_adapter`: unloads the adapter named `name` (requests running with it finish with it). */
  unloadAdapter(name: string): void {
    const found = this.adapterModel(name);
    if (!found) throw new RequestError("MODEL_NOT_FOUND", `The lora adapter '${name}' cannot be found.`, "lora_name");
    found.base.engine.unloadAdapter(name);
    const entry = this.entryOfLoaded(found.base);
    if (entry.lora) entry.lora = entry.lora.filter((a) => (a.name ?? modelIdFromPath(a.path)) !== name);
    this.log.info({ model: found.base.id, adapter: name }, "LoRA adapter unloaded");
  }

  /** llama-server's `POST /lora-adapters`: the scales requests naming no adapters get (kept across reloads). */
  async setAdapterScales(scales: LoraScale[]): Promise<void> {
    const lease = await this.adapterBase();
    try {
      lease.model.engine.setAdapterScales(scales);
      const entry = this.entryOfLoaded(lease.model);
      const now = lease.model.engine.adapters();
      if (entry.lora) entry.lora = entry.lora.map((a) => ({ ...a, scale: now.find((x) => x.name === (a.name ?? modelIdFromPath(a.path)))?.scale ?? a.scale }));
    } finally {
      lease.release();
    }
  }

  /** Unloads everything (shutdown). */
  async close(): Promise<void> {
    for (const e of this.entries.values()) clearTimeout(e.timer);
    await this.registry.unloadAll();
  }

  // --- names → entries ---

  /** The entry a request's model name picks: loaded, in the store, else the `-m` model; else 404. */
  private async find(name: string | null | undefined): Promise<Entry> {
    const fallback = this.defaultKey ? this.entries.get(this.defaultKey) : undefined;
    if (!name) {
      if (fallback) return fallback;
      if (!this.store || this.registry.list().length) return this.entryOfLoaded(this.registry.resolve(name));
      throw new RequestError("INVALID_REQUEST", "model is required", "model", "missing_required_parameter");
    }
    const loaded = this.registry.find(name);
    if (loaded) return this.entryOfLoaded(loaded);
    if (fallback && (name === fallback.id || name === `${fallback.id}:latest` || (fallback.source.kind === "path" && path.resolve(name) === fallback.source.path))) return fallback;
    if (!this.store) return this.entryOfLoaded(this.registry.resolve(name));
    const stored = await this.storeEntry(name, !!fallback);
    if (stored) return stored;
    if (fallback) return fallback;
    throw new RequestError("MODEL_NOT_FOUND", `model '${name}' not found, try pulling it first`, "model");
  }

  /** The store model `name` names, if the store has it. Paths are never loaded by name over the API. */
  private async storeEntry(name: string, lenient: boolean): Promise<Entry | undefined> {
    let located;
    try {
      located = await this.store!.locate(name);
    } catch (err) {
      if (lenient && err instanceof StoreError && err.code === "INVALID_NAME") return undefined;
      throw err;
    }
    if (located.kind !== "store") return undefined;
    const key = `store:${nameKey(located.name)}`;
    const known = this.entries.get(key);
    if (known?.model || known?.loading) return known;
    if (!(await this.store!.readManifest(located.name))) return undefined;
    return this.entry(key, formatName(located.name), { kind: "store", name: located.name });
  }

  private entry(key: string, id: string, source: Source): Entry {
    let e = this.entries.get(key);
    if (!e) {
      e = { id, source, refs: 0, defaultKeepAliveMs: this.keepAliveMs, keepAliveMs: this.keepAliveMs, expiresAt: Infinity, lastUsed: 0, size: 0 };
      this.entries.set(key, e);
    }
    return e;
  }

  private keyOf(source: Source, id: string): string {
    if (source.kind === "store") return `store:${nameKey(source.name)}`;
    return source.kind === "path" ? `path:${source.path}` : `given:${id}`;
  }

  /** The entry of a model in the registry; models this manager did not load are adopted as given. */
  private entryOfLoaded(model: ServedModel): Entry {
    for (const e of this.entries.values()) if (e.model === model) return e;
    const e = this.entry(`given:${model.id}`, model.id, { kind: "given" });
    e.model = model;
    e.size = estimateSize(model);
    e.defaultKeepAliveMs = e.keepAliveMs = Infinity;
    return e;
  }

  // --- load, release, unload ---

  private ensureLoaded(entry: Entry): Promise<ServedModel> {
    if (!entry.loading) {
      // One load at a time: each makes room for itself before the next one looks.
      const run = this.loadQueue.then(() => this.load(entry));
      this.loadQueue = run.catch(() => {});
      entry.loading = run.finally(() => (entry.loading = undefined));
    }
    return entry.loading;
  }

  private async load(entry: Entry): Promise<ServedModel> {
    if (entry.model) return entry.model;
    const started = performance.now();
    const src = entry.source;
    if (src.kind === "given") throw new RequestError("MODEL_NOT_FOUND", `model '${entry.id}' is no longer loaded`, "model");
    const resolved = src.kind === "store" ? await this.store!.resolve(src.name) : undefined;
    const modelPath = resolved?.modelPath ?? (src as { path: string }).path;
    const fileBytes = resolved?.size ?? (await fsp.stat(modelPath)).size;
    await this.makeRoom(entry, fileBytes);
    const profile = resolved ? profileOf(resolved) : undefined;
    const numCtx = resolved?.params.num_ctx;
    // A store model pulled with a vision projector loads it, when Wick reads that projector kind.
    const mmproj = entry.mmproj ?? (resolved?.projectorPath ? await this.pairedProjector(resolved.projectorPath, entry.id) : undefined);
    // The store model's ADAPTER layers first (scale 1), then the -m model's --lora flags and run-time loads.
    const lora: LoraAdapterSpec[] = [...(resolved?.adapterPaths ?? []).map((p) => ({ path: p })), ...(entry.lora ?? [])];
    let model: ServedModel;
    try {
      // Drafts by a draft model are the -m model's alone: other models load without them.
      const { speculative, ...defaults } = this.loadDefaults;
      const drafts = speculative?.method !== "draft" || entry.draftModel ? speculative : undefined;
      const loading = this.registry.load({
        ...defaults,
        ...(drafts ? { speculative: drafts } : {}),
        ...(typeof numCtx === "number" && numCtx > 0 ? { contextSize: numCtx } : {}),
        modelPath,
        ...(mmproj ? { mmproj } : {}),
        ...(entry.draftModel ? { draftModelPath: entry.draftModel } : {}),
        ...(lora.length ? { lora } : {}),
        id: entry.id,
        profile,
      });
      for (const f of this.onDispatch.splice(0)) f();
      model = await loading;
    } catch (err) {
      throw loraError(err);
    }
    entry.model = model;
    entry.size = estimateSize(model);
    entry.lastUsed = Date.now();
    this.log.info(
      {
        model: entry.id,
        device: model.info.device,
        ...(model.info.deviceNotice ? { deviceNotice: model.info.deviceNotice } : {}),
        // llama-server's "offloaded N/M layers": only when -ngl split the blocks.
        ...(model.info.deviceLayers !== undefined ? { offloaded: `${model.info.deviceLayers}/${model.info.nLayer} layers` } : {}),
        isa: cpuIsa(),
        architecture: model.info.architecture,
        contextSize: model.info.contextSize,
        bytes: entry.size,
        ...(model.info.packCache ? { packCache: model.info.packCache } : {}),
        ...(entry.draftModel ? { draftModel: entry.draftModel, speculative: model.info.speculative } : {}),
        ms: Math.round(performance.now() - started),
      },
      "model loaded",
    );
    return model;
  }

  /** The store's projector for a model, if it is one Wick loads (`clip.projector_type` lfm2); else none, logged. */
  private async pairedProjector(projector: string, id: string): Promise<string | undefined> {
    try {
      const kind: unknown = (await inspectModel(projector, { maxArrayLen: 0 })).metadata["clip.projector_type"];
      if (kind === "lfm2") return projector;
      this.log.warn({ model: id, projector: kind }, "vision projector not supported; serving the model without image input");
    } catch (err) {
      this.log.warn({ model: id, err: (err as Error).message }, "vision projector unreadable; serving the model without image input");
    }
    return undefined;
  }

  /** Evicts idle models (least recently used first) until `entry` fits the count and memory limits. */
  private async makeRoom(entry: Entry, bytes: number): Promise<void> {
    for (;;) {
      const others = [...this.entries.values()].filter((e) => e !== entry && e.model && e.source.kind !== "given");
      const overCount = others.length >= this.maxLoaded;
      const overMemory = bytes > this.freeMemory();
      if (!overCount && !overMemory) return;
      const idle = others.filter((e) => e.refs === 0 && !e.unloading).sort((a, b) => a.lastUsed - b.lastUsed);
      if (idle[0]) {
        await this.unloadEntry(idle[0], overCount ? "max loaded models reached" : "not enough free memory");
      } else if (!overCount) {
        this.log.warn({ model: entry.id, bytes, free: this.freeMemory() }, "loading although free memory looks short: every loaded model is busy");
        return;
      } else {
        await new Promise<void>((resolve) => this.waiters.push(resolve));
      }
    }
  }

  private release(entry: Entry): void {
    entry.refs = Math.max(0, entry.refs - 1);
    entry.lastUsed = Date.now();
    if (entry.refs === 0 && entry.model) this.startKeepAlive(entry);
    this.wake();
  }

  private startKeepAlive(entry: Entry): void {
    clearTimeout(entry.timer);
    const ms = entry.source.kind === "given" ? Infinity : entry.stale ? 0 : entry.keepAliveMs;
    entry.expiresAt = Date.now() + ms;
    if (ms === 0) {
      void this.unloadEntry(entry, "keep_alive 0");
    } else if (Number.isFinite(ms)) {
      // setTimeout holds at most ~24.8 days; a longer keep-alive re-arms when it fires.
      entry.timer = setTimeout(() => (Date.now() >= entry.expiresAt ? void this.unloadEntry(entry, "keep_alive expired") : this.startKeepAlive(entry)), Math.min(ms, 2 ** 31 - 1));
      entry.timer.unref();
    }
  }

  /** Unloads an idle entry once its engine has no sequence left (cancelled ones finish their step). */
  private unloadEntry(entry: Entry, why: string): Promise<void> {
    if (entry.unloading) return entry.unloading;
    const model = entry.model;
    if (!model || entry.refs > 0 || entry.source.kind === "given") return Promise.resolve();
    clearTimeout(entry.timer);
    entry.unloading = (async () => {
      await engineIdle(model);
      this.registry.remove(model.id);
      entry.model = undefined;
      entry.stale = false;
      try {
        await model.engine.unload();
      } catch (err) {
        this.log.error({ err, model: entry.id }, "unloading the model failed");
      }
      this.log.info({ model: entry.id, why }, "model unloaded");
    })().finally(() => {
      entry.unloading = undefined;
      this.wake();
    });
    return entry.unloading;
  }

  /**
   * Takes a model whose engine died out of service at once (its requests already failed with
   * ENGINE_DEAD; requests still holding it only see that error), so the caller loads it again.
   */
  private dropDead(entry: Entry): Promise<void> {
    if (entry.unloading) return entry.unloading;
    const model = entry.model!;
    this.log.error({ model: entry.id, reason: model.engine.health().reason }, "model engine died; reloading it");
    clearTimeout(entry.timer);
    this.registry.remove(model.id);
    entry.model = undefined;
    entry.unloading = model.engine
      .unload()
      .catch((err: unknown) => this.log.error({ err, model: entry.id }, "unloading the dead model failed"))
      .finally(() => {
        entry.unloading = undefined;
        this.wake();
      });
    return entry.unloading;
  }

  /** Loads waiting for a free slot look again. */
  private wake(): void {
    const waiting = this.waiters;
    this.waiters = [];
    waiting.forEach((w) => w());
  }
}

/** Resolves once the engine runs and queues nothing (a departed client's sequences end at the next step). */
async function engineIdle(model: ServedModel): Promise<void> {
  for (;;) {
    const m = model.engine.metrics();
    if (m.running === 0 && m.waiting === 0) return;
    await new Promise((r) => setTimeout(r, 10));
  }
}

/**
 * Weights (the file) plus the engine's KV pool (its tokens × the KV bytes a token takes, both
 * reported by the engine: conv layers hold none): what /api/ps reports and the budget counts.
 */
function estimateSize(model: ServedModel): number {
  const i = model.info;
  return i.fileSize + i.kvTokens * i.kvBytesPerToken;
}
