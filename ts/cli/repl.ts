/**
 * The interactive chat of `wick run <model>`, as `ollama run`: prompt `>>> `, `"""` for text
 * over several lines (`... `), the answer streamed as it comes; Ctrl-C stops the answer (the
 * request is aborted, the server cancels the generation) and returns to the prompt, Ctrl-C on
 * an empty prompt says how to leave, Ctrl-D or /bye leaves; arrow keys walk the history, which
 * is kept in $WICK_HOME/history. Slash commands: /set, /show, /load, /save, /clear, /image, /?.
 *
 * While an answer streams the terminal is put back in cooked mode with readline paused, so
 * Ctrl-C arrives as a real SIGINT, as it does in Ollama.
 */
import { appendFileSync, mkdirSync, readFileSync } from "node:fs";
import path from "node:path";
import readline from "node:readline";
import { parseParameters } from "../store/modelfile.ts";
import { defaultHome } from "../store/store.ts";
import { chatTurn, expand, extractImagePaths, formatStats, noVision, preload, readImages, type ChatMessage } from "./chat.ts";
import { CliError } from "./errors.ts";
import { HELP, HELP_KEYS, HELP_PARAMETER, HELP_SET, HELP_SHOW } from "./repl-help.ts";
import { chatRequest, showOrPull, type Session } from "./session.ts";
import { describeStored } from "./show.ts";

/** Lines from readline one at a time; null once the input closes (Ctrl-D). */
class LineReader {
  private queue: string[] = [];
  private waiter?: (line: string | null) => void;
  private closed = false;
  constructor(private readonly rl: readline.Interface) {
    rl.on("line", (line) => (this.waiter ? this.take()(line) : this.queue.push(line)));
    rl.on("close", () => {
      this.closed = true;
      if (this.waiter) this.take()(null);
    });
  }
  private take() {
    const w = this.waiter!;
    this.waiter = undefined;
    return w;
  }
  next(prompt: string): Promise<string | null> {
    if (this.queue.length) return Promise.resolve(this.queue.shift()!);
    if (this.closed) return Promise.resolve(null);
    this.rl.setPrompt(prompt);
    this.rl.prompt();
    return new Promise((resolve) => (this.waiter = resolve));
  }
}

export async function repl(s: Session): Promise<void> {
  const out = process.stdout;
  const historyFile = path.join(process.env.WICK_HOME || defaultHome(), "history");
  let keepHistory = true;
  const rl = readline.createInterface({ input: process.stdin, output: out, terminal: true, history: loadHistory(historyFile), historySize: 1000, removeHistoryDuplicates: true });
  const reader = new LineReader(rl);
  let multiline: string[] | undefined;
  rl.on("SIGINT", () => {
    // Ctrl-C at the prompt: drop the line (or the open """ block), or say how to leave.
    if (rl.line === "" && !multiline) out.write("\nUse Ctrl + d or /bye to exit.\n");
    else {
      out.write("^C\n");
      // Empty the line without redrawing it (readline keeps it in `line`).
      Object.assign(rl, { line: "", cursor: 0 });
    }
    multiline = undefined;
    rl.setPrompt(">>> ");
    rl.prompt();
  });

  // A second Ctrl-C just as an answer ends must not kill the session (turn() handles the first).
  const ignore = () => {};
  process.on("SIGINT", ignore);
  try {
    // The model loads before the first prompt; one that cannot load ends the command.
    await preload(s.client, s.model, s.keepAlive);
    for (;;) {
      const line = await reader.next(multiline ? "... " : ">>> ");
      if (line === null) {
        out.write("\n");
        return;
      }
      if (keepHistory && line.trim()) saveHistory(historyFile, line);
      let input: string;
      if (multiline) {
        multiline.push(line);
        if (!line.includes('"""')) continue;
        input = multiline.join("\n").replace(/"""/g, "");
        multiline = undefined;
      } else if ((line.match(/"""/g)?.length ?? 0) % 2 === 1) {
        multiline = [line];
        continue;
      } else input = line.replace(/"""/g, "");
      const text = input.trim();
      if (!text) continue;
      if (text.startsWith("/")) {
        const r = await command(s, text);
        if (r === "exit") return;
        if (r === "history") keepHistory = true;
        if (r === "nohistory") keepHistory = false;
        if (typeof r === "object") await turn(s, rl, r.ask);
        continue;
      }
      await turn(s, rl, text);
    }
  } finally {
    process.off("SIGINT", ignore);
    rl.close();
  }
}

type CommandResult = void | "exit" | "history" | "nohistory" | { ask: string };

async function command(s: Session, text: string): Promise<CommandResult> {
  const out = process.stdout;
  const [cmd = "", ...args] = text.split(/\s+/);
  const rest = text.slice(cmd.length).trim();
  switch (cmd) {
    case "/bye":
    case "/exit":
      return "exit";
    case "/?":
    case "/help":
      out.write(args[0] === "shortcuts" || args[0] === "shortcut" ? HELP_KEYS : args[0] === "set" ? HELP_SET : args[0] === "show" ? HELP_SHOW : HELP);
      return;
    case "/clear":
      s.messages = [];
      s.images = [];
      out.write("Cleared session context\n");
      return;
    case "/set":
      return set(s, args, rest.slice((args[0] ?? "").length).trim());
    case "/show":
      return showInfo(s, args[0]);
    case "/load":
      if (!args[0]) return void out.write("Usage:\n  /load <modelname>\n");
      try {
        const info = await showOrPull(s.client, args[0]);
        out.write(`Loading model '${args[0]}'\n`);
        await preload(s.client, args[0], s.keepAlive);
        Object.assign(s, { model: args[0], info, messages: [], images: [], system: undefined });
      } catch (err) {
        report(err);
      }
      return;
    case "/save":
      if (!args[0]) return void out.write("Usage:\n  /save <modelname>\n");
      try {
        const body = {
          model: args[0],
          from: s.model,
          stream: false,
          ...(s.system !== undefined ? { system: s.system } : {}),
          ...(Object.keys(s.options).length ? { parameters: s.options } : {}),
          ...(s.messages.length ? { messages: s.messages.map(({ role, content }) => ({ role, content })) } : {}),
        };
        await s.client.json("POST", "/api/create", body);
        out.write(`Created new model '${args[0]}'\n`);
      } catch (err) {
        report(err);
      }
      return;
    case "/image": {
      // `/image <path> [question]`: a path with spaces is quoted or escaped.
      const m = /^("([^"]+)"|'([^']+)'|((?:\\ |\S)+))\s*([\s\S]*)$/.exec(rest);
      if (!m) return void out.write("Usage:\n  /image <path> [question]\n");
      const file = expand((m[2] ?? m[3] ?? m[4]).replace(/\\ /g, " "));
      try {
        readImages([file]);
      } catch (err) {
        return report(err);
      }
      s.images.push(file);
      out.write(`Added image '${file}'\n`);
      return m[5].trim() ? { ask: m[5].trim() } : undefined;
    }
    default:
      out.write(`Unknown command '${cmd}'. Type /? for help\n`);
  }
}

function set(s: Session, args: string[], value: string): CommandResult {
  const out = process.stdout;
  switch (args[0]) {
    case "parameter": {
      const [key, ...vals] = args.slice(1);
      if (!key || !vals.length) return void out.write(HELP_PARAMETER);
      const raw = vals.join(" ");
      const typed = key === "stop" ? vals : /^(true|false)$/i.test(raw) ? raw.toLowerCase() === "true" : raw.trim() !== "" && Number.isFinite(Number(raw)) ? Number(raw) : raw;
      try {
        const { parameters } = parseParameters({ [key]: typed });
        Object.assign(s.options, parameters);
        out.write(`Set parameter '${key}' to '${key === "stop" ? vals.join(", ") : raw}'\n`);
      } catch (err) {
        out.write(`Couldn't set parameter: ${(err as Error).message.replace(/^parameters[.:] ?/, "")}\n`);
      }
      return;
    }
    case "system":
      if (!value) return void out.write("Usage:\n  /set system <message>\n");
      s.system = value;
      out.write("Set system message.\n");
      return;
    case "verbose":
    case "quiet":
      s.verbose = args[0] === "verbose";
      out.write(`Set '${args[0]}' mode.\n`);
      return;
    case "format":
      if (args[1] !== "json") return void out.write(`Invalid or missing format. For 'json' mode use '/set format json'\n`);
      s.format = "json";
      out.write("Set format to 'json' mode.\n");
      return;
    case "noformat":
      s.format = undefined;
      out.write("Disabled format.\n");
      return;
    case "history":
    case "nohistory":
      out.write(`Set '${args[0]}' mode.\n`);
      return args[0];
    case "wordwrap":
    case "nowordwrap":
      out.write("Wick prints answers as they come: it never wraps words.\n");
      return;
    default:
      out.write(args[0] ? `Unknown command '/set ${args[0]}'. Type /? for help\n` : HELP_SET);
  }
}

function showInfo(s: Session, what: string | undefined): void {
  const out = process.stdout;
  const i = s.info;
  switch (what) {
    case "info":
      return void out.write(describeStored(i));
    case "template":
      return void out.write(i.template ? `${i.template.replace(/\n$/, "")}\n` : "No prompt template was specified for this model.\n");
    case "system":
      return void out.write((s.system ?? i.system) ? `${s.system ?? i.system}\n` : "No system message was specified for this model.\n");
    case "license":
      return void out.write(i.license ? `${i.license}\n` : "No license was specified for this model.\n");
    case "modelfile":
      return void out.write(i.modelfile);
    case "parameters": {
      const user = Object.entries(s.options);
      if (user.length) out.write(`User defined parameters:\n${user.map(([k, v]) => `${k.padEnd(16)}${Array.isArray(v) ? v.join(" ") : String(v)}`).join("\n")}\n\n`);
      const model = (i.parameters ?? "").split("\n").filter(Boolean);
      out.write(
        model.length
          ? `Model defined parameters:\n${model.map((l) => l.replace(/^(\S+)\s+/, (_, k: string) => k.padEnd(16))).join("\n")}\n`
          : user.length
            ? ""
            : "No parameters were specified for this model.\n",
      );
      return;
    }
    default:
      out.write(HELP_SHOW);
  }
}

/** One question and its streamed answer; Ctrl-C stops it and forgets the question. */
async function turn(s: Session, rl: readline.Interface, text: string): Promise<void> {
  const out = process.stdout;
  const found = extractImagePaths(text);
  for (const p of found.paths) out.write(`Added image '${p}'\n`);
  const images = [...s.images, ...found.paths];
  s.images = [];
  let user: ChatMessage;
  try {
    if (images.length) {
      const why = noVision(s.model, s.info.capabilities);
      if (why) throw new CliError(why);
    }
    user = { role: "user", content: found.text, ...(images.length ? { images: readImages(images) } : {}) };
  } catch (err) {
    return report(err);
  }
  const abort = new AbortController();
  const onSigint = () => abort.abort();
  rl.pause();
  setRaw(false);
  process.on("SIGINT", onSigint);
  try {
    const res = await chatTurn(s.client, chatRequest(s, [...s.messages, user]), out, abort.signal);
    if (!res.stats) {
      out.write(res.content.endsWith("\n") ? "\n" : "\n\n");
      return;
    }
    s.messages.push(user, { role: "assistant", content: res.content });
    out.write(res.content.endsWith("\n") ? "\n" : "\n\n");
    if (s.verbose) process.stderr.write(`${formatStats(res.stats)}\n`);
  } catch (err) {
    out.write("\n");
    report(err);
  } finally {
    process.off("SIGINT", onSigint);
    setRaw(true);
    rl.resume();
  }
}

function report(err: unknown): void {
  if (err instanceof CliError) process.stderr.write(`wick: ${err.message}\n`);
  else throw err;
}

function setRaw(on: boolean): void {
  if (process.stdin.isTTY) process.stdin.setRawMode(on);
}

/** readline's history, newest first, from the file's last lines. */
function loadHistory(file: string): string[] {
  try {
    return readFileSync(file, "utf8").split("\n").filter(Boolean).slice(-1000).reverse();
  } catch {
    return [];
  }
}

function saveHistory(file: string, line: string): void {
  try {
    mkdirSync(path.dirname(file), { recursive: true });
    appendFileSync(file, `${line.replace(/\n/g, " ")}\n`);
  } catch {
    // history is a convenience: a read-only home only loses it
  }
}
