/**
 * `wick run <model> [prompt]`, as `ollama run` and llama-cli: with a prompt (or stdin piped
 * in), print the streamed answer and exit; without, an interactive chat (repl.ts). The model is
 * a store name or a hub reference — asked of the server at WICK_HOST (started when none
 * answers) and pulled first when the store lacks it — or a .gguf path, loaded in this process
 * behind a private loopback server, as llama-cli loads its -m file.
 */
import path from "node:path";
import { connect } from "./autostart.ts";
import { chatTurn, extractImagePaths, formatStats, noVision, preload, readImages, type ChatMessage } from "./chat.ts";
import { CliError } from "./errors.ts";
import type { RunFlags } from "./flags.ts";
import { repl } from "./repl.ts";
import { chatRequest, showOrPull, type Session } from "./session.ts";

export async function run(model: string, promptArgs: string[], flags: RunFlags): Promise<void> {
  // `wick run m "x" | head -1`: a closed pipe ends the command quietly.
  process.stdout.on("error", (err: NodeJS.ErrnoException) => {
    if (err.code === "EPIPE") process.exit(0);
    throw err;
  });
  const piped = process.stdin.isTTY ? undefined : await readAll(process.stdin);
  const interactive = !!process.stdin.isTTY && promptArgs.length === 0 && flags.prompt === undefined;

  const backend = path.isAbsolute(model) ? await (await import("./local.ts")).startLocal(model) : { client: await connect(), model, close: async () => {} };
  try {
    const session: Session = {
      client: backend.client,
      model: backend.model,
      info: await showOrPull(backend.client, backend.model),
      options: requestOptions(flags),
      system: flags.system,
      format: flags.format,
      keepAlive: flags.keepAlive,
      verbose: !!flags.verbose,
      messages: [],
      images: flags.image ?? [],
    };
    if (isEmbeddingModel(session.info.capabilities)) await embedOnce(session, [piped, flags.prompt, ...promptArgs]);
    else if (interactive) await repl(session);
    else await oneShot(session, [piped, flags.prompt, ...promptArgs]);
  } finally {
    await backend.close();
  }
}

/** The run flags as Ollama request options (only those given: the Modelfile's stay the defaults). */
export function requestOptions(f: RunFlags): Record<string, unknown> {
  const o: Record<string, unknown> = {
    temperature: f.temperature,
    top_p: f.topP,
    top_k: f.topK,
    min_p: f.minP,
    repeat_penalty: f.repeatPenalty,
    repeat_last_n: f.repeatLastN,
    presence_penalty: f.presencePenalty,
    frequency_penalty: f.frequencyPenalty,
    num_predict: f.nPredict,
    seed: f.seed,
    stop: f.stop,
  };
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined));
}

/** Ollama's non-interactive run: stdin, then the prompt words, joined by spaces; an empty prompt only loads the model. */
async function oneShot(s: Session, parts: (string | undefined)[]): Promise<void> {
  const joined = parts.filter((p): p is string => !!p).join(" ");
  const { text, paths } = extractImagePaths(joined);
  for (const p of paths) process.stderr.write(`Added image '${p}'\n`);
  const images = [...s.images, ...paths];
  if (!text.trim() && !images.length) return preload(s.client, s.model, s.keepAlive);
  if (images.length) {
    const why = noVision(s.model, s.info.capabilities);
    if (why) throw new CliError(why);
  }
  const user: ChatMessage = { role: "user", content: text, ...(images.length ? { images: readImages(images) } : {}) };
  const res = await chatTurn(s.client, chatRequest(s, [user]), process.stdout);
  if (!res.content.endsWith("\n")) process.stdout.write("\n");
  if (s.verbose && res.stats) process.stderr.write(formatStats(res.stats));
}

/** A model made for embeddings only (`/api/show` lists "embedding" and not "completion"). */
function isEmbeddingModel(capabilities: string[] | undefined): boolean {
  return !!capabilities?.includes("embedding") && !capabilities.includes("completion");
}

/**
 * `ollama run` on an embedding model: the input (stdin, then the prompt words) embedded through
 * /api/embed, its vector printed as one JSON array of floats; no chat.
 */
async function embedOnce(s: Session, parts: (string | undefined)[]): Promise<void> {
  const text = parts.filter((p): p is string => !!p).join(" ");
  if (!text.trim()) throw new CliError(`embedding models require input text. Usage: wick run ${s.model} "your text here"`);
  const res = await s.client.json<{ embeddings?: number[][] }>("POST", "/api/embed", { model: s.model, input: text, ...(s.keepAlive !== undefined ? { keep_alive: s.keepAlive } : {}) });
  if (!res.embeddings?.length) throw new CliError("no embeddings generated");
  for (const e of res.embeddings) process.stdout.write(`[${e.map(float32Text).join(",")}]\n`);
}

/** The shortest decimal that reads back as the same float32 (how Go's encoding/json writes a float32). */
export function float32Text(x: number): string {
  const f = Math.fround(x);
  for (let p = 1; p < 9; p++) {
    const s = Number(f.toPrecision(p));
    if (Math.fround(s) === f) return String(s);
  }
  return String(Number(f.toPrecision(9)));
}

async function readAll(stream: NodeJS.ReadableStream): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const c of stream) chunks.push(Buffer.from(c as Buffer));
  return Buffer.concat(chunks).toString("utf8");
}
