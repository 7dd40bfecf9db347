/**
 * `wick show <model>`: what `ollama show` prints. A .gguf file is read here from its header
 * (no weights loaded, no server): architecture, parameters, context and embedding length,
 * experts, quantization and the quantization mix; `--json` gives the engine's full model info.
 * A store name or hub reference is asked of the server (POST /api/show): the same rows, then
 * the capabilities and the Modelfile's parameters, system message and license.
 */
import path from "node:path";
import type { ShowFlags } from "./flags.ts";
import { CliError } from "./errors.ts";

export async function show(model: string, flags: ShowFlags): Promise<void> {
  // modelOrPath (values.ts) made every file an absolute path; anything else is a model name.
  const out = path.isAbsolute(model) ? await showFile(model, flags) : await showStored(model, flags);
  process.stdout.write(out);
}

async function showFile(file: string, flags: ShowFlags): Promise<string> {
  const { inspectModel } = await import("../engine/index.ts");
  const { describeModel, modelfile, SHOW_ARRAY_LIMIT } = await import("../service/show.ts");
  const { modelIdFromPath } = await import("../service/registry.ts");
  if (flags.parameters || flags.system || flags.license) throw new CliError(`${file} is a GGUF file: --parameters, --system and --license describe store models (wick create makes one)`);
  let info;
  try {
    info = await inspectModel(file, flags.verbose ? {} : { maxArrayLen: SHOW_ARRAY_LIMIT });
  } catch (err) {
    throw new CliError(`cannot read ${file}: ${(err as Error).message}`);
  }
  if (flags.json) return `${JSON.stringify(info, null, 2)}\n`;
  if (flags.template) return info.chatTemplate ? `${info.chatTemplate}\n` : "";
  if (flags.modelfile) return modelfile(modelIdFromPath(file), file);
  return describeModel(info);
}

/** The /api/show answer, as far as the CLI reads it. */
export interface ShowAnswer {
  modelfile: string;
  parameters?: string;
  template?: string;
  system?: string;
  license?: string;
  details?: { family?: string; parameter_size?: string; quantization_level?: string };
  model_info?: Record<string, unknown>;
  capabilities?: string[];
}

async function showStored(model: string, flags: ShowFlags): Promise<string> {
  const { connect } = await import("./autostart.ts");
  const client = await connect();
  const res = await client.json<ShowAnswer>("POST", "/api/show", { model, verbose: !!flags.verbose });
  const text = (s: string | undefined) => (s ? `${s.replace(/\n$/, "")}\n` : "");
  if (flags.json) return `${JSON.stringify(res, null, 2)}\n`;
  if (flags.template) return text(res.template);
  if (flags.modelfile) return text(res.modelfile);
  if (flags.parameters) return text(res.parameters);
  if (flags.system) return text(res.system);
  if (flags.license) return text(res.license);
  return describeStored(res);
}

/** Rows `label  value`, the values aligned 4 spaces after the longest label; rows without a value are left out. */
function aligned(rows: [string, string | undefined][]): string[] {
  const kept = rows.filter((r): r is [string, string] => r[1] !== undefined && r[1] !== "");
  const w = Math.max(0, ...kept.map(([k]) => k.length)) + 4;
  return kept.map(([k, v]) => `${k.padEnd(w)}${v}`);
}

/** The block `ollama show <model>` prints: Model, Capabilities, Parameters, System, License. */
export function describeStored(res: ShowAnswer): string {
  const info = res.model_info ?? {};
  const arch = res.details?.family ?? (info["general.architecture"] as string | undefined) ?? ""; // a string in every GGUF
  const num = (key: string) => (info[`${arch}.${key}`] === undefined ? undefined : String(info[`${arch}.${key}`]));
  const experts = num("expert_count");
  const used = num("expert_used_count");
  const sections: string[] = [];
  const section = (title: string, lines: string[]) => {
    if (lines.length) sections.push([`  ${title}`, ...lines.map((l) => `    ${l}`.trimEnd())].join("\n"));
  };
  section(
    "Model",
    aligned([
      ["architecture", arch],
      ["parameters", res.details?.parameter_size],
      ["context length", num("context_length")],
      ["embedding length", num("embedding_length")],
      ["experts", experts && `${experts}${used ? ` (${used} used)` : ""}`],
      ["quantization", res.details?.quantization_level],
    ]),
  );
  section("Capabilities", res.capabilities ?? []);
  // /api/show's parameters: `name<padding> value` per line.
  section(
    "Parameters",
    aligned(
      (res.parameters ?? "")
        .split("\n")
        .filter(Boolean)
        .map((l) => /^(\S+)\s+(.*)$/.exec(l)!.slice(1, 3) as [string, string]),
    ),
  );
  section("System", res.system ? res.system.split("\n") : []);
  const license = (res.license ?? "")
    .split("\n")
    .map((l) => l.trim())
    .filter(Boolean);
  section("License", license.length > 2 ? [...license.slice(0, 2), "..."] : license);
  return `${sections.join("\n\n")}\n`;
}
