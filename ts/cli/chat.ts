/**
 * One chat turn against the server's /api/chat: the answer streamed to the terminal as it
 * comes, stoppable with an AbortSignal (the server cancels the generation when the request
 * goes), Ollama's `--verbose` timings after it; and image attachments read from paths.
 */
import { existsSync, readFileSync, statSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import type { WickClient } from "./client.ts";
import { CliError } from "./errors.ts";
import { shortDuration } from "./format.ts";

export interface ChatMessage {
  role: "system" | "user" | "assistant";
  content: string;
  images?: string[];
}

export interface ChatRequest {
  model: string;
  messages: ChatMessage[];
  options?: Record<string, unknown>;
  format?: string;
  keep_alive?: string;
}

/** The final chunk's counters (nanoseconds), as Ollama sends them. */
export interface ChatStats {
  total_duration?: number;
  load_duration?: number;
  prompt_eval_count?: number;
  prompt_eval_duration?: number;
  eval_count?: number;
  eval_duration?: number;
  done_reason?: string;
}

interface ChatChunk extends ChatStats {
  message?: { content?: string };
  done?: boolean;
}

export interface TurnResult {
  content: string;
  /** Undefined when the turn was stopped before the end. */
  stats?: ChatStats;
}

/** Streams one answer to `out`; resolves with what was written (`stats` unset when `signal` stopped it). */
export async function chatTurn(client: WickClient, req: ChatRequest, out: NodeJS.WritableStream, signal?: AbortSignal): Promise<TurnResult> {
  let content = "";
  try {
    for await (const chunk of client.stream<ChatChunk>("/api/chat", { ...req, stream: true }, signal)) {
      const piece = chunk.message?.content ?? "";
      if (piece) {
        content += piece;
        out.write(piece);
      }
      if (chunk.done) return { content, stats: chunk };
    }
  } catch (err) {
    if ((err as Error).name === "AbortError") return { content };
    throw err;
  }
  if (signal?.aborted) return { content };
  throw new CliError("the server ended the answer without its final chunk");
}

/** Asks the server to load the model now (a chat request with no messages), as `ollama run` does before the prompt. */
export async function preload(client: WickClient, model: string, keepAlive?: string): Promise<void> {
  await client.json("POST", "/api/chat", { model, messages: [], stream: false, ...(keepAlive !== undefined ? { keep_alive: keepAlive } : {}) });
}

/** Ollama's `--verbose` block. */
export function formatStats(s: ChatStats): string {
  const ms = (ns: number | undefined) => shortDuration((ns ?? 0) / 1e6);
  const rate = (n: number | undefined, ns: number | undefined) => (n && ns ? `${((n * 1e9) / ns).toFixed(2)} tokens/s` : "-");
  const rows: [string, string][] = [
    ["total duration", ms(s.total_duration)],
    ["load duration", ms(s.load_duration)],
    ["prompt eval count", `${s.prompt_eval_count ?? 0} token(s)`],
    ["prompt eval duration", ms(s.prompt_eval_duration)],
    ["prompt eval rate", rate(s.prompt_eval_count, s.prompt_eval_duration)],
    ["eval count", `${s.eval_count ?? 0} token(s)`],
    ["eval duration", ms(s.eval_duration)],
    ["eval rate", rate(s.eval_count, s.eval_duration)],
  ];
  return rows.map(([k, v]) => `${`${k}:`.padEnd(22)}${v}`).join("\n") + "\n";
}

const IMAGE_EXT = /\.(jpe?g|png|webp)$/i;

/**
 * Ollama's rule for image paths typed in a prompt: a word starting with `/`, `./`, `~/` (or a
 * drive letter) and ending in .jpg, .jpeg, .png or .webp, spaces escaped with `\`. Existing files
 * are taken out of the text; a path that does not exist stays as text.
 */
export function extractImagePaths(text: string): { text: string; paths: string[] } {
  const re = /(?:[a-zA-Z]:)?(?:\.\/|~\/|\/|\\)(?:\\ |[^\s])+?\.(?:jpe?g|png|webp)\b/gi;
  const paths: string[] = [];
  const rest = text.replace(re, (m) => {
    const p = expand(m.replace(/\\ /g, " "));
    if (!existsSync(p) || !statSync(p).isFile()) return m;
    paths.push(p);
    return "";
  });
  return { text: paths.length ? rest.replace(/[ \t]{2,}/g, " ").trim() : text, paths };
}

/** Reads image files as base64 for `message.images`. */
export function readImages(paths: string[]): string[] {
  return paths.map((p) => {
    if (!IMAGE_EXT.test(p)) throw new CliError(`${p}: not an image (.jpg, .jpeg, .png or .webp)`);
    try {
      return readFileSync(p).toString("base64");
    } catch (err) {
      throw new CliError(`cannot read ${p}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
    }
  });
}

export const expand = (p: string) => path.resolve(p.startsWith("~/") ? path.join(os.homedir(), p.slice(2)) : p);

/** Why a model cannot take images, or undefined when it can (its /api/show capabilities list "vision"). */
export function noVision(model: string, capabilities: string[] | undefined): string | undefined {
  if (capabilities?.includes("vision")) return undefined;
  return `${model} does not take images: it has no vision projector (serve it with --mmproj, or pull a repo that has an mmproj file); nothing was sent`;
}
