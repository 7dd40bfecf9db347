/**
 * The store commands, as Ollama's CLI runs them against the server: `pull` (progress bar),
 * `create -f Modelfile`, `list` and `ps` (aligned tables or --json), `rm`, `cp`, `stop`.
 */
import { readFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { parseModelfile, type Modelfile } from "../store/modelfile.ts";
import { looksLikePath, parseModelName, parseReference, formatName } from "../store/reference.ts";
import { connect } from "./autostart.ts";
import type { WickClient } from "./client.ts";
import { CliError } from "./errors.ts";
import { humanBytes, humanTime, table } from "./format.ts";
import type { CreateFlags } from "./program.ts";
import { progressReporter, type Progress } from "./progress.ts";

/** Streams a progress route (`/api/pull`, `/api/create`) to stderr: a bar on a terminal, lines elsewhere. */
async function followProgress(client: WickClient, route: string, body: unknown): Promise<void> {
  const progress = progressReporter();
  try {
    for await (const p of client.stream<Progress>(route, body)) progress(p);
  } finally {
    progress.end();
  }
}

export async function pullModel(client: WickClient, model: string): Promise<void> {
  await followProgress(client, "/api/pull", { model });
}

export async function pull(model: string): Promise<void> {
  await pullModel(await connect(), model);
}

/** Whether `name` can be pulled: a hub reference (`hf.co/org/repo`, or the two-part `org/repo`). */
export function isHubRef(name: string): boolean {
  const ref = parseReference(name);
  return ref.kind === "hub" || (ref.kind === "name" && ref.hub !== undefined);
}

/**
 * `create <name> -f Modelfile`: the Modelfile is read and checked here (errors name its line),
 * a FROM path is taken relative to the Modelfile's folder, and the server gets Ollama's JSON
 * create request (from + template, system, parameters, messages, license; ADAPTER lines with absolute paths in `modelfile`).
 */
export async function create(name: string, flags: CreateFlags): Promise<void> {
  const file = path.resolve(flags.file ?? "Modelfile");
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    throw new CliError(`cannot read the Modelfile ${file}: ${code === "ENOENT" ? "no such file" : code === "EISDIR" ? "it is a folder" : (err as Error).message}`);
  }
  let mf: Modelfile;
  try {
    mf = parseModelfile(text);
  } catch (err) {
    throw new CliError(`${file}: ${(err as Error).message.replace(/^Modelfile:? ?/, "")}`);
  }
  for (const w of mf.warnings) process.stderr.write(`wick: warning: ${path.basename(file)} ${w}\n`);
  let from = mf.from;
  if (looksLikePath(from)) from = path.resolve(path.dirname(file), from.startsWith("~/") ? path.join(os.homedir(), from.slice(2)) : from);
  const body: Record<string, unknown> = { model: name, from };
  // ADAPTER paths, like FROM's, are taken relative to the Modelfile's folder; the server reads them from a Modelfile.
  const abs = (p: string) => path.resolve(path.dirname(file), p.startsWith("~/") ? path.join(os.homedir(), p.slice(2)) : p);
  if (mf.adapters?.length) body.modelfile = [`FROM ${from}`, ...mf.adapters.map((a) => `ADAPTER ${abs(a.path)}`)].join("\n") + "\n";
  if (mf.template !== undefined) body.template = mf.template;
  if (mf.system !== undefined) body.system = mf.system;
  if (Object.keys(mf.parameters).length) body.parameters = mf.parameters;
  if (mf.messages.length) body.messages = mf.messages;
  if (mf.license.length) body.license = mf.license;
  if (flags.quantize !== undefined) body.quantize = flags.quantize;
  await followProgress(await connect(), "/api/create", body);
}

interface TagModel {
  name: string;
  size: number;
  digest: string;
  modified_at: string;
}

interface PsModel {
  name: string;
  size: number;
  size_vram?: number;
  digest: string;
  expires_at: string;
  context_length?: number;
}

const shortId = (digest: string) => digest.replace(/^sha256[:-]/, "").slice(0, 12) || "-";

export async function list(flags: { json?: boolean }): Promise<void> {
  const res = await (await connect()).json<{ models: TagModel[] }>("GET", "/api/tags");
  if (flags.json) return void process.stdout.write(`${JSON.stringify(res, null, 2)}\n`);
  const rows = res.models.map((m) => [m.name, shortId(m.digest), humanBytes(m.size), humanTime(m.modified_at)]);
  process.stdout.write(table(["NAME", "ID", "SIZE", "MODIFIED"], rows));
}

/** Ollama's PROCESSOR column: where the model's bytes are. */
function processor(m: PsModel): string {
  const vram = m.size_vram ?? 0;
  if (vram <= 0) return "100% CPU";
  if (vram >= m.size) return "100% GPU";
  const gpu = Math.round((vram * 100) / m.size);
  return `${100 - gpu}%/${gpu}% CPU/GPU`;
}

export async function ps(flags: { json?: boolean }): Promise<void> {
  const res = await (await connect()).json<{ models: PsModel[] }>("GET", "/api/ps");
  if (flags.json) return void process.stdout.write(`${JSON.stringify(res, null, 2)}\n`);
  const now = Date.now();
  const rows = res.models.map((m) => [
    m.name,
    shortId(m.digest),
    humanBytes(m.size),
    processor(m),
    m.context_length ? String(m.context_length) : "-",
    Date.parse(m.expires_at) <= now ? "Stopping..." : humanTime(m.expires_at, now),
  ]);
  process.stdout.write(table(["NAME", "ID", "SIZE", "PROCESSOR", "CONTEXT", "UNTIL"], rows));
}

export async function rm(models: string[]): Promise<void> {
  const client = await connect();
  for (const model of models) {
    await client.json("DELETE", "/api/delete", { model });
    process.stdout.write(`deleted '${model}'\n`);
  }
}

export async function cp(source: string, destination: string): Promise<void> {
  await (await connect()).json("POST", "/api/copy", { source, destination });
  process.stdout.write(`copied '${source}' to '${destination}'\n`);
}

/** The forms a loaded model's name may be typed in: as listed, without `:latest`, a store name's short form. */
function sameModel(typed: string, listed: string): boolean {
  const norm = (s: string) => {
    try {
      return formatName(parseModelName(s)).toLowerCase();
    } catch {
      return s.toLowerCase();
    }
  };
  return norm(typed) === norm(listed) || norm(`hf.co/${typed}`) === norm(listed);
}

/** `stop <model>`: unloads a loaded model now (a `keep_alive: 0` request, as Ollama does). */
export async function stop(model: string): Promise<void> {
  const client = await connect();
  const { models } = await client.json<{ models: PsModel[] }>("GET", "/api/ps");
  const running = models.find((m) => sameModel(model, m.name));
  if (!running) throw new CliError(`model '${model}' is not running (wick ps lists the loaded models)`);
  await client.json("POST", "/api/generate", { model: running.name, keep_alive: 0, stream: false });
}
