/**
 * The commander program: every `wick` command, its options built from the flag tables
 * (flags.ts), error lines shaped as ours (`wick: …`, the flag named as typed, one line with
 * the closest known flag or command suggested).
 */
import { readFileSync } from "node:fs";
import { Command, Option } from "commander";
import type { BenchOptions } from "./bench.ts";
import {
  CONVERT_FLAGS,
  flagNotices,
  knownFlags,
  normalizeArgv,
  RUN_FLAGS,
  SERVE_FLAGS,
  SHOW_FLAGS,
  type ConvertFlags,
  type FlagSpec,
  type RunFlags,
  type ServeFlags,
  type ShowFlags,
} from "./flags.ts";
import { closest } from "./suggest.ts";
import { integer, modelDir, modelName, modelOrPath, modelRef } from "./values.ts";

const pkg = JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8")) as { version: string };

export interface CreateFlags {
  file?: string;
  quantize?: string;
}

export interface Commands {
  serve(flags: ServeFlags): Promise<void>;
  bench(opts: BenchOptions): Promise<void>;
  show(model: string, flags: ShowFlags): Promise<void>;
  run(model: string, prompt: string[], flags: RunFlags): Promise<void>;
  pull(model: string): Promise<void>;
  create(model: string, flags: CreateFlags): Promise<void>;
  list(flags: { json?: boolean }): Promise<void>;
  ps(flags: { json?: boolean }): Promise<void>;
  rm(models: string[]): Promise<void>;
  cp(source: string, destination: string): Promise<void>;
  stop(model: string): Promise<void>;
  convert(dir: string, flags: ConvertFlags): Promise<void>;
}

/** Commander's message as one `wick <command>: …` line: the alias as typed, our suggestion inline. */
function errorLine(str: string, command: string, typed: Map<string, string>): string {
  let msg = str
    .replace(/^error: /, "")
    .replace(/\n\(Did you mean (?:one of )?([^)]*)\?\)/, " (did you mean $1?)")
    .trimEnd();
  const unknown = /^unknown option '([^']+)'/.exec(msg);
  if (unknown) {
    const guess = closest(unknown[1], [...knownFlags(command), "--help"]);
    msg = msg.replace(/ \(did you mean [^)]*\)$/, "") + (guess ? ` (did you mean ${guess}?)` : "");
  }
  msg = msg.replace(/option '([^']*?(--[\w-]+)[^']*)'/, (whole, flags: string, long: string) => {
    const alias = typed.get(long);
    // A short flag commander knows (`-m`) is already named in `flags`.
    return alias && !flags.split(/[ ,]+/).includes(alias) ? `option '${alias}' (${flags})` : whole;
  });
  return `wick${command ? ` ${command}` : ""}: ${msg}\n`;
}

function buildProgram(commands: Commands, typed = new Map<string, string>()): Command {
  const program = new Command("wick")
    .description("Run and serve GGUF language models: the OpenAI API (/v1) and Ollama's (/api) on one port, and Ollama's CLI.")
    .version(pkg.version)
    .configureOutput({ outputError: (str, write) => write(errorLine(str, "", typed)) })
    .showSuggestionAfterError(true)
    .addHelpText("after", "\nClient commands talk to the server at WICK_HOST (default 127.0.0.1:11434) and start one in the background when none answers.");
  const command = (name: string, description: string) =>
    program
      .command(name)
      .description(description)
      .configureOutput({ outputError: (str, write) => write(errorLine(str, name, typed)) });

  const serve = command("serve", "Serve the OpenAI-compatible API (/v1) and Ollama's (/api): the -m model, and store models loaded on first use.")
    .alias("start")
    .argument("[model]", "model loaded at start (vLLM's `vllm serve <model>`): as -m", modelRef);
  for (const spec of SERVE_FLAGS) serve.addOption(toOption(spec));
  serve.action(async (model: string | undefined, flags: ServeFlags) => {
    const given = [model, flags.model, flags.hfRepo].filter((m) => m !== undefined);
    if (given.length > 1) serve.error("give the model once: as the argument, -m (--model, --model-path) or -hf (--hf-repo)");
    for (const line of flagNotices(SERVE_FLAGS, flags)) process.stderr.write(`${line}\n`);
    await commands.serve({ ...flags, model: given[0] });
  });

  const run = command("run", "Chat with a model (interactive), or answer the prompt and exit; pulls a hub model first.")
    .argument("[model]", "store name, hub reference (hf.co/org/repo[:quant], pulled first) or .gguf path (loaded in this process)")
    .argument("[prompt...]", "the prompt; stdin piped in goes before it");
  for (const spec of RUN_FLAGS) run.addOption(toOption(spec));
  run.action(async (first: string | undefined, prompt: string[], flags: RunFlags) => {
    // llama-cli's `-m model`: then every argument is prompt.
    if (flags.model !== undefined && first !== undefined) prompt = [first, ...prompt];
    const raw = flags.model ?? first ?? run.error("error: missing required argument 'model'");
    const model = modelOrPathArg(raw, flags.model !== undefined ? "option '-m, --model <model>' argument" : "argument", run);
    for (const line of flagNotices(RUN_FLAGS, flags)) process.stderr.write(`${line}\n`);
    await commands.run(model, prompt, flags);
  });

  command("pull", "Download a model from the hub (hf.co/org/repo[:quant]) into the store, with progress.")
    .argument("<model>", "hub reference", modelName)
    .option("--insecure", "accepted for Ollama's scripts; the hub is always reached over https as configured")
    .action((model: string) => commands.pull(model));

  command("create", "Create a store model from a Modelfile (FROM a .gguf path, a store model or a hub reference).")
    .argument("<model>", "name of the new model", modelName)
    .option("-f, --file <path>", "the Modelfile", "Modelfile")
    .option("-q, --quantize <type>", "quantize while creating (not supported yet)")
    .action((model: string, flags: CreateFlags) => commands.create(model, flags));

  command("list", "List the store's models.")
    .alias("ls")
    .option("--json", "print the server's /api/tags answer")
    .action((flags: { json?: boolean }) => commands.list(flags));

  command("ps", "List the loaded models.")
    .option("--json", "print the server's /api/ps answer")
    .action((flags: { json?: boolean }) => commands.ps(flags));

  const show = command("show", "Show a model: architecture, parameters, context length, quantization; Modelfile parts of a store model.").argument(
    "<model>",
    "store name, hub reference, or a .gguf file (read here, without a server)",
    modelOrPath,
  );
  for (const spec of SHOW_FLAGS) show.addOption(toOption(spec));
  show.action((model: string, flags: ShowFlags) => commands.show(model, flags));

  command("rm", "Remove models from the store.")
    .alias("delete")
    .argument("<model...>", "store names")
    .action((models: string[]) => commands.rm(models.map((m) => checked(m, "rm"))));

  command("cp", "Copy a store model under a second name.")
    .alias("copy")
    .argument("<source>", "store name", modelName)
    .argument("<destination>", "new name", modelName)
    .action((source: string, destination: string) => commands.cp(source, destination));

  command("stop", "Unload a running model now.")
    .argument("<model>", "a model listed by wick ps", modelName)
    .action((model: string) => commands.stop(model));

  command("bench", "Measure prefill and decode tokens/s of a model (like llama-bench).")
    .requiredOption("-m, --model <path>", "GGUF model file")
    .option("-t, --threads <n>", "CPU threads", integer(1, 1024, "a positive integer"))
    .option("-p, --n-prompt <n>", "prompt tokens", integer(1, 1 << 20, "a positive integer"), 512)
    .option("-n, --n-gen <n>", "generated tokens", integer(2, 1 << 20, "an integer >= 2"), 128)
    .option("-r, --repetitions <n>", "measured runs", integer(1, 1000, "a positive integer"), 5)
    .addOption(new Option("-o, --output <format>", "table or json").choices(["table", "json"]).default("table"))
    .option("--no-mmap", "pack the weights at load instead of mapping them from the pack cache (as wick serve --no-mmap)")
    .action(async (o: { model: string; threads?: number; nPrompt: number; nGen: number; repetitions: number; output: "table" | "json"; mmap: boolean }) => {
      await commands.bench({ ...o });
    });
  const convert = command("convert", "Convert a Hugging Face model directory (safetensors, config.json, tokenizer) to GGUF, as llama.cpp's converter and llama-quantize write it.").argument(
    "<dir>",
    "model directory",
    modelDir,
  );
  for (const spec of CONVERT_FLAGS) convert.addOption(toOption(spec));
  convert.action((dir: string, flags: ConvertFlags) => commands.convert(dir, { ...flags, outtype: flags.outtype ?? "f16" }));

  return program;

  /** A value checked by a parser outside commander's argument parsing, failing as commander would. */
  function checked(raw: string, name: string): string {
    try {
      return modelName(raw);
    } catch (err) {
      return program.commands.find((c) => c.name() === name)!.error(`error: argument '${raw}' is invalid. ${(err as Error).message}`);
    }
  }
}

function modelOrPathArg(raw: string, what: string, cmd: Command): string {
  try {
    return modelOrPath(raw);
  } catch (err) {
    return cmd.error(`error: ${what} '${raw}' is invalid. ${(err as Error).message}`);
  }
}

function toOption<F>(spec: FlagSpec<F>): Option {
  const short = spec.flags.find((f) => /^-[A-Za-z]$/.test(f));
  const aliases = spec.flags.slice(1).filter((f) => f !== short);
  const flags = `${short ? `${short}, ` : ""}${spec.flags[0]}${spec.value ? ` ${spec.value}` : ""}`;
  const description = spec.description + (aliases.length ? ` (also ${aliases.join(", ")})` : "");
  const opt = new Option(flags, description);
  // The table's key, not commander's camel-case of the canonical flag (`--temp` → temperature).
  opt.attributeName = () => spec.key;
  const parse = spec.parse;
  if (spec.repeatable) opt.argParser((raw: string, prev: unknown) => [...((prev as unknown[] | undefined) ?? []), parse ? parse(raw) : raw]);
  else if (parse) opt.argParser(parse);
  if (spec.required) opt.makeOptionMandatory();
  return opt;
}

/** Runs the CLI on `argv` (without node and script): aliases rewritten, foreign flags noted. */
export async function runCli(argv: string[], commands: Commands): Promise<void> {
  const { args, notices, typed } = normalizeArgv(argv);
  for (const line of notices) process.stderr.write(`${line}\n`);
  await buildProgram(commands, typed).parseAsync(args, { from: "user" });
}
