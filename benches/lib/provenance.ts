/** Where a result came from: machine, commit, command and load, for the RESULTS.md sections. */
import { execFileSync } from "node:child_process";
import { appendFileSync } from "node:fs";
import { cpus, loadavg } from "node:os";
import { dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
/** 1-minute load average when the run started: on a shared machine it says how much to trust it. */
export const LOAD_AT_START = loadavg()[0]!;

export function machine(): string {
  let model = cpus()[0]?.model ?? "unknown CPU";
  let cores = String(cpus().length);
  try {
    const l = execFileSync("lscpu", { encoding: "utf8" });
    model = /^Model name:\s*(.+)$/m.exec(l)?.[1]?.trim() ?? model;
    const perCore = /^Thread\(s\) per core:\s*(\d+)$/m.exec(l)?.[1];
    const cpusN = /^CPU\(s\):\s*(\d+)$/m.exec(l)?.[1];
    cores = `${cpusN ?? cores} CPUs${perCore ? `, ${perCore} thread(s)/core` : ""}`;
  } catch {
    /* no lscpu */
  }
  return `${model}, ${cores}`;
}

export function commit(): string {
  try {
    return execFileSync("git", ["rev-parse", "--short", "HEAD"], { cwd: ROOT, encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] }).trim();
  } catch {
    return "unknown";
  }
}

/** The command as typed: `npx tsx <script> <args…>` with arguments quoted where needed. */
export function commandLine(script: string): string {
  return ["npx tsx", script, ...process.argv.slice(2).map((a) => (/[\s'"]/.test(a) ? `'${a}'` : a))].join(" ");
}

/** Appends a dated section with commit, machine, command and load to `file`. */
export function appendResults(file: string, script: string, title: string, body: string): void {
  const section = [
    "",
    `## ${new Date().toISOString().slice(0, 16).replace("T", " ")} UTC — ${title}`,
    "",
    `- commit: \`${commit()}\``,
    `- machine: ${machine()}`,
    `- command: \`${commandLine(script)}\``,
    `- load (1-min average): ${LOAD_AT_START.toFixed(2)} at start, ${loadavg()[0]!.toFixed(2)} at end`,
    "",
    body,
    "",
  ].join("\n");
  appendFileSync(file, section);
  process.stderr.write(`appended to ${file}\n`);
}
