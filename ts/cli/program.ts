/** The commander program: `wick serve`, `wick show` and `wick convert` with options built from the flag tables, `wick bench`. */
import { readFileSync } from "node:fs";
import { Command, Option } from "commander";
import type { BenchOptions } from "./bench.ts";
import {
  CONVERT_FLAGS,
  flagNotices,
  normalizeArgv,
  SERVE_FLAGS,
  SHOW_FLAGS,
  type ConvertFlags,
  type FlagSpec,
  type ServeFlags,
  type ShowFlags,
} from "./flags.ts";
import { integer, modelDir, modelPath } from "./values.ts";

const pkg = JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8")) as { version: string };

export interface Commands {
  serve(flags: ServeFlags): Promise<void>;
  bench(opts: BenchOptions): Promise<void>;
  show(model: string, flags: ShowFlags): Promise<void>;
  convert(dir: string, flags: ConvertFlags): Promise<void>;
}

/** Commander names the canonical flag; say the alias the user typed too (`-np`, not only `--parallel`). */
function withTypedFlag(message: string, typed: Map<string, string>): string {
  return message.replace(/option '([^']*?(--[\w-]+)[^']*)'/, (whole, flags: string, long: string) => {
    const alias = typed.get(long);
    // A short flag commander knows (`-m`) is already named in `flags`.
    return alias && !flags.split(/[ ,]+/).includes(alias) ? `option '${alias}' (${flags})` : whole;
  });
}

function buildProgram(commands: Commands, typed = new Map<string, string>()): Command {
  const program = new Command("wick")
    .description("Serve GGUF language models over OpenAI-compatible HTTP.")
    .version(pkg.version)
    // One line per error, prefixed like every other message of ours.
    .configureOutput({ outputError: (str, write) => write(`wick: ${str.replace(/^error: /, "")}`) })
    .showSuggestionAfterError(true);

  const serve = program
    .command("serve")
    .description("Serve the OpenAI-compatible API (/v1) and Ollama's (/api): the -m model, and store models loaded on first use.")
    .configureOutput({ outputError: (str, write) => write(`wick serve: ${withTypedFlag(str.replace(/^error: /, ""), typed)}`) });
  for (const spec of SERVE_FLAGS) serve.addOption(toOption(spec));
  serve.action(async (flags: ServeFlags) => {
    for (const line of flagNotices(flags)) process.stderr.write(`${line}\n`);
    await commands.serve(flags);
  });
  program
    .command("bench")
    .description("Measure prefill and decode tokens/s of a model (like llama-bench).")
    .requiredOption("-m, --model <path>", "GGUF model file")
    .option("-t, --threads <n>", "CPU threads", integer(1, 1024, "a positive integer"))
    .option("-p, --n-prompt <n>", "prompt tokens", integer(1, 1 << 20, "a positive integer"), 512)
    .option("-n, --n-gen <n>", "generated tokens", integer(2, 1 << 20, "an integer >= 2"), 128)
    .option("-r, --repetitions <n>", "measured runs", integer(1, 1000, "a positive integer"), 5)
    .addOption(new Option("-o, --output <format>", "table or json").choices(["table", "json"]).default("table"))
    .action(async (o: { model: string; threads?: number; nPrompt: number; nGen: number; repetitions: number; output: "table" | "json" }) => {
      await commands.bench({ ...o });
    });
  const show = program
    .command("show")
    .description("Show a model's architecture, parameters, context length, experts and quantization mix.")
    .argument("<model>", "GGUF model file", modelPath)
    .configureOutput({ outputError: (str, write) => write(`wick show: ${str.replace(/^error: /, "")}`) });
  for (const spec of SHOW_FLAGS) show.addOption(toOption(spec));
  show.action(async (model: string, flags: ShowFlags) => {
    await commands.show(model, flags);
  });
  const convert = program
    .command("convert")
    .description("Convert a Hugging Face model directory (safetensors, config.json, tokenizer) to GGUF, as llama.cpp's converter and llama-quantize write it.")
    .argument("<dir>", "model directory", modelDir)
    .configureOutput({ outputError: (str, write) => write(`wick convert: ${str.replace(/^error: /, "")}`) });
  for (const spec of CONVERT_FLAGS) convert.addOption(toOption(spec));
  convert.action(async (dir: string, flags: ConvertFlags) => {
    await commands.convert(dir, { ...flags, outtype: flags.outtype ?? "f16" });
  });
  return program;
}

function toOption<F>(spec: FlagSpec<F>): Option {
  const short = spec.flags.find((f) => /^-[A-Za-z]$/.test(f));
  const aliases = spec.flags.slice(1).filter((f) => f !== short);
  const flags = `${short ? `${short}, ` : ""}${spec.flags[0]}${spec.value ? ` ${spec.value}` : ""}`;
  const description = spec.description + (aliases.length ? ` (also ${aliases.join(", ")})` : "");
  const opt = new Option(flags, description);
  if (spec.parse) opt.argParser(spec.parse);
  if (spec.required) opt.makeOptionMandatory();
  return opt;
}

/** Runs the CLI on `argv` (without node and script): aliases rewritten, foreign flags noted. */
export async function runCli(argv: string[], commands: Commands): Promise<void> {
  const { args, notices, typed } = normalizeArgv(argv);
  for (const line of notices) process.stderr.write(`${line}\n`);
  await buildProgram(commands, typed).parseAsync(args, { from: "user" });
}
