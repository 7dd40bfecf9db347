/**
 * Ollama's blob uploads, what `ollama create` does with a local GGUF: HEAD /api/blobs/:digest
 * says whether the store has a blob, POST streams one into it (hashed as it arrives, kept only
 * when the hash is the digest it was sent under), and /api/create's `files` names the uploaded
 * blobs, each read as a model or a vision projector from its GGUF header.
 */
import { MEDIA, readGgufHeader, StoreError, type Layer, type ModelStore } from "../store/index.ts";
import { RequestError } from "./errors.ts";

/** Ollama's digest spelling in URLs and `files`: sha256 then ":" or "-", then 64 hex digits. */
const DIGEST = /^sha256[:-]([0-9a-fA-F]{64})$/;

/** The store's spelling of a client's digest (sha256:<lowercase hex>); anything else is a 400. */
export function parseDigest(raw: string, param = "digest"): string {
  const m = DIGEST.exec(raw);
  if (!m) throw new RequestError("INVALID_REQUEST", `invalid digest ${JSON.stringify(raw)}: expected sha256:<64 hex digits>`, param);
  return `sha256:${m[1].toLowerCase()}`;
}

/** HEAD /api/blobs/:digest. */
export async function hasBlob(store: ModelStore, raw: string): Promise<boolean> {
  const digest = parseDigest(raw);
  return (await store.blobSize(digest)) !== null;
}

/**
 * POST /api/blobs/:digest: the body streamed into the store. "exists" when the store already
 * holds the blob (the body is left unread, as Ollama answers 200 without reading it). A body
 * whose sha256 is not the digest leaves nothing behind.
 */
export async function receiveBlob(store: ModelStore, raw: string, body: AsyncIterable<Uint8Array>): Promise<"created" | "exists"> {
  const digest = parseDigest(raw);
  if ((await store.blobSize(digest)) !== null) return "exists";
  try {
    await store.importBlob(body, { expectDigest: digest });
  } catch (err) {
    // The client sent other bytes than it named: its mistake, not the store's (a pull's mismatch is a 500).
    if (err instanceof StoreError && err.code === "DIGEST_MISMATCH") throw new RequestError("INVALID_REQUEST", `digest mismatch: ${err.message}`, "digest");
    throw err;
  }
  return "created";
}

/**
 * /api/create's `files` ({file name: digest}) → the layers a model is built on: exactly one
 * model GGUF, at most one projector. Checked before any progress is streamed, so each problem is
 * a 400 naming the file.
 */
export async function filesLayers(store: ModelStore, files: Record<string, string>): Promise<Layer[]> {
  const names = Object.keys(files).sort();
  if (!names.length) throw new RequestError("INVALID_REQUEST", "no files provided to create the model from", "files");
  const found = { model: [] as Layer[], projector: [] as Layer[] };
  for (const name of names) {
    const param = `files.${name}`;
    if (/\.safetensors$|\.bin$/i.test(name)) throw new StoreError("UNSUPPORTED", `${name}: only GGUF files can be imported; convert the checkpoint with \`wick convert\` first`);
    const digest = parseDigest(files[name], param);
    const size = await store.blobSize(digest);
    if (size === null) throw new RequestError("INVALID_REQUEST", `blob ${digest} (${name}) is not in the store: upload it first with POST /api/blobs/${digest}`, param);
    const kind = await ggufKind(store.blobPath(digest), name, param);
    found[kind].push({ mediaType: MEDIA[kind], digest, size });
  }
  if (found.model.length !== 1) {
    const why = found.model.length
      ? `${found.model.length} model files were given (split GGUF files are not supported: merge them with llama-gguf-split --merge)`
      : "only a vision projector was given";
    throw new RequestError("INVALID_REQUEST", `files must hold exactly one model GGUF: ${why}`, "files");
  }
  if (found.projector.length > 1) throw new RequestError("INVALID_REQUEST", `files may hold at most one vision projector; ${found.projector.length} were given`, "files");
  return [...found.model, ...found.projector];
}

/** A blob's role from its GGUF header; a LoRA adapter or a file that is not a GGUF is refused. */
async function ggufKind(file: string, name: string, param: string): Promise<"model" | "projector"> {
  let kind: string;
  try {
    kind = (await readGgufHeader(file)).kind;
  } catch (err) {
    if (err instanceof StoreError && err.code === "CORRUPT_MODEL") throw new RequestError("INVALID_REQUEST", `${name} is not a usable GGUF file: ${err.message.replace(file, "the file")}`, param);
    throw err;
  }
  if (kind === "adapter") throw new RequestError("INVALID_REQUEST", `${name} is a LoRA adapter: send it in 'adapters', not 'files'`, param);
  return kind === "projector" || kind === "mmproj" ? "projector" : "model";
}

/**
 * /api/create's `adapters` ({file name: digest}) → adapter layers: each an uploaded blob whose
 * GGUF header says LoRA adapter (its fit to the base is checked when the model is created).
 */
export async function adapterLayers(store: ModelStore, adapters: Record<string, string>): Promise<Layer[]> {
  const out: Layer[] = [];
  for (const name of Object.keys(adapters).sort()) {
    const param = `adapters.${name}`;
    if (/\.safetensors$|\.bin$/i.test(name)) throw new StoreError("UNSUPPORTED", `${name}: only GGUF LoRA adapters can be imported; convert a PEFT adapter to GGUF first`);
    const digest = parseDigest(adapters[name], param);
    const size = await store.blobSize(digest);
    if (size === null) throw new RequestError("INVALID_REQUEST", `blob ${digest} (${name}) is not in the store: upload it first with POST /api/blobs/${digest}`, param);
    let kind: string;
    try {
      kind = (await readGgufHeader(store.blobPath(digest))).kind;
    } catch (err) {
      if (err instanceof StoreError && err.code === "CORRUPT_MODEL")
        throw new RequestError("INVALID_REQUEST", `${name} is not a usable GGUF file: ${err.message.replace(store.blobPath(digest), "the file")}`, param);
      throw err;
    }
    if (kind !== "adapter") throw new RequestError("INVALID_REQUEST", `${name} is not a LoRA adapter (its general.type is ${JSON.stringify(kind)})`, param);
    out.push({ mediaType: MEDIA.adapter, digest, size });
  }
  return out;
}
