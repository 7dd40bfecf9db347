/**
 * Which files of a hub repo make the model: the GGUF for the quant asked for and the vision
 * projector (`mmproj*.gguf`) beside it. Quants are read from file names the way people name
 * them (`Model-Q4_K_M.gguf`, `model.Q4_K_M.gguf`, `gemma-UD-Q4_K_XL.gguf`, `q8_0`, shards
 * `…-00001-of-00003.gguf`, quant folders `Q4_K_M/…`) and matched case-insensitively.
 *
 * No quant asked for: Q4_K_M (llama.cpp's and Ollama's default), else the first present of
 * DEFAULT_ORDER, else the first GGUF by name. Split (sharded) GGUFs are refused with the list of
 * shards: the engine loads one file.
 */
import { StoreError } from "./errors.ts";

export interface HubFile {
  /** Path in the repo, e.g. `Q4_K_M/model-Q4_K_M.gguf`. */
  path: string;
  size: number;
  /** The LFS sha256 (64 hex), when the hub gave one. */
  sha256?: string;
}

export interface HubChoice {
  model: HubFile;
  projector?: HubFile;
  /** The chosen model file's quant as read from its name (upper case), or "" if none. */
  quant: string;
}

export const DEFAULT_QUANT = "Q4_K_M";
const DEFAULT_ORDER = ["Q4_K_M", "Q4_K_S", "Q4_0", "Q5_K_M", "Q5_K_S", "Q5_0", "Q6_K", "Q8_0", "IQ4_XS", "Q4_1", "Q3_K_M", "F16", "BF16", "F32"];

const QUANT_TOKEN = /^(I?Q\d(_[A-Z0-9]+)*|B?F(16|32)|FP(16|32)|TQ\d_\d|MXFP4)$/i;
const SHARD = /-(\d{5})-of-(\d{5})$/;

const baseName = (p: string) => p.slice(p.lastIndexOf("/") + 1);
const isGguf = (f: HubFile) => /\.gguf$/i.test(f.path);
export const isProjector = (f: HubFile) => /mmproj/i.test(baseName(f.path));
const isShard = (f: HubFile) => SHARD.test(baseName(f.path).replace(/\.gguf$/i, ""));

/** The quant named in a GGUF file name, upper-cased (`Llama-3.2-1B-Instruct-q4_k_m.gguf` → `Q4_K_M`). */
export function quantOf(filePath: string): string | undefined {
  const stem = baseName(filePath)
    .replace(/\.gguf$/i, "")
    .replace(SHARD, "");
  const tokens = stem.split(/[-.]/);
  for (let i = tokens.length - 1; i >= 0; i--) if (QUANT_TOKEN.test(tokens[i])) return tokens[i].toUpperCase();
  // A quant folder: Q4_K_M/model-00001-of-00002.gguf
  const dir = filePath.includes("/") ? filePath.slice(0, filePath.lastIndexOf("/")).split("/").at(-1)! : "";
  return QUANT_TOKEN.test(dir) ? dir.toUpperCase() : undefined;
}

const byPath = (a: HubFile, b: HubFile) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0);

/** Picks the model (and projector) file for `quant` from a repo listing; errors list what exists. */
export function pickFiles(repo: string, files: HubFile[], quant?: string): HubChoice {
  const ggufs = files.filter(isGguf).sort(byPath);
  const models = ggufs.filter((f) => !isProjector(f));
  if (models.length === 0) {
    const names = files.map((f) => f.path);
    const shown = names.slice(0, 12).join(", ") + (names.length > 12 ? `, … (${names.length} files)` : "");
    throw new StoreError("HUB_NO_GGUF", `hf.co/${repo} has no GGUF model files${names.length ? ` (it has: ${shown})` : " (it is empty)"}`);
  }
  const model = quant ? pickQuant(repo, models, quant) : pickDefault(repo, models);
  return { model, projector: pickProjector(ggufs), quant: quantOf(model.path) ?? "" };
}

function available(models: HubFile[]): string {
  const quants = [...new Set(models.map((f) => quantOf(f.path)).filter((q): q is string => !!q))].sort();
  const names = models.map((f) => f.path).join(", ");
  return quants.length ? `quants available: ${quants.join(", ")} (files: ${names})` : `files: ${names}`;
}

function pickQuant(repo: string, models: HubFile[], quant: string): HubFile {
  if (/\.gguf$/i.test(quant)) {
    const want = quant.toLowerCase();
    const hit = models.find((f) => f.path.toLowerCase() === want || baseName(f.path).toLowerCase() === want);
    if (!hit) throw new StoreError("HUB_QUANT_NOT_FOUND", `hf.co/${repo} has no file ${quant}; ${available(models)}`);
    return single(repo, [hit], models);
  }
  const want = quant.toUpperCase();
  let hits = models.filter((f) => quantOf(f.path) === want);
  if (hits.length === 0) {
    // Odd names: the quant as a whole token anywhere in the name.
    const re = new RegExp(`(^|[^A-Z0-9])${want.replace(/[^A-Z0-9_]/g, "")}([^A-Z0-9]|$)`);
    hits = models.filter((f) => re.test(f.path.toUpperCase()));
  }
  if (hits.length === 0) throw new StoreError("HUB_QUANT_NOT_FOUND", `hf.co/${repo} has no ${quant} GGUF; ${available(models)}`);
  return single(repo, hits, models);
}

function pickDefault(repo: string, models: HubFile[]): HubFile {
  for (const q of DEFAULT_ORDER) {
    const hits = models.filter((f) => quantOf(f.path) === q);
    if (hits.some((f) => !isShard(f))) return single(repo, hits, models);
  }
  return single(repo, models, models);
}

/** One loadable file out of matches: an unsharded one, else an error naming the shards. */
function single(repo: string, hits: HubFile[], models: HubFile[]): HubFile {
  const whole = hits.filter((f) => !isShard(f));
  if (whole.length) return whole[0];
  const shards = hits.map((f) => f.path).join(", ");
  throw new StoreError(
    "UNSUPPORTED",
    `hf.co/${repo}: that quant is split into shards (${shards}); Wick loads single-file GGUFs (merge them with llama-gguf-split --merge, or pick another quant: ${available(models)})`,
  );
}

/** The projector beside the model: F16 preferred, else the first by name. */
function pickProjector(ggufs: HubFile[]): HubFile | undefined {
  const projectors = ggufs.filter(isProjector);
  return projectors.find((f) => quantOf(f.path) === "F16") ?? projectors[0];
}
