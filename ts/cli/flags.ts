/**
 * The flag tables of `wick serve`, `wick show` and `wick convert`: the single source of truth for their
 * options, with (for serve) their aliases from the other runtimes (llama-server, vLLM, SGLang,
 * Ollama), their value checks and help.
 * Commander cannot spell multi-letter short flags (`-np`) or several long names per option,
 * so `normalizeArgv` rewrites every alias to the canonical long flag first, and drops flags
 * that only make sense elsewhere (`--enable-torch-compile`, `--ipc=host`) with a notice.
 */
import { TOOL_PARSER_NAMES } from "../service/tools/index.ts";
import { CONVERT_OUT_TYPES } from "../engine/convert.ts";
import { choice, fraction, integer, keepAlive, modelRef, nonEmpty, outfile, port, positiveInt } from "./values.ts";

export interface FlagSpec<F = ServeFlags> {
  /** Property name in the parsed options. */
  key: keyof F & string;
  /** Canonical long flag first, then aliases; a single-letter short flag is given to commander. */
  flags: string[];
  /** Value placeholder for help; absent for booleans. */
  value?: string;
  description: string;
  parse?: (raw: string) => unknown;
  required?: boolean;
  /** Printed (once, to stderr) when the flag is given: the flag is accepted but changes nothing here. */
  notice?: string;
}

export interface ServeFlags {
  model?: string;
  maxLoadedModels?: number;
  /** Milliseconds; Infinity = forever. */
  keepAlive?: number;
  alias?: string;
  host?: string;
  port?: number;
  ctxSize?: number;
  apiKey?: string;
  threads?: number;
  parallel?: number;
  chunkedPrefillSize?: number;
  maxBatchedTokens?: number;
  maxTotalTokens?: number;
  disablePrefixCache?: boolean;
  nGpuLayers?: number;
  gpuMemoryUtilization?: number;
  dtype?: string;
  toolCallParser?: string;
  logLevel?: string;
}

const CPU_ONLY = "this build runs on the CPU only, so it has no effect";

export const SERVE_FLAGS: FlagSpec[] = [
  {
    key: "model",
    flags: ["--model", "-m", "--model-path"],
    value: "<ref>",
    description: "model loaded at start, which also answers requests naming no known model: a .gguf path, a store name (lfm2:350m) or a hub reference (hf.co/org/repo[:QUANT], pulled first); without it, models load from the store on first use",
    parse: modelRef,
  },
  { key: "alias", flags: ["--alias", "-a", "--served-model-name"], value: "<name>", description: "id clients see for the -m model (default: the file name without .gguf, or the store name)", parse: nonEmpty },
  { key: "maxLoadedModels", flags: ["--max-loaded-models"], value: "<n>", description: "models loaded at once; the least recently used idle one is unloaded to make room (default 3)", parse: positiveInt },
  {
    key: "keepAlive",
    flags: ["--keep-alive"],
    value: "<duration>",
    description: 'how long an idle model stays loaded: "5m", "1h30m", seconds, -1 = forever, 0 = unload when idle (default WICK_KEEP_ALIVE, OLLAMA_KEEP_ALIVE, else 5m; the -m model stays unless this is given)',
    parse: keepAlive,
  },
  { key: "host", flags: ["--host"], value: "<host>", description: "address to listen on (default 127.0.0.1; or WICK_HOST=host:port)", parse: nonEmpty },
  { key: "port", flags: ["--port"], value: "<port>", description: "port to listen on (default 11434; 0 picks a free one)", parse: port },
  { key: "ctxSize", flags: ["--ctx-size", "-c", "--max-model-len", "--context-length"], value: "<n>", description: "context length per sequence (default 4096, capped by the model's own)", parse: positiveInt },
  { key: "apiKey", flags: ["--api-key"], value: "<key>", description: "require this key as 'Authorization: Bearer' or 'X-Api-Key' (or WICK_API_KEY)", parse: nonEmpty },
  { key: "threads", flags: ["--threads", "-t"], value: "<n>", description: "CPU threads for the kernels", parse: positiveInt },
  { key: "parallel", flags: ["--parallel", "-np", "--max-num-seqs"], value: "<n>", description: "sequences decoded together (continuous batching; default 4)", parse: positiveInt },
  { key: "chunkedPrefillSize", flags: ["--chunked-prefill-size"], value: "<n>", description: "prompt tokens per step; -1 = whole prompt in one pass", parse: integer(-1, Number.MAX_SAFE_INTEGER, "a positive integer or -1") },
  { key: "maxBatchedTokens", flags: ["--max-num-batched-tokens"], value: "<n>", description: "tokens in one forward step, decodes and prompt chunks together (default 512)", parse: positiveInt },
  { key: "maxTotalTokens", flags: ["--max-total-tokens", "--kv-cache-tokens"], value: "<n>", description: "tokens the shared KV cache holds, all sequences together (default ctx-size × parallel)", parse: positiveInt },
  { key: "disablePrefixCache", flags: ["--disable-prefix-cache", "--disable-radix-cache", "--no-enable-prefix-caching"], description: "do not reuse the KV cache of equal prompt prefixes across requests" },
  { key: "nGpuLayers", flags: ["--n-gpu-layers", "-ngl", "--gpu-layers"], value: "<n>", description: "layers on the GPU (99 = all)", parse: integer(-1), notice: CPU_ONLY },
  { key: "gpuMemoryUtilization", flags: ["--gpu-memory-utilization", "--mem-fraction-static"], value: "<0..1>", description: "fraction of GPU memory to use", parse: fraction, notice: CPU_ONLY },
  { key: "dtype", flags: ["--dtype"], value: "<type>", description: "GPU compute type: auto, float16, bfloat16, float32", parse: choice(["auto", "float16", "bfloat16", "float32", "half", "float"]), notice: CPU_ONLY },
  { key: "toolCallParser", flags: ["--tool-call-parser"], value: "<name>", description: `tool-call format: ${TOOL_PARSER_NAMES.join(", ")} (default: from the chat template)`, parse: choice(TOOL_PARSER_NAMES) },
  { key: "logLevel", flags: ["--log-level"], value: "<level>", description: "log level: fatal, error, warn, info, debug, trace, silent (default info)", parse: choice(["fatal", "error", "warn", "info", "debug", "trace", "silent"]) },
];

export interface ShowFlags {
  json?: boolean;
  template?: boolean;
  modelfile?: boolean;
}

export const SHOW_FLAGS: FlagSpec<ShowFlags>[] = [
  { key: "json", flags: ["--json"], description: "print the model info (header, quantization mix, metadata) as JSON" },
  { key: "template", flags: ["--template"], description: "print only the chat template" },
  { key: "modelfile", flags: ["--modelfile"], description: "print a Modelfile for the model" },
];

export interface ConvertFlags {
  outfile: string;
  outtype: string;
  threads?: number;
}

export const CONVERT_FLAGS: FlagSpec<ConvertFlags>[] = [
  { key: "outfile", flags: ["--outfile", "-o"], value: "<file.gguf>", description: "the GGUF to write (written to a temporary file beside it, renamed at the end)", parse: outfile, required: true },
  {
    key: "outtype",
    flags: ["--outtype"],
    value: "<type>",
    description: `${CONVERT_OUT_TYPES.join(", ")}; the _M mixes and K-quants follow llama-quantize's per-tensor rules (default f16)`,
    parse: choice(CONVERT_OUT_TYPES),
  },
  { key: "threads", flags: ["--threads", "-t"], value: "<n>", description: "quantizing threads (default: one per core)", parse: positiveInt },
];

/** Flags of other runtimes (and of `docker run`) that people paste; accepted and ignored. */
interface ForeignFlag {
  flags: string[];
  /** Whether the flag takes a value: "optional" consumes the next argument unless it is a flag. */
  arity: "none" | "optional" | "required";
  from: string;
}

export const FOREIGN_FLAGS: ForeignFlag[] = [
  { flags: ["--enable-torch-compile", "--enable-metrics"], arity: "none", from: "SGLang" },
  { flags: ["--cuda-graph-max-bs", "--attention-backend", "--tp", "--tp-size", "--dp", "--dp-size"], arity: "required", from: "SGLang" },
  { flags: ["--trust-remote-code", "--enforce-eager", "--disable-log-requests", "--disable-log-stats", "--enable-prefix-caching", "--enable-chunked-prefill", "--enable-auto-tool-choice"], arity: "none", from: "vLLM" },
  { flags: ["--tensor-parallel-size", "-tp", "--pipeline-parallel-size", "-pp", "--swap-space", "--kv-cache-dtype", "--quantization", "--generation-config", "--download-dir", "--uvicorn-log-level", "--max-logprobs"], arity: "required", from: "vLLM" },
  { flags: ["--flash-attn", "-fa"], arity: "optional", from: "llama.cpp" },
  { flags: ["--cont-batching", "-cb", "--mlock", "--no-mmap", "--metrics", "--jinja", "--no-webui", "--verbose"], arity: "none", from: "llama.cpp" },
  { flags: ["--batch-size", "-b", "--ubatch-size", "-ub", "--cache-type-k", "-ctk", "--cache-type-v", "-ctv"], arity: "required", from: "llama.cpp" },
  { flags: ["--ipc", "--gpus", "--shm-size"], arity: "optional", from: "docker run" },
];

const aliasToCanonical = new Map(SERVE_FLAGS.flatMap((f) => f.flags.map((a) => [a, f.flags[0]!] as const)));
const foreignByName = new Map(FOREIGN_FLAGS.flatMap((f) => f.flags.map((a) => [a, f] as const)));

export interface Normalized {
  args: string[];
  /** One line per ignored flag, for stderr. */
  notices: string[];
  /** Canonical flag → the alias the user typed, so errors can name the flag as typed. */
  typed: Map<string, string>;
}

/** Rewrites aliases to canonical long flags and removes foreign flags (with their values). */
export function normalizeArgv(args: string[]): Normalized {
  const out: string[] = [];
  const notices: string[] = [];
  const typed = new Map<string, string>();
  for (let i = 0; i < args.length; i++) {
    const arg = args[i]!;
    if (arg === "--") {
      out.push(...args.slice(i));
      break;
    }
    if (!arg.startsWith("-") || arg === "-") {
      out.push(arg);
      continue;
    }
    const eq = arg.indexOf("=");
    const name = eq > 0 ? arg.slice(0, eq) : arg;
    const inline = eq > 0 ? arg.slice(eq) : "";
    const canonical = aliasToCanonical.get(name);
    if (canonical) {
      if (canonical !== name) typed.set(canonical, name);
      out.push(canonical + inline);
      continue;
    }
    const foreign = foreignByName.get(name);
    if (!foreign) {
      out.push(arg); // commander reports it as unknown
      continue;
    }
    const next = args[i + 1];
    if (!inline && foreign.arity === "required" && next !== undefined) i++;
    else if (!inline && foreign.arity === "optional" && next !== undefined && !next.startsWith("-")) i++;
    notices.push(`wick: ignoring ${name} (${foreign.from} flag, no effect in Wick)`);
  }
  return { args: out, notices, typed };
}

/** Notices for table flags that are accepted but change nothing on this build. */
export function flagNotices(given: Partial<ServeFlags>): string[] {
  return SERVE_FLAGS.filter((f) => f.notice && given[f.key] !== undefined).map((f) => `wick: note: ${f.flags[0]}: ${f.notice}`);
}
