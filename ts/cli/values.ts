/**
 * Parsers for flag values. Each throws commander's InvalidArgumentError with a short reason;
 * commander prefixes the flag and the value, so the user sees one line naming both.
 */
import { existsSync, statSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { InvalidArgumentError } from "commander";
import { DEVICES, isDevice } from "../engine/addon.ts";
import { keepAliveMs } from "../service/keep-alive.ts";
import type { SpeculativeConfig } from "../service/speculation.ts";
import { parseReference } from "../store/reference.ts";

export function integer(min: number, max = Number.MAX_SAFE_INTEGER, what = `an integer >= ${min}`) {
  return (raw: string): number => {
    const n = /^-?\d+$/.test(raw.trim()) ? Number(raw) : NaN;
    if (!Number.isSafeInteger(n) || n < min || n > max) throw new InvalidArgumentError(`Expected ${what}.`);
    return n;
  };
}

export const positiveInt = integer(1, Number.MAX_SAFE_INTEGER, "a positive integer");
export const port = integer(0, 65535, "a port number from 0 to 65535");

export function choice(values: readonly string[]) {
  return (raw: string): string => {
    if (!values.includes(raw)) throw new InvalidArgumentError(`Expected one of: ${values.join(", ")}.`);
    return raw;
  };
}

export function nonEmpty(raw: string): string {
  if (!raw.trim()) throw new InvalidArgumentError("Expected a non-empty value.");
  return raw;
}

/** A fraction in (0, 1], e.g. --gpu-memory-utilization. */
export function fraction(raw: string): number {
  const n = Number(raw);
  if (!raw.trim() || !Number.isFinite(n) || n <= 0 || n > 1) throw new InvalidArgumentError("Expected a number in (0, 1].");
  return n;
}

/** A number in [min, max] (a float flag such as --temp or --top-p); `above` makes min exclusive. */
export function number(min: number, max = Infinity, opts: { above?: boolean } = {}) {
  const what = max === Infinity ? `a number ${opts.above ? ">" : ">="} ${min}` : `a number from ${min} to ${max}`;
  return (raw: string): number => {
    const n = raw.trim() ? Number(raw) : NaN;
    if (!Number.isFinite(n) || n < min || n > max || (opts.above && n === min)) throw new InvalidArgumentError(`Expected ${what}.`);
    return n;
  };
}

/** -ngl: a layer count, or llama-server's `auto` / `all` (all = 99, auto = -1). */
export function gpuLayers(raw: string): number {
  if (raw === "all") return 99;
  if (raw === "auto") return -1;
  return integer(-1, Number.MAX_SAFE_INTEGER, "an integer, auto or all")(raw);
}

/** `--device`: auto, cpu, cuda, cuda:N, metal or cpu-candle (the engine's DeviceChoice). */
export function device(raw: string): string {
  const d = raw.trim().toLowerCase();
  if (!isDevice(d)) throw new InvalidArgumentError(`Expected one of ${DEVICES.join(", ")} (N a device number).`);
  return d;
}

/** A value that is a file path rather than a model name: it ends in .gguf, or starts like a path. */
const pathLike = (raw: string) => /\.gguf$/i.test(raw) || /^(\/|\.{1,2}\/|~)/.test(raw);

/** An existing file (--image, --mmproj), resolved to an absolute path. */
export function existingFile(raw: string): string {
  const p = path.resolve(raw.startsWith("~/") ? path.join(os.homedir(), raw.slice(2)) : raw);
  if (!existsSync(p)) throw new InvalidArgumentError("No such file.");
  if (!statSync(p).isFile()) throw new InvalidArgumentError(`${raw} is not a file.`);
  return p;
}

/** -hf / --hf-repo: `org/repo[:QUANT]`, with or without `hf.co/`; always read as a hub reference. */
export function hubRepo(raw: string): string {
  const ref = /^(https?:\/\/)?(www\.)?(hf\.co|huggingface\.co)\//i.test(raw) ? raw : `hf.co/${raw}`;
  let kind: string;
  try {
    kind = parseReference(ref).kind;
  } catch (err) {
    throw new InvalidArgumentError(`${(err as Error).message}.`);
  }
  if (kind !== "hub") throw new InvalidArgumentError("Expected a hub repository, org/repo[:QUANT].");
  return ref;
}

/**
 * A model named on a client command (run, pull, rm, …): a store name or hub reference, checked
 * for syntax here; the server says whether it exists.
 */
export function modelName(raw: string): string {
  try {
    parseReference(raw);
  } catch (err) {
    throw new InvalidArgumentError(`${(err as Error).message}.`);
  }
  return raw;
}

/**
 * `serve -m`: a local GGUF file (resolved to an absolute path), or a store name (`lfm2:350m`) or
 * hub reference (`hf.co/org/repo:Q4_K_M`, `org/repo`), checked for syntax here and looked up
 * in the store (or pulled) when the server starts.
 */
export function modelRef(raw: string): string {
  if (pathLike(raw)) return modelPath(raw);
  try {
    parseReference(raw);
  } catch (err) {
    throw new InvalidArgumentError(`${(err as Error).message}.`);
  }
  return raw;
}

/** A local GGUF file, resolved to an absolute path. */
export function modelPath(raw: string): string {
  const p = path.resolve(raw);
  if (existsSync(p)) {
    if (!statSync(p).isFile()) throw new InvalidArgumentError(`${raw} is not a file.`);
    return p;
  }
  throw new InvalidArgumentError("No such file.");
}

/** `convert --outfile`: a path whose directory exists (resolved to an absolute path). */
export function outfile(raw: string): string {
  const p = path.resolve(raw);
  const dir = path.dirname(p);
  if (!existsSync(dir) || !statSync(dir).isDirectory()) throw new InvalidArgumentError(`No such directory: ${dir}.`);
  if (existsSync(p) && statSync(p).isDirectory()) throw new InvalidArgumentError("Is a directory (expected a file name).");
  return p;
}

/** `convert <dir>`: an existing directory (resolved to an absolute path). */
export function modelDir(raw: string): string {
  const p = path.resolve(raw);
  if (!existsSync(p)) throw new InvalidArgumentError("No such directory.");
  if (!statSync(p).isDirectory()) throw new InvalidArgumentError("Not a directory (expected a Hugging Face model directory).");
  return p;
}

/**
 * `show <model>` and `run <model>`: a file that exists or a value that looks like a path (read
 * locally, an absolute path comes back), else a store name or hub reference (asked of the server).
 */
export function modelOrPath(raw: string): string {
  if (existsSync(path.resolve(raw)) || pathLike(raw)) return modelPath(raw);
  return modelName(raw);
}

/** --keep-alive: a duration ("5m", "1h30m"), seconds, a negative value (forever) or 0; → ms. */
export function keepAlive(raw: string): number {
  try {
    return keepAliveMs(raw, "value");
  } catch {
    throw new InvalidArgumentError('Expected a duration such as "5m", "1h30m" or "300ms", a number of seconds, a negative value (forever) or 0.');
  }
}

/** WICK_HOST: `host:port`, `host`, `:port` or `[v6]:port` (Ollama's OLLAMA_HOST forms, minus the scheme). */
export function hostPort(raw: string): { host?: string; port?: number } {
  const s = raw.replace(/^https?:\/\//, "").replace(/\/+$/, "");
  const m = /^(\[[^\]]+\]|[^:]*)(?::(\d+))?$/.exec(s);
  if (!m) throw new InvalidArgumentError("Expected host:port.");
  const host = m[1].replace(/^\[|\]$/g, "");
  return { ...(host ? { host } : {}), ...(m[2] !== undefined ? { port: port(m[2]) } : {}) };
}

/** A LoRA adapter from the serve flags: its file, the scale requests naming no adapters get, and its model id (`--lora-modules`). */
export interface LoraFlag {
  path: string;
  scale: number;
  name?: string;
}

/** `--lora FNAME[,FNAME…]` (llama-server): adapters at scale 1. */
export function loraFiles(raw: string): LoraFlag[] {
  const files = raw.split(",").filter((f) => f.trim());
  if (!files.length) throw new InvalidArgumentError("Expected a LoRA adapter file.");
  return files.map((f) => ({ path: existingFile(f.trim()), scale: 1 }));
}

/** `--lora-scaled FNAME:SCALE[,FNAME:SCALE…]` (llama-server's form): adapters at their own scales. */
export function loraScaled(raw: string): LoraFlag[] {
  return raw
    .split(",")
    .filter((item) => item.trim())
    .map((item) => {
      const at = item.lastIndexOf(":");
      const scale = at > 0 ? Number(item.slice(at + 1)) : NaN;
      if (at <= 0 || !item.slice(at + 1).trim() || !Number.isFinite(scale)) throw new InvalidArgumentError(`Expected FNAME:SCALE (a file and a number), got ${JSON.stringify(item)}.`);
      return { path: existingFile(item.slice(0, at).trim()), scale };
    });
}

/**
 * `--lora-modules name=path` (vLLM), or vLLM's JSON form `{"name": …, "path": …}`: an adapter
 * served as the model `name`. As in vLLM, requests naming the base model do not get it (scale 0).
 */
export function loraModule(raw: string): LoraFlag[] {
  let name: unknown;
  let file: unknown;
  if (raw.trim().startsWith("{")) {
    try {
      ({ name, path: file } = JSON.parse(raw) as { name?: unknown; path?: unknown });
    } catch {
      throw new InvalidArgumentError('Expected name=path or {"name": "…", "path": "…"} (the JSON does not parse).');
    }
  } else {
    const eq = raw.indexOf("=");
    [name, file] = eq > 0 ? [raw.slice(0, eq).trim(), raw.slice(eq + 1).trim()] : [undefined, undefined];
  }
  if (typeof name !== "string" || !name || typeof file !== "string" || !file) throw new InvalidArgumentError('Expected name=path or {"name": "…", "path": "…"}.');
  return [{ path: existingFile(file), scale: 0, name }];
}

/** vLLM's `--speculative-config` JSON: the `ngram` method and its sizes (draft models are not served). */
export function speculativeConfig(raw: string): SpeculativeConfig {
  let v: unknown;
  try {
    v = JSON.parse(raw);
  } catch {
    throw new InvalidArgumentError('Expected JSON such as {"method": "ngram", "num_speculative_tokens": 8}.');
  }
  if (typeof v !== "object" || v === null || Array.isArray(v)) throw new InvalidArgumentError("Expected a JSON object.");
  const o = v as Record<string, unknown>;
  // vLLM names a draft model by `model` (its method then defaults to a draft model).
  const draft = o.model !== undefined && (o.method === undefined || o.method === "draft_model");
  if (!draft && o.method !== "ngram") throw new InvalidArgumentError(`Wick serves the "ngram" method and draft models ({"model": "draft.gguf"}); got method ${JSON.stringify(o.method)}.`);
  if (draft && (typeof o.model !== "string" || !o.model.trim())) throw new InvalidArgumentError('"model" must name a GGUF file.');
  const known = draft ? ["method", "model", "num_speculative_tokens"] : ["method", "num_speculative_tokens", "prompt_lookup_min", "prompt_lookup_max"];
  const other = Object.keys(o).find((k) => !known.includes(k));
  if (other) throw new InvalidArgumentError(`Unknown key ${JSON.stringify(other)}; Wick reads ${known.join(", ")}.`);
  const size = (key: string, min: number): number | undefined => {
    const n = o[key];
    if (n === undefined) return undefined;
    if (typeof n !== "number" || !Number.isInteger(n) || n < min || n > 64) throw new InvalidArgumentError(`${key} must be an integer from ${min} to 64.`);
    return n;
  };
  const k = size("num_speculative_tokens", 0);
  if (draft) return { method: "draft_model", model: existingFile(o.model as string), ...(k !== undefined ? { num_speculative_tokens: k } : {}) };
  const out: SpeculativeConfig = { method: "ngram" };
  const lo = size("prompt_lookup_min", 1);
  const hi = size("prompt_lookup_max", 1);
  if (lo !== undefined && hi !== undefined && lo > hi) throw new InvalidArgumentError("prompt_lookup_min is over prompt_lookup_max.");
  if (k !== undefined) out.num_speculative_tokens = k;
  if (lo !== undefined) out.prompt_lookup_min = lo;
  if (hi !== undefined) out.prompt_lookup_max = hi;
  return out;
}
