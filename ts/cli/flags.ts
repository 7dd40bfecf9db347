/**
 * The flag tables of `wick serve`, `wick run`, `wick show` and `wick convert`: the single source of truth for
 * their options, with their aliases from the other runtimes (serve: llama-server, vLLM, SGLang,
 * mlx-lm, Ollama; run: llama-cli and Ollama), their value checks and help.
 * Commander cannot spell multi-letter short flags (`-np`, `-hf`) or several long names per
 * option, so `normalizeArgv` rewrites every alias to the canonical long flag first, and drops
 * flags that only make sense elsewhere (`--enable-torch-compile`, `--ipc=host`) with a notice.
 */
import { parseCorsOrigins, type CorsOrigins } from "../server/cors.ts";
import { REASONING_FORMATS, REASONING_PARSERS, type ReasoningFormat } from "../service/reasoning-plan.ts";
import { TOOL_PARSER_NAMES } from "../service/tools/index.ts";
import { CONVERT_OUT_TYPES } from "../engine/convert.ts";
import { KV_CACHE_TYPES } from "../engine/index.ts";
import { InvalidArgumentError } from "commander";
import {
  choice,
  device,
  existingFile,
  fraction,
  gpuLayers,
  hubRepo,
  integer,
  keepAlive,
  loraFiles,
  loraModule,
  loraScaled,
  modelRef,
  nonEmpty,
  number,
  outfile,
  port,
  positiveInt,
  speculativeConfig,
  type LoraFlag,
} from "./values.ts";
import { DEFAULT_DRAFT_MAX, DEFAULT_DRAFT_P_MIN, SPEC_TYPES, type SpeculativeConfig, type SpecType } from "../service/speculation.ts";
import { FOREIGN_FLAGS, type ForeignFlag } from "./foreign-flags.ts";

export { FOREIGN_FLAGS };

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
  /**
   * Printed (once, to stderr) when the flag is given: the flag is accepted but changes nothing
   * here. A function decides by the parsed value (undefined: nothing to say).
   */
  notice?: string | ((value: unknown) => string | undefined);
  /** May be given several times; the values are collected in an array. */
  repeatable?: boolean;
  /**
   * Takes every following argument this test accepts as another value (vLLM's `nargs='+'`:
   * `--lora-modules a=x b=y`); each is rewritten as its own repeated flag.
   */
  variadic?: (next: string) => boolean;
}

export interface ServeFlags {
  model?: string;
  hfRepo?: string;
  mmproj?: string;
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
  kvCacheMemoryBytes?: number;
  cacheTypeK?: string;
  cacheTypeV?: string;
  disablePrefixCache?: boolean;
  /** false with --no-mmap. */
  mmap?: boolean;
  device?: string;
  nGpuLayers?: number;
  gpuMemoryUtilization?: number;
  dtype?: string;
  toolCallParser?: string;
  reasoningFormat?: ReasoningFormat;
  reasoningParser?: string;
  reasoningBudget?: number;
  logLevel?: string;
  imageMinTokens?: number;
  imageMaxTokens?: number;
  /** false with --no-private-image-urls (commander names a `--no-` flag by what it negates). */
  privateImageUrls?: boolean;
  imageMaxPixels?: number;
  imageMaxBytes?: number;
  imageTimeout?: number;
  /** Seconds; see the flag's help. */
  timeout?: number;
  maxConnections?: number;
  /** Seconds. */
  shutdownTimeout?: number;
  cors?: CorsOrigins;
  metricsPublic?: boolean;
  /** One array per flag given (a flag may name several adapters); ids follow --lora, --lora-scaled, --lora-modules. */
  lora?: LoraFlag[][];
  loraScaled?: LoraFlag[][];
  loraModules?: LoraFlag[][];
  loraInitWithoutApply?: boolean;
  specType?: SpecType;
  draftMax?: number;
  draftMin?: number;
  specNgramSize?: number;
  speculativeConfig?: SpeculativeConfig;
  modelDraft?: string;
  draftPMin?: number;
}

/** `--cors`: the origins, or the reason they do not parse as the flag's error. */
function corsOrigins(raw: string): CorsOrigins {
  try {
    return parseCorsOrigins(raw);
  } catch (err) {
    throw new InvalidArgumentError(`${(err as Error).message}.`);
  }
}

/** `--dtype`: only `auto` is what the engine does (quantized weights, f32 activations); the others are accepted, not applied. */
const dtypeNotice = (v: unknown): string | undefined =>
  v === "auto" ? undefined : `${String(v)} is not applied: the engine computes in the weights' own types (quantized matmuls, f32 activations), as auto does`;
const NO_VISION = "the image token budget is the server's: set it with wick serve --image-max-tokens";

export const SERVE_FLAGS: FlagSpec[] = [
  {
    key: "model",
    flags: ["--model", "-m", "--model-path"],
    value: "<ref>",
    description:
      "model loaded at start, which also answers requests naming no known model: a .gguf path, a store name (lfm2:350m) or a hub reference (hf.co/org/repo[:QUANT], pulled first); without it, models load from the store on first use",
    parse: modelRef,
  },
  {
    key: "hfRepo",
    flags: ["--hf-repo", "-hf", "-hfr"],
    value: "<org/repo[:quant]>",
    description: "hub model, pulled into the store first (quant default Q4_K_M); the same as -m hf.co/org/repo[:quant]",
    parse: hubRepo,
  },
  {
    key: "alias",
    flags: ["--alias", "-a", "--served-model-name"],
    value: "<name>",
    description: "id clients see for the -m model (default: the file name without .gguf, or the store name)",
    parse: nonEmpty,
  },
  {
    key: "maxLoadedModels",
    flags: ["--max-loaded-models"],
    value: "<n>",
    description: "models loaded at once; the least recently used idle one is unloaded to make room (default 3)",
    parse: positiveInt,
  },
  {
    key: "keepAlive",
    flags: ["--keep-alive"],
    value: "<duration>",
    description:
      'how long an idle model stays loaded: "5m", "1h30m", seconds, -1 = forever, 0 = unload when idle (default WICK_KEEP_ALIVE, OLLAMA_KEEP_ALIVE, else 5m; the -m model stays unless this is given)',
    parse: keepAlive,
  },
  { key: "host", flags: ["--host"], value: "<host>", description: "address to listen on (default 127.0.0.1; or WICK_HOST=host:port)", parse: nonEmpty },
  { key: "port", flags: ["--port"], value: "<port>", description: "port to listen on (default 11434; 0 picks a free one)", parse: port },
  {
    key: "ctxSize",
    flags: ["--ctx-size", "-c", "--max-model-len", "--context-length"],
    value: "<n>",
    description: "context length per sequence (default 4096, capped by the model's own)",
    parse: positiveInt,
  },
  {
    key: "apiKey",
    flags: ["--api-key"],
    value: "<key>",
    description: "require this key as 'Authorization: Bearer' or 'X-Api-Key' on every route but /health, / and /api/version (or WICK_API_KEY)",
    parse: nonEmpty,
  },
  { key: "metricsPublic", flags: ["--metrics-public"], description: "leave /metrics open when --api-key is set (for a Prometheus scraper without the key)" },
  {
    key: "cors",
    flags: ["--cors", "--allowed-origins"],
    value: "<origins>",
    description: "origins browsers may call from: a comma list (https://app.example.com,http://localhost:3000), a JSON list, or * (default: none, CORS off)",
    parse: corsOrigins,
  },
  {
    key: "timeout",
    flags: ["--timeout", "-to"],
    value: "<seconds>",
    description: "read/write timeout: a request must arrive whole (headers and body) within it, and a stream whose client stops reading for this long is cancelled (default 60)",
    parse: number(0, Infinity, { above: true }),
  },
  {
    key: "maxConnections",
    flags: ["--max-connections"],
    value: "<n>",
    description: "open connections at most; a request on one beyond is answered 503 with Retry-After and its connection closed (default: no cap)",
    parse: positiveInt,
  },
  {
    key: "shutdownTimeout",
    flags: ["--shutdown-timeout"],
    value: "<seconds>",
    description: "on SIGTERM/SIGINT, how long requests in flight may finish before they are cancelled (default 10; a second signal exits at once)",
    parse: number(0),
  },
  { key: "threads", flags: ["--threads", "-t"], value: "<n>", description: "CPU threads for the kernels", parse: positiveInt },
  {
    key: "parallel",
    flags: ["--parallel", "-np", "--max-num-seqs", "--max-running-requests", "--decode-concurrency"],
    value: "<n>",
    description: "sequences decoded together (continuous batching; default 4)",
    parse: positiveInt,
  },
  {
    key: "chunkedPrefillSize",
    flags: ["--chunked-prefill-size"],
    value: "<n>",
    description: "prompt tokens per step; -1 = whole prompt in one pass",
    parse: integer(-1, Number.MAX_SAFE_INTEGER, "a positive integer or -1"),
  },
  { key: "maxBatchedTokens", flags: ["--max-num-batched-tokens"], value: "<n>", description: "tokens in one forward step, decodes and prompt chunks together (default 512)", parse: positiveInt },
  {
    key: "maxTotalTokens",
    flags: ["--max-total-tokens", "--kv-cache-tokens"],
    value: "<n>",
    description: "tokens the shared KV cache holds, all sequences together (default ctx-size × parallel)",
    parse: positiveInt,
  },
  {
    key: "kvCacheMemoryBytes",
    flags: ["--kv-cache-memory-bytes", "--kv-cache-memory"],
    value: "<bytes>",
    description: "bytes the shared KV cache may take when --max-total-tokens is not given: it holds what fits at the cache types' bytes per token",
    parse: positiveInt,
  },
  {
    key: "cacheTypeK",
    flags: ["--cache-type-k", "-ctk"],
    value: "<type>",
    description: "how the KV cache stores keys: f16 (default), q8_0, q4_0 (CPU path)",
    parse: choice(KV_CACHE_TYPES),
  },
  {
    key: "cacheTypeV",
    flags: ["--cache-type-v", "-ctv"],
    value: "<type>",
    description: "how the KV cache stores values: f16 (default), q8_0, q4_0 (CPU path)",
    parse: choice(KV_CACHE_TYPES),
  },
  {
    key: "mmap",
    flags: ["--no-mmap"],
    description: "pack the weights at every load instead of mapping them from the pack cache (<WICK_HOME>/cache/packs, or WICK_PACK_CACHE: a directory, or off)",
  },
  {
    key: "disablePrefixCache",
    flags: ["--disable-prefix-cache", "--disable-radix-cache", "--no-enable-prefix-caching"],
    description: "do not reuse the KV cache of equal prompt prefixes across requests",
  },
  {
    key: "device",
    flags: ["--device"],
    value: "<device>",
    description:
      "where models run: auto (a GPU when the addon has its backend and one answers, else the CPU), cpu, cuda, cuda:N, metal, cpu-candle (the GPU code path on the CPU: a check, not a speed option); default WICK_DEVICE, else auto. A GPU that cannot be had falls back to the CPU with a notice",
    parse: device,
  },
  {
    key: "nGpuLayers",
    flags: ["--n-gpu-layers", "-ngl", "--gpu-layers"],
    value: "<n>",
    description:
      "layers on the GPU, as llama-server counts them: 0 = the CPU; N below the block count = the last N blocks on the GPU, the rest, the embedding and the output head on the CPU; past it (99, all, auto) = every layer",
    parse: gpuLayers,
  },
  {
    key: "gpuMemoryUtilization",
    flags: ["--gpu-memory-utilization", "--mem-fraction-static"],
    value: "<0..1>",
    description: "share of the GPU's memory to fill: the KV cache gets what is left of it after the weights (CUDA; default: the KV cache --max-total-tokens asks for)",
    parse: fraction,
  },
  {
    key: "dtype",
    flags: ["--dtype"],
    value: "<type>",
    description: "compute type: auto (the weights' own types); float16, bfloat16, float32 are accepted and not applied yet (a notice)",
    parse: choice(["auto", "float16", "bfloat16", "float32", "half", "float"]),
    notice: dtypeNotice,
  },
  {
    key: "toolCallParser",
    flags: ["--tool-call-parser"],
    value: "<name>",
    description: `tool-call format: ${TOOL_PARSER_NAMES.join(", ")} (default: from the chat template)`,
    parse: choice(TOOL_PARSER_NAMES),
  },
  {
    key: "reasoningFormat",
    flags: ["--reasoning-format"],
    value: "<format>",
    description:
      "where the model's thinking goes: auto = split from the answer (reasoning_content, thinking) when the chat template thinks, deepseek = always split at <think>, none = leave it in the content (default auto)",
    parse: choice(REASONING_FORMATS),
  },
  {
    key: "reasoningParser",
    flags: ["--reasoning-parser"],
    value: "<name>",
    description: `split thinking at this family's markers whatever the template says: ${REASONING_PARSERS.join(", ")} (instead of --reasoning-format)`,
    parse: choice(REASONING_PARSERS),
  },
  {
    key: "reasoningBudget",
    flags: ["--reasoning-budget"],
    value: "<n>",
    description:
      "tokens a thinking block may run before its closing marker is forced and the answer follows: -1 = no limit (default), 0 = thinking off (the template's switch, and a block closed at once)",
    parse: integer(-1, Number.MAX_SAFE_INTEGER, "a token count or -1"),
  },
  {
    key: "lora",
    flags: ["--lora"],
    value: "<file>",
    description:
      "LoRA adapter (a GGUF adapter as llama.cpp writes it) for the -m model, applied to every request at scale 1 unless a request's lora field says otherwise; repeatable, or comma-separated",
    parse: loraFiles,
    repeatable: true,
  },
  {
    key: "loraScaled",
    flags: ["--lora-scaled"],
    value: "<file:scale>",
    description: "LoRA adapter with its own default scale, FNAME:SCALE (repeatable, or comma-separated)",
    parse: loraScaled,
    repeatable: true,
  },
  {
    key: "loraModules",
    flags: ["--lora-modules"],
    value: "<name=path>",
    description:
      'LoRA adapter served as the model <name> (vLLM): a request naming it gets the -m model with that adapter alone, requests naming the base do not get it; name=path or {"name":…,"path":…}, several after one flag or repeated; listed by /v1/models',
    parse: loraModule,
    repeatable: true,
    variadic: (next) => !next.startsWith("-") && (next.includes("=") || next.trim().startsWith("{")),
  },
  {
    key: "loraInitWithoutApply",
    flags: ["--lora-init-without-apply"],
    description: "load the LoRA adapters at scale 0: requests pick them with lora: [{id, scale}], or POST /lora-adapters sets the default",
  },
  {
    key: "specType",
    flags: ["--spec-type"],
    value: "<type>",
    description:
      "speculative decoding: ngram-simple drafts the tokens that followed the latest earlier occurrence of the last few tokens (copy-heavy work: editing code, quoting a document), draft-simple lets the --model-draft model guess them; one step checks the drafts and the output is the same token for token. none is off (the default without --model-draft)",
    parse: choice(SPEC_TYPES),
  },
  {
    key: "draftMax",
    flags: ["--draft-max", "--draft", "--draft-n", "--spec-draft-n-max", "--spec-ngram-simple-size-m"],
    value: "<n>",
    description: `tokens drafted per step at most with --spec-type (default ${DEFAULT_DRAFT_MAX}; 0 = off)`,
    parse: integer(0, 64, "a token count from 0 to 64"),
  },
  {
    key: "draftMin",
    flags: ["--draft-min", "--draft-n-min", "--spec-draft-n-min"],
    value: "<n>",
    description: "no draft when fewer tokens than this are found (default 1)",
    parse: integer(0, 64, "a token count from 0 to 64"),
  },
  {
    key: "specNgramSize",
    flags: ["--spec-ngram-simple-size-n", "--spec-ngram-size-n"],
    value: "<n>",
    description: "length of the n-gram looked up (default 4, then shorter down to 2)",
    parse: integer(1, 64, "a length from 1 to 64"),
  },
  {
    key: "modelDraft",
    flags: ["--model-draft", "-md", "--spec-draft-model"],
    value: "<file>",
    description:
      "a small model with the -m model's vocabulary (GGUF) that guesses the next tokens for the -m model to check in one step (speculative decoding, draft-simple): faster when it is often right, the output is the same token for token",
    parse: existingFile,
  },
  {
    key: "draftPMin",
    flags: ["--draft-p-min", "--spec-draft-p-min"],
    value: "<p>",
    description: `the draft model stops guessing at a token it gives less than this probability (default ${DEFAULT_DRAFT_P_MIN})`,
    parse: number(0, 1),
  },
  {
    key: "speculativeConfig",
    flags: ["--speculative-config"],
    value: "<json>",
    description:
      'vLLM\'s form: {"method": "ngram", "num_speculative_tokens": N, "prompt_lookup_max": N, "prompt_lookup_min": N} turns n-gram drafting on; {"model": "draft.gguf", "num_speculative_tokens": N} a draft model',
    parse: speculativeConfig,
  },
  { key: "mmproj", flags: ["--mmproj", "-mm"], value: "<file>", description: "vision projector GGUF for the -m model (LFM2-VL's mmproj): requests may then carry images", parse: nonEmpty },
  { key: "imageMinTokens", flags: ["--image-min-tokens"], value: "<n>", description: "image tokens per image at least (LFM2-VL default 64)", parse: positiveInt },
  {
    key: "imageMaxTokens",
    flags: ["--image-max-tokens"],
    value: "<n>",
    description: "image tokens per image (thumbnail or single image) at most; larger images are downscaled or tiled (LFM2-VL default 256)",
    parse: positiveInt,
  },
  { key: "privateImageUrls", flags: ["--no-private-image-urls"], description: "refuse image URLs that resolve to loopback, private or link-local addresses" },
  {
    key: "imageMaxPixels",
    flags: ["--image-max-pixels"],
    value: "<n>",
    description: "largest image accepted, width × height (default 50000000); larger ones are refused before decoding",
    parse: positiveInt,
  },
  { key: "imageMaxBytes", flags: ["--image-max-bytes"], value: "<n>", description: "largest image file accepted, in bytes (default 20 MiB)", parse: positiveInt },
  { key: "imageTimeout", flags: ["--image-timeout"], value: "<ms>", description: "time allowed to fetch an image URL, redirects included (default 10000)", parse: positiveInt },
  {
    key: "logLevel",
    flags: ["--log-level"],
    value: "<level>",
    description: "log level: fatal, error, warn, info, debug, trace, silent, any case (default info)",
    parse: (raw: string) => choice(["fatal", "error", "warn", "info", "debug", "trace", "silent"])(raw.toLowerCase()),
  },
];

export interface ShowFlags {
  json?: boolean;
  template?: boolean;
  modelfile?: boolean;
  parameters?: boolean;
  system?: boolean;
  license?: boolean;
  verbose?: boolean;
}

export const SHOW_FLAGS: FlagSpec<ShowFlags>[] = [
  { key: "json", flags: ["--json"], description: "print everything as JSON (a file: the header, quantization mix and metadata; a store model: the /api/show answer)" },
  { key: "template", flags: ["--template"], description: "print only the chat template" },
  { key: "modelfile", flags: ["--modelfile"], description: "print a Modelfile for the model" },
  { key: "parameters", flags: ["--parameters"], description: "print only the Modelfile parameters (store models)" },
  { key: "system", flags: ["--system"], description: "print only the system message (store models)" },
  { key: "license", flags: ["--license"], description: "print only the license (store models)" },
  { key: "verbose", flags: ["--verbose", "-v"], description: "with --json, keep the long metadata arrays (the vocabulary)" },
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

/** `wick run`: sampling as llama-cli spells it (and Ollama's run flags); every value goes out as a request option. */
export interface RunFlags {
  model?: string;
  prompt?: string;
  system?: string;
  temperature?: number;
  topP?: number;
  topK?: number;
  minP?: number;
  repeatPenalty?: number;
  repeatLastN?: number;
  presencePenalty?: number;
  frequencyPenalty?: number;
  nPredict?: number;
  seed?: number;
  stop?: string[];
  image?: string[];
  imageMaxTokens?: number;
  keepAlive?: string;
  format?: string;
  verbose?: boolean;
  nowordwrap?: boolean;
}

export const RUN_FLAGS: FlagSpec<RunFlags>[] = [
  { key: "model", flags: ["--model", "-m"], value: "<model>", description: "the model, instead of the first argument (llama-cli's -m)" },
  { key: "prompt", flags: ["--prompt", "-p"], value: "<text>", description: "the prompt (put before the prompt arguments); answer it and exit" },
  { key: "system", flags: ["--system", "-sys", "--system-prompt"], value: "<text>", description: "system message (replaces the model's)" },
  { key: "temperature", flags: ["--temp", "--temperature"], value: "<t>", description: "sampling temperature, 0 = greedy (default: the model's, else 0.8)", parse: number(0) },
  { key: "topP", flags: ["--top-p"], value: "<p>", description: "nucleus sampling: keep the most likely tokens up to this mass (0..1)", parse: number(0, 1) },
  { key: "topK", flags: ["--top-k"], value: "<k>", description: "keep the k most likely tokens (0 = off)", parse: integer(-1) },
  { key: "minP", flags: ["--min-p"], value: "<p>", description: "drop tokens less likely than p × the most likely (0..1)", parse: number(0, 1) },
  { key: "repeatPenalty", flags: ["--repeat-penalty", "--repetition-penalty"], value: "<x>", description: "penalty for repeated tokens (1 = off)", parse: number(0, Infinity, { above: true }) },
  { key: "repeatLastN", flags: ["--repeat-last-n"], value: "<n>", description: "tokens the repeat penalty looks back over (0 = all)", parse: integer(-1) },
  { key: "presencePenalty", flags: ["--presence-penalty"], value: "<x>", description: "presence penalty (-2..2)", parse: number(-2, 2) },
  { key: "frequencyPenalty", flags: ["--frequency-penalty"], value: "<x>", description: "frequency penalty (-2..2)", parse: number(-2, 2) },
  { key: "nPredict", flags: ["--n-predict", "-n", "--num-predict", "--max-tokens"], value: "<n>", description: "most tokens to generate (-1 = until the context is full)", parse: integer(-2) },
  { key: "seed", flags: ["--seed", "-s"], value: "<n>", description: "random seed (-1 = random)", parse: integer(Number.MIN_SAFE_INTEGER) },
  { key: "stop", flags: ["--stop"], value: "<text>", description: "stop at this text (repeatable)", parse: nonEmpty, repeatable: true },
  { key: "image", flags: ["--image"], value: "<path>", description: "attach an image to the prompt (repeatable; needs a vision model)", parse: existingFile, repeatable: true },
  { key: "imageMaxTokens", flags: ["--image-max-tokens"], value: "<n>", description: "most tokens per image", parse: positiveInt, notice: NO_VISION },
  {
    key: "keepAlive",
    flags: ["--keepalive", "--keep-alive"],
    value: "<duration>",
    description: 'how long the model stays loaded after the answer ("5m", "1h", 0 = unload, -1 = forever)',
    parse: keepAliveText,
  },
  { key: "format", flags: ["--format"], value: "<format>", description: "answer format: json", parse: choice(["json"]) },
  { key: "verbose", flags: ["--verbose"], description: "print timings and token rates after each answer (stderr)" },
  { key: "nowordwrap", flags: ["--nowordwrap"], description: "print the answer as it comes (Wick never wraps words; accepted for Ollama's scripts)" },
];

/** --keepalive: checked as a duration, sent as typed (the server parses it again). */
function keepAliveText(raw: string): string {
  keepAlive(raw);
  return raw;
}

/**
 * The flags each command rewrites: its table's aliases, and (serve) the foreign flags it drops.
 * `FlagSpec<never>`: a spec's `key` is `keyof` its flags type, so every command's table is one.
 */
const TABLES: Record<string, { specs: FlagSpec<never>[]; foreign: ForeignFlag[] }> = {
  serve: { specs: SERVE_FLAGS, foreign: FOREIGN_FLAGS },
  run: { specs: RUN_FLAGS, foreign: [] },
  convert: { specs: CONVERT_FLAGS, foreign: [] },
};
const COMMAND_ALIASES: Record<string, string> = { start: "serve" };

export interface Normalized {
  args: string[];
  /** One line per ignored flag, for stderr. */
  notices: string[];
  /** Canonical flag → the alias the user typed, so errors can name the flag as typed. */
  typed: Map<string, string>;
}

/**
 * Rewrites aliases to canonical long flags and removes foreign flags (with their values), with
 * the table of the command (`args[0]`; no command reads as `serve`). Other commands pass as they are.
 */
export function normalizeArgv(args: string[]): Normalized {
  const first = args[0] ?? "";
  const command = first.startsWith("-") || first === "" ? "serve" : (COMMAND_ALIASES[first] ?? first);
  const table = TABLES[command];
  if (!table) return { args: [...args], notices: [], typed: new Map() };
  const aliasToCanonical = new Map(table.specs.flatMap((f) => f.flags.map((a) => [a, f.flags[0]] as const)));
  const foreignByName = new Map(table.foreign.flatMap((f) => f.flags.map((a) => [a, f] as const)));
  const out: string[] = [];
  const notices: string[] = [];
  const typed = new Map<string, string>();
  for (let i = 0; i < args.length; i++) {
    const arg = args[i];
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
      // A value is taken as it is, even one that looks like a flag (`--seed -1`, `-p "-x"`).
      const spec = table.specs.find((f) => f.flags[0] === canonical)!;
      if (spec.value && !inline && i + 1 < args.length) out.push(args[++i]);
      if (spec.variadic && spec.value) while (i + 1 < args.length && spec.variadic(args[i + 1])) out.push(canonical, args[++i]);
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
    notices.push(`wick: ignoring ${name} (${foreign.from} flag, ${foreign.why ?? "no effect in Wick"})`);
  }
  return { args: out, notices, typed };
}

/** Notices for table flags that are accepted but change nothing on this build. */
export function flagNotices<F>(specs: FlagSpec<F>[], given: Partial<F>): string[] {
  return specs.flatMap((f) => {
    if (!f.notice || given[f.key] === undefined) return [];
    const notice = typeof f.notice === "function" ? f.notice(given[f.key]) : f.notice;
    return notice ? [`wick: note: ${f.flags[0]}: ${notice}`] : [];
  });
}

/** Every flag a command's table knows (canonical, aliases, foreign), for "did you mean". */
export function knownFlags(command: string): string[] {
  const table = TABLES[COMMAND_ALIASES[command] ?? command];
  return table ? [...table.specs.flatMap((f) => f.flags), ...table.foreign.flatMap((f) => f.flags)] : [];
}
