/**
 * `create`: a parsed Modelfile → blobs + manifest, as `ollama create` does. FROM is a GGUF file
 * (copied in, hashed while copying), a store model (its layers reused, its template, system,
 * params, messages and license inherited unless the Modelfile sets them; params merged key by
 * key), or a hub reference (pulled first when a HubClient is given). The manifest is written
 * last: a failure anywhere leaves no model under the new name.
 */
import { promises as fsp } from "node:fs";
import path from "node:path";
import { manifestFor } from "./config.ts";
import { StoreError } from "./errors.ts";
import { readGgufHeader } from "./gguf-header.ts";
import type { HubClient, ProgressFn } from "./hub.ts";
import { MEDIA, type Layer } from "./manifest.ts";
import { parseModelfile, type Modelfile } from "./modelfile.ts";
import { formatName, parseModelName, type ModelName } from "./reference.ts";
import type { ModelStore } from "./store.ts";

export interface CreateOptions {
  /** Where relative FROM paths start (the Modelfile's folder); default the working directory. */
  baseDir?: string;
  /** Pulls a hub FROM that is not in the store yet; without it such a FROM is an error. */
  hub?: HubClient;
  /**
   * Layers already in the store to build on instead of FROM (uploaded blobs, Ollama's `files`):
   * the model layer first, a projector after it.
   */
  baseLayers?: Layer[];
  /** LoRA adapter layers already in the store (Ollama's `adapters`), added after the Modelfile's ADAPTERs. */
  adapterLayers?: Layer[];
  onProgress?: ProgressFn;
}

export interface CreateResult {
  name: string;
  modelName: ModelName;
  /** Manifest digest, sha256:<hex>. */
  digest: string;
}

/** The layer kinds a Modelfile can set, in the order they go into the manifest after the model. */
const TEXT_LAYERS = [MEDIA.template, MEDIA.system, MEDIA.params, MEDIA.messages, MEDIA.license] as const;

export async function createModel(store: ModelStore, name: string, modelfile: Modelfile | string, opts: CreateOptions = {}): Promise<CreateResult> {
  const emit = opts.onProgress ?? (() => {});
  const target = parseModelName(name);
  const mf = typeof modelfile === "string" ? parseModelfile(modelfile) : modelfile;
  emit({ status: "gathering model components" });
  // Every blob this create touches stays pinned (safe from a concurrent delete's cleanup) until the manifest is written.
  const pins: (() => void)[] = [];
  const pin = (digests: string[]) => pins.push(store.pin(digests));
  try {
    return await build(store, target, mf, opts, emit, pin);
  } finally {
    pins.forEach((release) => release());
  }
}

async function build(store: ModelStore, target: ModelName, mf: Modelfile, opts: CreateOptions, emit: ProgressFn, pin: (d: string[]) => void): Promise<CreateResult> {
  const { base, baseParams, modelFile } = await fromLayers(store, mf, opts, emit);
  pin(base.map((l) => l.digest));
  const own = new Map<string, Layer[]>();
  const add = async (mediaType: string, data: string) => {
    const blob = await store.importBytes(data);
    pin([blob.digest]);
    emit({ status: `creating new layer ${blob.digest}` });
    own.set(mediaType, [...(own.get(mediaType) ?? []), { mediaType, ...blob }]);
  };
  if (mf.template !== undefined) await add(MEDIA.template, mf.template);
  if (mf.system !== undefined) await add(MEDIA.system, mf.system);
  if (Object.keys(mf.parameters).length) await add(MEDIA.params, sortedJson({ ...baseParams, ...mf.parameters }));
  if (mf.messages.length) await add(MEDIA.messages, JSON.stringify(mf.messages));
  for (const l of mf.license) await add(MEDIA.license, l);

  // LoRA adapters: each checked against the base's architecture, then stored as an adapter layer.
  const adapters: Layer[] = [];
  if (mf.adapters?.length || opts.adapterLayers?.length) {
    const arch = (await readGgufHeader(modelFile)).architecture;
    for (const a of mf.adapters ?? []) {
      const at = `Modelfile (line ${a.line}): ADAPTER ${a.path}`;
      const file = path.resolve(opts.baseDir ?? process.cwd(), a.path.replace(/^~(?=\/|$)/, process.env.HOME ?? "~"));
      const stat = await fsp.stat(file).catch(() => null);
      if (!stat?.isFile()) throw new StoreError("FILE_NOT_FOUND", `${at}: no such file ${file}`);
      await checkAdapter(file, arch, at);
      emit({ status: `copying adapter ${file}` });
      const blob = await store.importBlob(file);
      pin([blob.digest]);
      adapters.push({ mediaType: MEDIA.adapter, ...blob });
    }
    for (const l of opts.adapterLayers ?? []) {
      await checkAdapter(store.blobPath(l.digest), arch, `adapter ${l.digest}`);
      adapters.push(l);
    }
  }

  // The base's model/projector (and adapter) layers first, then the new adapters, then each text kind: the Modelfile's, else the base's.
  const layers: Layer[] = [...base.filter((l) => !(TEXT_LAYERS as readonly string[]).includes(l.mediaType)), ...adapters];
  for (const kind of TEXT_LAYERS) layers.push(...(own.get(kind) ?? base.filter((l) => l.mediaType === kind)));
  for (const l of layers) if (!own.has(l.mediaType)) emit({ status: `using existing layer ${l.digest}` });

  emit({ status: "writing manifest" });
  const manifest = await manifestFor(store, modelFile, layers);
  pin([manifest.config.digest]);
  const digest = await store.writeManifest(target, manifest);
  emit({ status: "success" });
  return { name: formatName(target), modelName: target, digest };
}

/** The layers FROM brings, the params it had, and the GGUF file the config is read from. */
async function fromLayers(store: ModelStore, mf: Modelfile, opts: CreateOptions, emit: ProgressFn): Promise<{ base: Layer[]; baseParams: Record<string, unknown>; modelFile: string }> {
  if (opts.baseLayers?.length) {
    emit({ status: "parsing GGUF" });
    return { base: opts.baseLayers, baseParams: {}, modelFile: store.blobPath(opts.baseLayers[0].digest) };
  }
  // fromLine 0: FROM came as the `from` field of an API request, not from a Modelfile line.
  const at = mf.fromLine > 0 ? `Modelfile (line ${mf.fromLine}): FROM ${mf.from}` : `from ${JSON.stringify(mf.from)}`;
  let located;
  try {
    located = await store.locate(mf.from, { baseDir: opts.baseDir });
  } catch (err) {
    throw new StoreError("INVALID_MODELFILE", `${at}: ${(err as Error).message}`);
  }
  if (located.kind === "path") {
    const stat = await fsp.stat(located.path).catch(() => null);
    if (!stat?.isFile()) throw new StoreError("FILE_NOT_FOUND", `${at}: no such file ${located.path}`);
    await readGgufHeader(located.path); // not a GGUF: fail before copying gigabytes
    emit({ status: `copying file ${located.path}` });
    const blob = await store.importBlob(located.path);
    return { base: [{ mediaType: MEDIA.model, ...blob }], baseParams: {}, modelFile: store.blobPath(blob.digest) };
  }
  let source: ModelName = located.name;
  if (located.kind === "hub") {
    if (!(await store.readManifest(located.name))) {
      if (!opts.hub) throw new StoreError("MODEL_NOT_FOUND", `${at}: model '${formatName(located.name)}' is not in the store; pull it first`);
      source = (await opts.hub.pull(located.hub, emit)).modelName;
    }
  }
  const resolved = await store.resolve(source).catch((err: unknown) => {
    if (err instanceof StoreError && err.code === "MODEL_NOT_FOUND") {
      throw new StoreError("MODEL_NOT_FOUND", `${at}: model '${formatName(source)}' not found (and it is not a path to a .gguf file)`);
    }
    throw err;
  });
  return { base: resolved.manifest.layers, baseParams: resolved.params, modelFile: resolved.modelPath };
}

/** A LoRA adapter must be a GGUF adapter made for the base's architecture (its shapes are checked when it loads). */
export async function checkAdapter(file: string, baseArch: string, at: string): Promise<void> {
  let header;
  try {
    header = await readGgufHeader(file);
  } catch (err) {
    throw new StoreError("INVALID_MODELFILE", `${at}: not a GGUF LoRA adapter: ${(err as Error).message.replace(file, "the file")}`);
  }
  if (header.kind !== "adapter")
    throw new StoreError("INVALID_MODELFILE", `${at}: not a LoRA adapter (its general.type is ${JSON.stringify(header.kind)}; a GGUF adapter as llama.cpp writes it is needed)`);
  if (header.architecture !== baseArch) throw new StoreError("INVALID_MODELFILE", `${at}: LoRA adapter made for a \`${header.architecture}\` model, the base model is \`${baseArch}\``);
}

/** JSON with sorted keys, as Go marshals a map: the same parameters give the same blob. */
function sortedJson(o: Record<string, unknown>): string {
  return JSON.stringify(
    Object.fromEntries(
      Object.keys(o)
        .sort()
        .map((k) => [k, o[k]]),
    ),
  );
}
