/**
 * Flags of other runtimes (and of `docker run`) that `wick serve` accepts and ignores, each with
 * where it comes from and, where "no effect in Wick" would not say enough, why.
 */

/** Flags of other runtimes (and of `docker run`) that people paste; accepted and ignored. */
export interface ForeignFlag {
  flags: string[];
  /** Whether the flag takes a value: "optional" consumes the next argument unless it is a flag. */
  arity: "none" | "optional" | "required";
  from: string;
  /** Why it is ignored, when "no effect in Wick" would not say enough. */
  why?: string;
}

export const FOREIGN_FLAGS: ForeignFlag[] = [
  { flags: ["--enable-torch-compile", "--enable-metrics"], arity: "none", from: "SGLang" },
  { flags: ["--cuda-graph-max-bs", "--attention-backend", "--tp", "--tp-size", "--dp", "--dp-size"], arity: "required", from: "SGLang" },
  {
    flags: ["--trust-remote-code", "--enforce-eager", "--disable-log-requests", "--disable-log-stats", "--enable-prefix-caching", "--enable-chunked-prefill", "--enable-auto-tool-choice"],
    arity: "none",
    from: "vLLM",
  },
  { flags: ["--enable-lora"], arity: "none", from: "vLLM", why: "LoRA adapters are always on: --lora, --lora-modules, /v1/load_lora_adapter" },
  {
    flags: ["--max-loras", "--max-lora-rank", "--max-cpu-loras", "--lora-dtype", "--lora-extra-vocab-size"],
    arity: "required",
    from: "vLLM",
    why: "adapters are held beside the base weights at their own rank, as many as are loaded",
  },
  {
    flags: [
      "--tensor-parallel-size",
      "-tp",
      "--pipeline-parallel-size",
      "-pp",
      "--swap-space",
      "--kv-cache-dtype",
      "--quantization",
      "--generation-config",
      "--download-dir",
      "--uvicorn-log-level",
      "--max-logprobs",
    ],
    arity: "required",
    from: "vLLM",
  },
  { flags: ["--flash-attn", "-fa"], arity: "optional", from: "llama.cpp" },
  { flags: ["--cont-batching", "-cb", "--mlock", "--metrics", "--jinja", "--no-webui", "--verbose"], arity: "none", from: "llama.cpp" },
  { flags: ["--batch-size", "-b", "--ubatch-size", "-ub"], arity: "required", from: "llama.cpp" },
  { flags: ["--ipc", "--gpus", "--shm-size"], arity: "optional", from: "docker run" },
  { flags: ["--enable-force-include-usage"], arity: "none", from: "vLLM", why: "usage is sent when a request asks for it" },
  {
    flags: ["--temp", "--top-p", "--top-k", "--min-p", "--max-tokens", "--repeat-penalty", "--seed"],
    arity: "required",
    from: "mlx-lm / llama-server",
    why: "no server-wide sampling defaults: send them per request, or set them as PARAMETERs in a Modelfile",
  },
  { flags: ["--chat-template", "--chat-template-file"], arity: "required", from: "llama-server / vLLM / mlx-lm", why: "the GGUF's own template is used: set another as TEMPLATE in a Modelfile" },
  { flags: ["--prompt-cache-size", "--threads-batch", "-tb"], arity: "required", from: "mlx-lm / llama-server" },
  { flags: ["--no-mmproj", "--props", "--slots", "--no-jinja"], arity: "none", from: "llama-server" },
];
