/**
 * The model store as the native API uses it: list (/api/tags), create from a Modelfile or
 * Ollama's JSON fields, pull from the hub, copy and delete. Routes reach the store only
 * through here. Create and pull are split into a check (cheap, so a bad name, Modelfile or FROM
 * is an ordinary 4xx before any progress is streamed) and a run that reports progress. A model
 * re-created, re-pulled, copied over or deleted is unloaded once idle, so the next request
 * loads what the store now holds.
 */
import { createHash } from "node:crypto";
import { promises as fsp } from "node:fs";
import path from "node:path";
import {
  checkAdapter,
  readGgufHeader,
  humanCount,
  createModel,
  formatName,
  GoTemplate,
  parseModelfile,
  parseModelName,
  parseParameters,
  parseReference,
  StoreError,
  type HubRef,
  type ModelName,
  type ModelStore,
  type Modelfile,
  type PullProgress,
} from "../store/index.ts";
import type { CreateRequest } from "../schemas/ollama-models.ts";
import { adapterLayers, filesLayers } from "./blobs.ts";
import { RequestError } from "./errors.ts";
import type { ModelManager } from "./models.ts";
import type { OllamaModelDetails } from "./show.ts";

export type Progress = PullProgress;
/** A store operation checked and ready to run, reporting progress as it goes. */
export type Run = (emit: (p: Progress) => void) => Promise<void>;

export function requireStore(models: ModelManager): ModelStore {
  if (!models.store) throw new RequestError("NOT_IMPLEMENTED", "this server was started without a model store");
  return models.store;
}

/** The `model` of a body, or its older spelling `name`. */
export function bodyName(req: { model?: string | null; name?: string | null }): string {
  const name = req.model || req.name;
  if (!name) throw new RequestError("INVALID_REQUEST", "model is required", "model", "missing_required_parameter");
  return name;
}

export interface TagsModel {
  name: string;
  model: string;
  modified_at: string;
  size: number;
  digest: string;
  details: OllamaModelDetails;
}

/** GET /api/tags: the models served from files (`-m`), then every readable model in the store, newest first. */
export async function listTags(models: ModelManager): Promise<TagsModel[]> {
  const files = (await Promise.all(models.fileModels().map((m) => fileTag(m.id, m.path)))).filter((m) => m !== undefined);
  if (!models.store) return files;
  const listed = await models.store.list();
  const stored = listed
    .filter((m) => m.digest) // a manifest that does not parse has no digest: nothing to show
    .map((m) => ({
      name: m.name,
      model: m.name,
      modified_at: m.modifiedAt.toISOString(),
      size: m.size,
      digest: m.digest,
      details: { ...details(m.config?.model_family ?? "", m.config?.model_type ?? "", m.config?.file_type ?? ""), families: m.config?.model_families ?? [] },
    }));
  return [...files, ...stored];
}

const details = (family: string, parameterSize: string, quantization: string): OllamaModelDetails => ({
  parent_model: "",
  format: "gguf",
  family,
  families: family ? [family] : [],
  parameter_size: parameterSize,
  quantization_level: quantization,
});

/** A model served from a GGUF file, under its served name; details from the file's header. */
async function fileTag(id: string, file: string): Promise<TagsModel | undefined> {
  const stat = await fsp.stat(file).catch(() => null);
  if (!stat) return undefined;
  const h = await readGgufHeader(file).catch(() => undefined);
  return {
    name: id,
    model: id,
    modified_at: stat.mtime.toISOString(),
    size: stat.size,
    digest: await fileDigest(file, stat),
    details: details(h?.architecture ?? "", h ? humanCount(h.parameterCount) : "", h?.fileType ?? ""),
  };
}

/**
 * A file model's `digest`: the sha256 of its path, size and modification time, not of its bytes
 * (hashing gigabytes on every listing would be too slow); it changes when the file does.
 */
export async function fileDigest(file: string, known?: { size: number; mtimeMs: number }): Promise<string> {
  const stat = known ?? (await fsp.stat(file).catch(() => null));
  return createHash("sha256")
    .update(`${path.resolve(file)}\0${stat?.size ?? 0}\0${stat?.mtimeMs ?? 0}`)
    .digest("hex");
}

/** The stored model a name means (a hub model pulled before included); 404 when the store lacks it. */
export async function storedName(store: ModelStore, raw: string): Promise<ModelName> {
  const located = await store.locate(raw);
  if (located.kind === "path") throw new StoreError("INVALID_NAME", `invalid model name ${JSON.stringify(raw)}: a file path is not a model name`);
  if (located.kind === "store" && (await store.readManifest(located.name))) return located.name;
  throw new StoreError("MODEL_NOT_FOUND", `model '${raw}' not found`);
}

/** DELETE /api/delete: unloads the model when idle, then removes it and the blobs nothing else uses. */
export async function deleteModel(models: ModelManager, raw: string): Promise<void> {
  const store = requireStore(models);
  const name = await storedName(store, raw);
  await models.forget(name);
  await store.delete(name);
}

/** POST /api/copy: the same blobs under a second name. */
export async function copyModel(models: ModelManager, source: string, destination: string): Promise<void> {
  const store = requireStore(models);
  const dst = parseModelName(destination);
  const src = await storedName(store, source);
  await store.copy(src, dst);
  await models.forget(dst);
}

/** POST /api/pull: checks the reference; the run pulls it with Ollama's progress lines. */
export function planPull(models: ModelManager, raw: string): Run {
  requireStore(models);
  const hub = hubRef(raw);
  if (!models.hub) throw new RequestError("NOT_IMPLEMENTED", "this server was started without a hub client");
  return async (emit) => {
    const result = await models.hub!.pull(hub, emit);
    await models.forget(result.modelName);
  };
}

function hubRef(raw: string): HubRef {
  const ref = parseReference(raw);
  if (ref.kind === "hub") return ref.hub;
  if (ref.kind === "name" && ref.hub) return ref.hub;
  if (ref.kind === "path") throw new StoreError("INVALID_NAME", `invalid model name ${JSON.stringify(raw)}: a file path cannot be pulled`);
  throw new StoreError("UNSUPPORTED", `pulling '${raw}' from the Ollama library is not supported; pull GGUF models from Hugging Face: hf.co/<org>/<repo>[:QUANT] (or <org>/<repo>[:QUANT])`);
}

/**
 * POST /api/create: a Modelfile (`modelfile`) and/or Ollama's JSON fields → a checked Modelfile
 * and a run that writes the model. Checked here: the name, the Modelfile's grammar, the
 * TEMPLATE, the parameters' types, and that FROM exists (a file, a store model, or a hub
 * reference this server can pull) or that `files` name uploaded GGUF blobs.
 */
export async function planCreate(models: ModelManager, req: CreateRequest): Promise<Run> {
  const store = requireStore(models);
  const name = parseModelName(bodyName(req));
  if (req.quantize) throw new StoreError("UNSUPPORTED", "quantize is not supported by Wick; create from a GGUF that already has the quantization you want");
  // `from` wins over `files`, as in Ollama; `files` are blobs uploaded through /api/blobs.
  const baseLayers = !req.from && req.files && Object.keys(req.files).length ? await filesLayers(store, req.files) : undefined;
  const adapters = req.adapters && Object.keys(req.adapters).length ? await adapterLayers(store, req.adapters) : undefined;
  const mf = modelfileOf(req, baseLayers !== undefined);
  if (mf.adapters?.some((a) => !path.isAbsolute(a.path))) {
    throw new StoreError("INVALID_MODELFILE", "an ADAPTER path sent to the server must be absolute (the server cannot resolve it against your folder)");
  }
  if (mf.template !== undefined) GoTemplate.parse(mf.template);
  const baseFile = baseLayers ? store.blobPath(baseLayers[0].digest) : await checkFrom(models, store, mf);
  // Adapters are checked against the base before anything streams, so a wrong one is a 400.
  if (baseFile && (mf.adapters?.length || adapters?.length)) {
    const arch = (await readGgufHeader(baseFile)).architecture;
    for (const a of mf.adapters ?? []) {
      const at = `Modelfile (line ${a.line}): ADAPTER ${a.path}`;
      const stat = await fsp.stat(a.path).catch(() => null);
      if (!stat?.isFile()) throw new StoreError("FILE_NOT_FOUND", `${at}: no such file`);
      await checkAdapter(a.path, arch, at);
    }
    for (const l of adapters ?? []) await checkAdapter(store.blobPath(l.digest), arch, `adapters: blob ${l.digest}`);
  }
  return async (emit) => {
    await createModel(store, formatName(name), mf, { hub: models.hub, baseLayers, adapterLayers: adapters, onProgress: emit });
    await models.forget(name);
  };
}

function modelfileOf(req: CreateRequest, fromFiles: boolean): Modelfile {
  const mf: Modelfile = req.modelfile ? parseModelfile(req.modelfile) : { from: "", fromLine: 0, parameters: {}, messages: [], license: [], warnings: [] };
  if (req.from) {
    mf.from = req.from.trim();
    mf.fromLine = 0;
  }
  if (!mf.from && !fromFiles) throw new RequestError("INVALID_REQUEST", "neither 'from', 'files' nor 'modelfile' was given: say what to create the model from", "from");
  if (req.template != null) mf.template = req.template;
  if (req.system != null) mf.system = req.system;
  if (req.parameters) {
    const { parameters, warnings } = parseParameters(req.parameters);
    mf.parameters = { ...mf.parameters, ...parameters };
    mf.warnings.push(...warnings);
  }
  if (req.messages) mf.messages = req.messages.map((m) => ({ role: m.role, content: m.content }));
  if (req.license != null) mf.license = typeof req.license === "string" ? [req.license] : req.license;
  return mf;
}

/** Checks FROM; returns the base GGUF's file when it is already here (a path or a store model), for the adapters' check. */
async function checkFrom(models: ModelManager, store: ModelStore, mf: Modelfile): Promise<string | undefined> {
  const at = mf.fromLine > 0 ? `Modelfile (line ${mf.fromLine}): FROM ${mf.from}` : `from ${JSON.stringify(mf.from)}`;
  let located;
  try {
    located = await store.locate(mf.from, { baseDir: process.cwd() });
  } catch (err) {
    if (err instanceof StoreError) throw new StoreError(err.code === "INVALID_NAME" ? "INVALID_MODELFILE" : err.code, `${at}: ${err.message}`);
    throw err;
  }
  if (located.kind === "path") {
    // Over HTTP a relative (or ~) path would resolve against the server's own folders, which the
    // client neither knows nor should reach through `..`: only absolute paths (wick create sends one).
    if (!path.isAbsolute(mf.from)) {
      throw new StoreError("INVALID_MODELFILE", `${at}: a model file path sent to the server must be absolute (the server cannot resolve it against your folder)`);
    }
    const stat = await fsp.stat(located.path).catch(() => null);
    if (!stat?.isFile()) throw new StoreError("FILE_NOT_FOUND", `${at}: no such file`);
    // The client's file, not the store, is what is wrong: a 400 before any copying starts.
    await readGgufHeader(located.path).catch((err: unknown) => {
      if (err instanceof StoreError && err.code === "CORRUPT_MODEL") throw new StoreError("INVALID_MODELFILE", `${at}: ${err.message.replace(located.path, "the file")}`);
      throw err;
    });
    return located.path;
  } else if (located.kind === "store") {
    if (!(await store.readManifest(located.name))) throw new StoreError("MODEL_NOT_FOUND", `${at}: model '${formatName(located.name)}' not found (and it is not a path to a .gguf file)`);
    return (await store.resolve(located.name)).modelPath;
  } else if (!models.hub) {
    throw new StoreError("MODEL_NOT_FOUND", `${at}: model '${formatName(located.name)}' is not in the store; pull it first`);
  }
  return undefined;
}
