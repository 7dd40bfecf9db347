/**
 * Model references as users type them, parsed into what the store and the hub client act on:
 *
 * - a local GGUF file: `./x.gguf`, `../x.gguf`, `/abs/x.gguf`, `~/x.gguf`, or any `name.gguf`
 *   with no tag (a local path must end in `.gguf`: Wick loads nothing else, and the rule keeps
 *   `../x` or `/abs` from being taken as a path when a store name was meant);
 * - a hub model: `hf.co/org/repo[:QUANT]` (or `huggingface.co/…`), stored under host `hf.co`
 *   with the quant as the tag, `latest` when none is given (as Ollama stores HF pulls);
 * - a store name in Ollama's grammar `[host/][namespace/]model[:tag]` (types/model/name.go):
 *   host `registry.ollama.ai`, namespace `library` and tag `latest` by default; model, tag and
 *   namespace 1–80 characters, host 1–350; a part starts with a letter, digit or `_`, then
 *   letters, digits, `_`, `-`, `.` (no `.` in a namespace, `:` only in a host's port).
 *
 * `org/repo[:tag]` (two parts, no host) is both a store name and llama.cpp's `-hf` shorthand.
 * The rule: it is the store model `registry.ollama.ai/org/repo:tag` when the store has it,
 * else the hub repo `hf.co/org/repo` with the tag as the quant. `parseReference` returns both
 * readings (`name` and `hub`) and the store picks (ModelStore.locate).
 *
 * Names never escape the store: `..`, absolute paths, NUL, backslashes and empty parts are
 * rejected with an error that names the offending part.
 */
import os from "node:os";
import path from "node:path";
import { StoreError } from "./errors.ts";

export const OLLAMA_REGISTRY_HOST = "registry.ollama.ai";
export const DEFAULT_NAMESPACE = "library";
export const DEFAULT_TAG = "latest";
/** Where hub models are stored; `huggingface.co` is an alias of it. */
export const HUB_HOST = "hf.co";
const HUB_ALIASES = new Set(["hf.co", "huggingface.co", "www.huggingface.co"]);

/** A fully qualified store name; every part valid and filled. */
export interface ModelName {
  host: string;
  namespace: string;
  model: string;
  tag: string;
}

/** A hub repository and the quant (or `.gguf` file name) asked for, as typed. */
export interface HubRef {
  /** `org/repo` */
  repo: string;
  /** undefined = the default choice (Q4_K_M, see hub-files.ts). */
  quant?: string;
}

export type ModelReference =
  | { kind: "path"; path: string }
  /** `hub` is set for the two-part `org/repo[:tag]` form: the hub reading if the store lacks the name. */
  | { kind: "name"; name: ModelName; hub?: HubRef }
  | { kind: "hub"; name: ModelName; hub: HubRef };

type PartKind = "host" | "namespace" | "model" | "tag";
const MAX_LEN: Record<PartKind, number> = { host: 350, namespace: 80, model: 80, tag: 80 };

const invalid = (raw: string, why: string) => new StoreError("INVALID_NAME", `invalid model name ${JSON.stringify(raw)}: ${why}`);

/** Checks one part against Ollama's character rules; throws naming the part and the problem. */
function checkPart(raw: string, kind: PartKind, part: string): void {
  if (part === "") throw invalid(raw, `the ${kind} is empty`);
  if (part === "." || part.includes("..")) throw invalid(raw, `".." and "." are not allowed in the ${kind}`);
  if (part.length > MAX_LEN[kind]) throw invalid(raw, `the ${kind} is ${part.length} characters long; at most ${MAX_LEN[kind]} are allowed`);
  if (!/^[A-Za-z0-9_]/.test(part)) throw invalid(raw, `the ${kind} ${JSON.stringify(part)} must start with a letter, digit or "_"`);
  for (const c of part.slice(1)) {
    if (/[A-Za-z0-9_-]/.test(c)) continue;
    if (c === "." && kind !== "namespace") continue;
    if (c === ":" && kind === "host") continue;
    throw invalid(raw, `the character ${JSON.stringify(c)} is not allowed in the ${kind} ${JSON.stringify(part)}`);
  }
}

/** Rejections that apply to the whole string before it is split. */
function checkWhole(raw: string): void {
  if (raw.trim() === "") throw invalid(raw, "the name is empty");
  if (raw.includes("\0")) throw invalid(raw, "it contains a NUL byte");
  if (raw.includes("\\")) throw invalid(raw, "backslashes are not allowed");
  if (raw.startsWith("/")) throw invalid(raw, "a name cannot be an absolute path (a local model file must end in .gguf)");
  if (/(^|\/)\.\.(\/|$|:)/.test(raw)) throw invalid(raw, `".." is not allowed (a local model file must end in .gguf)`);
  if (/\s/.test(raw)) throw invalid(raw, "whitespace is not allowed");
}

interface BareName {
  host?: string;
  namespace?: string;
  model: string;
  tag?: string;
}

/** Splits `[scheme://][host/][namespace/]model[:tag]` the way Ollama's ParseNameBare does. */
function splitName(raw: string): BareName {
  checkWhole(raw);
  let s = raw.replace(/^https?:\/\//, "");
  let tag: string | undefined;
  if (s.lastIndexOf(":") > s.lastIndexOf("/")) {
    tag = s.slice(s.lastIndexOf(":") + 1);
    s = s.slice(0, s.lastIndexOf(":"));
    if (tag === "") throw invalid(raw, "the tag after ':' is empty");
  }
  const parts = s.split("/");
  if (parts.length > 3) throw invalid(raw, `too many "/"-separated parts (at most host/namespace/model)`);
  const [model, namespace, host] = parts.reverse();
  const bare: BareName = { model, namespace, host, tag };
  for (const kind of ["host", "namespace", "model", "tag"] as const) {
    const part = bare[kind];
    if (part !== undefined) checkPart(raw, kind, part);
  }
  return bare;
}

/** A store name with Ollama's defaults filled in; throws INVALID_NAME. Paths and hub aliases are not special here. */
export function parseModelName(raw: string): ModelName {
  const b = splitName(raw);
  const host = b.host && HUB_ALIASES.has(b.host.toLowerCase()) ? HUB_HOST : b.host;
  return {
    host: host ?? OLLAMA_REGISTRY_HOST,
    namespace: b.namespace ?? DEFAULT_NAMESPACE,
    model: b.model,
    tag: b.tag ?? DEFAULT_TAG,
  };
}

/** True for what is a local file path rather than a name (see the module comment). */
export function looksLikePath(raw: string): boolean {
  if (/^(\/|\.{1,2}\/|~\/)/.test(raw)) return /\.gguf$/i.test(raw);
  return /\.gguf$/i.test(raw) && !raw.includes(":") && !raw.includes("/");
}

/** Parses any reference; `baseDir` resolves relative paths (default: the working directory). */
export function parseReference(raw: string, opts: { baseDir?: string } = {}): ModelReference {
  if (raw.includes("\0")) throw invalid(raw, "it contains a NUL byte");
  if (looksLikePath(raw)) {
    const expanded = raw.startsWith("~/") ? path.join(os.homedir(), raw.slice(2)) : raw;
    return { kind: "path", path: path.resolve(opts.baseDir ?? process.cwd(), expanded) };
  }
  if (/^(https?:\/\/)?(www\.)?(hf\.co|huggingface\.co)\/[^/]*$/i.test(raw)) {
    throw invalid(raw, "a hub reference needs both the owner and the repository (hf.co/org/repo)");
  }
  const b = splitName(raw);
  if (b.host && HUB_ALIASES.has(b.host.toLowerCase())) {
    if (!b.namespace) throw invalid(raw, "a hub reference needs both the owner and the repository (hf.co/org/repo)");
    return {
      kind: "hub",
      hub: hubRef(b.namespace, b.model, b.tag),
      name: { host: HUB_HOST, namespace: b.namespace, model: b.model, tag: b.tag ?? DEFAULT_TAG },
    };
  }
  const name = parseModelName(raw);
  if (!b.host && b.namespace) return { kind: "name", name, hub: hubRef(b.namespace, b.model, b.tag) };
  return { kind: "name", name };
}

const hubRef = (owner: string, repo: string, quant: string | undefined): HubRef => (quant ? { repo: `${owner}/${repo}`, quant } : { repo: `${owner}/${repo}` });

/**
 * Ollama's DisplayShortest: the host and namespace are left out when they are the defaults,
 * the tag is always there (`llama3:latest`, `me/x:1b`, `hf.co/org/repo:Q4_K_M`).
 */
export function formatName(n: ModelName): string {
  let prefix = "";
  if (n.host.toLowerCase() !== OLLAMA_REGISTRY_HOST) prefix = `${n.host}/${n.namespace}/`;
  else if (n.namespace.toLowerCase() !== DEFAULT_NAMESPACE) prefix = `${n.namespace}/`;
  return `${prefix}${n.model}:${n.tag}`;
}

/** The full name, lower-cased: names compare case-insensitively (Ollama's EqualFold). */
export function nameKey(n: ModelName): string {
  return `${n.host}/${n.namespace}/${n.model}:${n.tag}`.toLowerCase();
}

/** The manifest's path parts under manifests/: host, namespace, model, tag. */
export function nameParts(n: ModelName): [string, string, string, string] {
  return [n.host, n.namespace, n.model, n.tag];
}
