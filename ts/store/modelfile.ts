/**
 * Ollama's Modelfile (parser/parser.go): `INSTRUCTION arguments` lines, instructions
 * case-insensitive, `#` comments, values as bare text to the end of the line, `"…"` or
 * `"""…"""` (which may span lines; the text between the quotes is kept as written).
 *
 * Differences from Ollama, each a clearer error rather than a silent surprise: DRAFT is "not
 * supported" (ADAPTER names a GGUF LoRA adapter; a safetensors adapter is converted first); FROM twice is an error; PARAMETER names Ollama knows but Wick
 * does not use are kept with a warning; every error names its line.
 */
import { StoreError } from "./errors.ts";

export interface ModelfileMessage {
  role: "system" | "user" | "assistant";
  content: string;
}

export type ParamValue = number | boolean | string[];

export interface Modelfile {
  from: string;
  /** The FROM line, for errors about what it names. */
  fromLine: number;
  template?: string;
  system?: string;
  /** Ollama option names → typed values; `stop` collects every PARAMETER stop line. */
  parameters: Record<string, ParamValue>;
  messages: ModelfileMessage[];
  license: string[];
  /** ADAPTER lines: LoRA adapter GGUF files (paths as written, resolved like FROM's), in order. */
  adapters?: { path: string; line: number }[];
  /** Lines Wick accepted but ignores (deprecated or unused parameters, RENDERER, …). */
  warnings: string[];
}

type ParamType = "float" | "int" | "bool" | "stop";

/** Parameters Wick applies. */
const USED: Record<string, ParamType> = {
  temperature: "float",
  top_k: "int",
  top_p: "float",
  min_p: "float",
  repeat_penalty: "float",
  repeat_last_n: "int",
  presence_penalty: "float",
  frequency_penalty: "float",
  seed: "int",
  num_ctx: "int",
  num_predict: "int",
  stop: "stop",
};
/** Ollama options Wick parses and keeps but does not apply. */
const IGNORED: Record<string, ParamType> = {
  num_keep: "int",
  typical_p: "float",
  num_batch: "int",
  num_gpu: "int",
  main_gpu: "int",
  num_thread: "int",
  use_mmap: "bool",
  numa: "bool",
};
/** Ollama drops these with a warning (deprecatedParameters). */
const DEPRECATED = new Set(["penalize_newline", "low_vram", "f16_kv", "logits_all", "vocab_only", "use_mlock", "mirostat", "mirostat_tau", "mirostat_eta"]);

const COMMANDS = ["from", "license", "template", "system", "adapter", "draft", "renderer", "parser", "parameter", "message", "requires"];

const err = (line: number, msg: string, code: "INVALID_MODELFILE" | "UNSUPPORTED" = "INVALID_MODELFILE") => new StoreError(code, `Modelfile (line ${line}): ${msg}`);

interface Command {
  name: string;
  /** PARAMETER's name or MESSAGE's role. */
  key?: string;
  value: string;
  line: number;
}

/** A value is complete at a line end when its quotes are closed (Ollama's unquote rule). */
function unquote(s: string): string | null {
  if (s.startsWith('"""')) return s.length >= 6 && s.endsWith('"""') ? s.slice(3, -3) : null;
  if (s.startsWith('"')) return s.length >= 2 && s.endsWith('"') ? s.slice(1, -1) : null;
  return s;
}

/** Splits the text into commands with their line numbers. */
function scan(text: string): Command[] {
  const src = text.replace(/^\uFEFF/, "").replace(/\r\n?/g, "\n");
  const lines = src.split("\n");
  const commands: Command[] = [];
  for (let i = 0; i < lines.length; i++) {
    const lineNo = i + 1;
    const line = lines[i].replace(/^[ \t]+/, "");
    if (line === "" || line.startsWith("#")) continue;
    const m = /^([A-Za-z]+)(?:[ \t]+|$)/.exec(line);
    if (!m || !COMMANDS.includes(m[1].toLowerCase())) {
      const word = /^\S+/.exec(line)?.[0] ?? line;
      throw err(lineNo, `unknown instruction ${JSON.stringify(word)}; an instruction must be one of ${COMMANDS.map((c) => c.toUpperCase()).join(", ")}`);
    }
    const name = m[1].toLowerCase();
    let rest = line.slice(m[0].length);
    let key: string | undefined;
    if (name === "parameter" || name === "message") {
      const k = /^(\S+)(?:[ \t]+|$)/.exec(rest);
      if (!k) throw err(lineNo, `${name.toUpperCase()} needs a ${name === "parameter" ? "name" : "role"} and a value`);
      key = k[1];
      rest = rest.slice(k[0].length);
    }
    // Gather lines until the value's quotes close.
    let value = rest;
    let j = i;
    while (unquote(value.trim()) === null) {
      if (++j >= lines.length) throw err(lineNo, `${value.trim().startsWith('"""') ? '"""' : '"'} is not closed before the end of the file`);
      value += "\n" + lines[j];
    }
    i = j;
    const unquoted = unquote(value.trim())!;
    if (unquoted === "" && value.trim() === "") throw err(lineNo, `${name.toUpperCase()}${key ? ` ${key}` : ""} needs a value`);
    commands.push({ name, key, value: unquoted, line: lineNo });
  }
  return commands;
}

function parseParam(c: Command, type: ParamType): number | boolean | string {
  const v = c.value.trim();
  const bad = (kind: string) => err(c.line, `invalid ${kind} value for ${c.key}: ${JSON.stringify(c.value)}`);
  switch (type) {
    case "float":
      if (!/^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/.test(v)) throw bad("float");
      return Number(v);
    case "int":
      if (!/^[+-]?\d+$/.test(v) || !Number.isSafeInteger(Number(v))) throw bad("integer");
      return Number(v);
    case "bool":
      if (/^(1|t|true)$/i.test(v)) return true;
      if (/^(0|f|false)$/i.test(v)) return false;
      throw bad("boolean");
    case "stop":
      return c.value;
  }
}

/** Parses a Modelfile; every error is INVALID_MODELFILE (or UNSUPPORTED) and names its line. */
export function parseModelfile(text: string): Modelfile {
  const out: Omit<Modelfile, "from" | "fromLine"> & { from?: string; fromLine?: number } = { parameters: {}, messages: [], license: [], warnings: [] };
  for (const c of scan(text)) {
    switch (c.name) {
      case "from":
        if (out.from !== undefined) throw err(c.line, `FROM is given twice (first on line ${out.fromLine})`);
        out.from = c.value.trim();
        out.fromLine = c.line;
        break;
      case "template":
        out.template = c.value;
        break;
      case "system":
        out.system = c.value;
        break;
      case "license":
        out.license.push(c.value);
        break;
      case "message": {
        if (c.key !== "system" && c.key !== "user" && c.key !== "assistant") {
          throw err(c.line, `message role must be one of "system", "user", or "assistant" (got ${JSON.stringify(c.key)})`);
        }
        out.messages.push({ role: c.key, content: c.value });
        break;
      }
      case "parameter": {
        const key = c.key!;
        if (!/^[A-Za-z0-9_]+$/.test(key)) throw err(c.line, `invalid parameter name ${JSON.stringify(key)}`);
        if (DEPRECATED.has(key)) {
          out.warnings.push(`line ${c.line}: parameter ${key} is deprecated and ignored`);
          break;
        }
        const type = USED[key] ?? IGNORED[key];
        if (!type) throw err(c.line, `unknown parameter '${key}'; known: ${Object.keys(USED).join(", ")}`);
        if (!USED[key]) out.warnings.push(`line ${c.line}: parameter ${key} is accepted but not used by Wick`);
        const value = parseParam(c, type);
        if (type === "stop") out.parameters.stop = [...((out.parameters.stop as string[] | undefined) ?? []), value as string];
        else out.parameters[key] = value as number | boolean;
        break;
      }
      case "adapter":
        (out.adapters ??= []).push({ path: c.value.trim(), line: c.line });
        break;
      case "draft":
        throw err(c.line, "DRAFT (draft models for speculative decoding) is not supported by Wick", "UNSUPPORTED");
      default:
        out.warnings.push(`line ${c.line}: ${c.name.toUpperCase()} is accepted and ignored by Wick`);
    }
  }
  if (out.from === undefined) throw new StoreError("INVALID_MODELFILE", "Modelfile: no FROM line");
  return out as Modelfile;
}

/**
 * PARAMETERs given as JSON (the `parameters` object of /api/create), checked against the same
 * table as Modelfile lines: a number where a float is wanted, an integer, a boolean, `stop` a
 * string or an array of strings. Errors are INVALID_MODELFILE naming `parameters.<name>`.
 */
export function parseParameters(json: Record<string, unknown>): { parameters: Record<string, ParamValue>; warnings: string[] } {
  const parameters: Record<string, ParamValue> = {};
  const warnings: string[] = [];
  for (const [key, value] of Object.entries(json)) {
    const bad = (want: string) => new StoreError("INVALID_MODELFILE", `parameters.${key}: expected ${want}, got ${JSON.stringify(value)}`);
    if (DEPRECATED.has(key)) {
      warnings.push(`parameter ${key} is deprecated and ignored`);
      continue;
    }
    const type = USED[key] ?? IGNORED[key];
    if (!type) throw new StoreError("INVALID_MODELFILE", `parameters: unknown parameter '${key}'; known: ${Object.keys(USED).join(", ")}`);
    if (!USED[key]) warnings.push(`parameter ${key} is accepted but not used by Wick`);
    if (type === "float" && !(typeof value === "number" && Number.isFinite(value))) throw bad("a number");
    if (type === "int" && !Number.isSafeInteger(value)) throw bad("an integer");
    if (type === "bool" && typeof value !== "boolean") throw bad("true or false");
    if (type === "stop") {
      const stops = typeof value === "string" ? [value] : value;
      if (!Array.isArray(stops) || !stops.every((x) => typeof x === "string")) throw bad("a string or an array of strings");
      parameters.stop = stops;
    } else parameters[key] = value as number | boolean;
  }
  return { parameters, warnings };
}

/** Ollama's quoting when it prints a value: `"""` for text with newlines or quotes, `"` for edge spaces. */
function quote(s: string): string {
  if (s.includes("\n") || s.startsWith(" ") || s.endsWith(" ")) return s.includes('"') ? `"""${s}"""` : `"${s}"`;
  return s;
}

/** The `parameters` text of /api/show: `name<padding> value` per line (Go's `%-30s %#v`), sorted, one line per stop. */
export function formatParameters(params: Record<string, unknown>): string {
  const lines: string[] = [];
  for (const key of Object.keys(params).sort()) {
    const values = Array.isArray(params[key]) ? (params[key] as unknown[]) : [params[key]];
    for (const v of values) lines.push(`${key.padEnd(30)} ${typeof v === "string" ? JSON.stringify(v) : String(v)}`);
  }
  return lines.join("\n");
}

/** What `ollama show --modelfile` prints for a stored model whose model file is `modelPath`. */
export function renderModelfile(
  name: string,
  m: { modelPath: string; adapters?: string[]; template?: string; system?: string; params: Record<string, unknown>; messages: { role: string; content: string }[]; license?: string[] },
): string {
  const out = ['# Modelfile generated by "wick show"', "# To build a new Modelfile based on this, replace FROM with:", `# FROM ${name}`, "", `FROM ${m.modelPath}`];
  for (const a of m.adapters ?? []) out.push(`ADAPTER ${a}`);
  if (m.template !== undefined) out.push(`TEMPLATE """${m.template}"""`);
  if (m.system !== undefined) out.push(`SYSTEM """${m.system}"""`);
  for (const key of Object.keys(m.params).sort()) {
    const values = Array.isArray(m.params[key]) ? (m.params[key] as unknown[]) : [m.params[key]];
    for (const v of values) out.push(`PARAMETER ${key} ${quote(String(v))}`);
  }
  for (const msg of m.messages) out.push(`MESSAGE ${msg.role} ${quote(msg.content)}`);
  for (const l of m.license ?? []) out.push(`LICENSE """${l}"""`);
  return out.join("\n") + "\n";
}
