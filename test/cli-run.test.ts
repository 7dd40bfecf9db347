/**
 * `wick run` driven as a person would: in a real terminal (a pseudo-terminal, test/helpers/pty.ts)
 * the interactive chat starts a server, answers, becomes deterministic after
 * `/set parameter temperature 0`, stops an answer on Ctrl-C and returns to the prompt, takes
 * `"""` blocks, slash commands and the arrow-key history, and leaves on /bye or Ctrl-D; one-shot
 * runs (a prompt, stdin piped in, a .gguf loaded in process) print the answer and exit 0; pull
 * draws a progress bar on a terminal.
 */
import test from "ava";
import { readFileSync, writeFileSync, existsSync } from "node:fs";
import path from "node:path";
import { createModel, ModelStore } from "../ts/store/index.ts";
import { progressReporter } from "../ts/cli/progress.ts";
import { needs, repoRoot, smollm2 } from "./helpers/assets.ts";
import { BIN, cliHome, type CliHome } from "./helpers/cli.ts";
import { startHub } from "./helpers/hub.ts";
import { prompt, say, spawnPty, type Pty } from "./helpers/pty.ts";

const { path: smol, serial } = needs(smollm2());

/** A home whose store has `plain` (no Modelfile parameters: Ollama's defaults, temperature 0.8) and `smol`. */
async function home(extraEnv: NodeJS.ProcessEnv = {}): Promise<CliHome> {
  const h = await cliHome(extraEnv);
  const store = new ModelStore({ home: h.home });
  await createModel(store, "plain", `FROM ${smol}`);
  await createModel(store, "smol", `FROM ${smol}\nPARAMETER temperature 0\nPARAMETER num_predict 8`);
  return h;
}

const runPty = (h: CliHome, args: string[]) => {
  const p = spawnPty(process.execPath, [BIN, ...args], { cwd: repoRoot, env: h.env });
  opened.push(p);
  return p;
};

/** Every terminal a test opened is closed when it ends, passed or not. */
const opened: Pty[] = [];
test.afterEach.always(() => {
  for (const p of opened.splice(0)) p.kill();
});

serial("the interactive chat in a terminal: answers, temperature 0 is deterministic, Ctrl-C stops an answer, slash commands, history, /bye", async (t) => {
  const h = await home();
  try {
    t.is(h.serverPid(), undefined);
    const p = runPty(h, ["run", "plain"]);
    await prompt(p, 0);
    t.truthy(h.serverPid(), "wick run started a server");
    t.regex(p.screen(), /^wick: starting a server at 127\.0\.0\.1:\d+ \(log: .*server\.log\)\n>>> $/, "a terminal is told, once");

    t.is(await say(p, "/set parameter num_predict 16"), "Set parameter 'num_predict' to '16'\n");
    const ask = async () => {
      const a = await say(p, "Tell me a short joke.");
      t.regex(a, /\S/);
      t.true(a.endsWith("\n\n"), JSON.stringify(a));
      t.is(await say(p, "/clear"), "Cleared session context\n");
      return a;
    };
    const sampled = [await ask(), await ask(), await ask()];
    t.log(
      "temperature 0.8:",
      sampled.map((a) => a.trim()),
    );
    t.true(new Set(sampled).size > 1, "sampled answers differ");
    t.is(await say(p, "/set parameter temperature 0"), "Set parameter 'temperature' to '0'\n");
    const greedy = [await ask(), await ask()];
    t.is(greedy[0], greedy[1], "greedy answers are the same");

    // Ctrl-C mid-answer: back to the prompt at once, the server stops generating.
    await say(p, "/set parameter num_predict 3000");
    const from = p.screen().length;
    p.type("Repeat the word hello 500 times.\r");
    await p.waitFor(/hello, hello, hello/i, { from });
    const sent = Date.now();
    p.type("\x03");
    await prompt(p, from + 10, 5_000);
    const stoppedAfter = Date.now() - sent;
    t.true(stoppedAfter < 3_000, `prompt back ${stoppedAfter} ms after Ctrl-C`);
    const answer = p.screen().slice(from);
    t.true((answer.match(/hello/gi)?.length ?? 0) < 400, "the answer was cut short");
    const metrics = await (await fetch(`http://127.0.0.1:${h.port}/metrics`)).text();
    t.regex(metrics, /wick:num_requests_running\{model_name="plain:latest"\} 0/, "generation cancelled on the server");

    // Ctrl-C at an empty prompt says how to leave; on a typed line it drops the line.
    let at = p.screen().length;
    p.type("\x03");
    at = await p.waitFor("Use Ctrl + d or /bye to exit.\n>>> ", { from: at });
    p.type("half a line\x03");
    await p.waitFor("half a line^C\n>>> ", { from: at });
    await say(p, "/set parameter num_predict 16");

    // """ blocks, /show, unknown commands, images without vision.
    at = p.screen().length;
    p.type('/set system """You are\r');
    at = await p.waitFor('/set system """You are\n... ', { from: at });
    p.type('a pirate."""\r');
    await p.waitFor("Set system message.\n>>> ", { from: at });
    t.is(await say(p, "/show system"), "You are\na pirate.\n");
    t.is(await say(p, "\x1b[A"), "You are\na pirate.\n", "arrow up recalls /show system");
    t.regex(await say(p, "/show info"), /^ {2}Model\n {4}architecture {8}llama\n/);
    t.regex(await say(p, "/show parameters"), /^User defined parameters:\nnum_predict +16\ntemperature +0\n/);
    t.regex(await say(p, "/show template"), /<\|im_start\|>/);
    t.is(await say(p, "/frobnicate"), "Unknown command '/frobnicate'. Type /? for help\n");
    t.regex(await say(p, "/?"), /^Available Commands:\n/);
    const png = path.join(h.home, "cat.png");
    writeFileSync(png, Buffer.from("89504e470d0a1a0a", "hex"));
    const noVision = "wick: plain does not take images: it has no vision projector (serve it with --mmproj, or pull a repo that has an mmproj file); nothing was sent\n";
    t.is(await say(p, `what is in ${png}`), `Added image '${png}'\n${noVision}`);
    t.is(await say(p, `/image ${png} What is this?`), `Added image '${png}'\n${noVision}`);
    at = p.screen().length;
    p.type('"""Say the word\r');
    at = await p.waitFor('"""Say the word\n... ', { from: at });
    p.type('yes."""\r');
    await prompt(p, at + 6);
    t.is(await say(p, "/save pirate"), "Created new model 'pirate'\n");
    t.is(await say(p, "/load smol"), "Loading model 'smol'\n");
    t.regex(await say(p, "/show parameters"), /Model defined parameters:\nnum_predict +8\ntemperature +0\n/);

    at = p.screen().length;
    p.type("/bye\r");
    t.is(await p.exited, 0);
    const history = readFileSync(path.join(h.home, "history"), "utf8");
    t.regex(history, /\/show system\n/);
    // /save kept the session's system message, parameters and conversation.
    t.is((await h.wick(["show", "pirate", "--system"])).stdout, "You are\na pirate.\n");
    t.regex((await h.wick(["show", "pirate", "--parameters"])).stdout, /^num_predict +16\ntemperature +0\n$/);
    t.regex((await h.wick(["show", "pirate", "--modelfile"])).stdout, /\nMESSAGE user "?Say the word\s+yes\./);
  } finally {
    await h.close();
  }
});

serial("Ctrl-D at the prompt leaves with exit 0; the history of the last session comes back with arrow up", async (t) => {
  const h = await home();
  try {
    writeFileSync(path.join(h.home, "history"), "/show parameters\n");
    const p = runPty(h, ["run", "smol"]);
    await prompt(p, 0);
    t.regex(await say(p, "\x1b[A"), /^Model defined parameters:\n/);
    p.type("\x04");
    t.is(await p.exited, 0);
  } finally {
    await h.close();
  }
});

serial("one-shot: a prompt, stdin piped in before it, --verbose timings; exit 0", async (t) => {
  const h = await home();
  try {
    const r = await h.wick(["run", "smol", "What is the capital of France?"]);
    t.is(r.status, 0, r.stderr);
    t.regex(r.stdout, /\S\n$/);
    t.is(r.stderr, "");
    const alone = await h.wick(["run", "smol", "Summarize:", "--verbose"]);
    const piped = await h.wick(["run", "smol", "Summarize:", "--verbose"], { input: "The cat sat on the mat all day, watching the birds in the garden.\n" });
    t.is(piped.status, 0, piped.stderr);
    t.regex(piped.stdout, /\S/);
    const evalCount = (s: string) => Number(/prompt eval count: +(\d+) token\(s\)/.exec(s)?.[1]);
    t.regex(piped.stderr, /^total duration: +\S+\nload duration: .*\neval rate: +[\d.]+ tokens\/s\n$/s);
    t.true(evalCount(piped.stderr) > evalCount(alone.stderr) + 10, "the piped text is in the prompt");
    const llamaCli = await h.wick([
      "run",
      "-m",
      "smol",
      "-p",
      "Say hi",
      "-n",
      "3",
      "--temp",
      "0",
      "--top-k",
      "40",
      "--top-p",
      "0.9",
      "--min-p",
      "0.05",
      "--repeat-penalty",
      "1.1",
      "--seed",
      "7",
      "--verbose",
    ]);
    t.is(llamaCli.status, 0, llamaCli.stderr);
    t.regex(llamaCli.stderr, /\neval count: +3 token\(s\)\n/, "-n 3");
  } finally {
    await h.close();
  }
});

serial("one-shot on a .gguf path loads it in process: no server is started", async (t) => {
  const h = await cliHome();
  try {
    const r = await h.wick(["run", smol!, "Say hi", "-n", "6", "--temp", "0", "--image-max-tokens", "64"]);
    t.is(r.status, 0, r.stderr);
    t.regex(r.stdout, /\S\n$/);
    t.deepEqual(r.lines, ["wick: note: --image-max-tokens: the image token budget is the server's: set it with wick serve --image-max-tokens"]);
    t.false(existsSync(path.join(h.home, "logs")), "no server, no log");
    const again = await h.wick(["run", smol!, "Say hi", "-n", "6", "--temp", "0"]);
    t.is(again.stdout, r.stdout, "greedy: the same answer");
    const png = path.join(h.home, "x.png");
    writeFileSync(png, "");
    const img = await h.wick(["run", smol!, "--image", png, "What is this?"]);
    t.is(img.status, 1);
    t.deepEqual(img.lines, ["wick: SmolLM2-135M-Instruct.Q4_1 does not take images: it has no vision projector (serve it with --mmproj, or pull a repo that has an mmproj file); nothing was sent"]);
  } finally {
    await h.close();
  }
});

serial("pull on a terminal draws a progress bar", async (t) => {
  const hub = await startHub();
  const h = await cliHome({ HF_ENDPOINT: hub.url });
  try {
    await hub.addRepo("wick-test/SmolLM2-GGUF", [{ path: "SmolLM2-135M-Instruct-Q4_1.gguf", source: smol! }]);
    const p = runPty(h, ["pull", "hf.co/wick-test/SmolLM2-GGUF:Q4_1"]);
    t.is(await p.exited, 0, p.screen());
    const raw = p.raw();
    t.regex(raw, /\r\x1b\[Kpulling [0-9a-f]{12}: +\d+% ▕[█ ]+▏ /, "redrawn in place");
    const screen = p.screen();
    t.regex(screen, /pulling manifest\n/);
    t.regex(screen, /pulling [0-9a-f]{12}: 100% ▕█+▏ 98 MB\n/, "the finished bar");
    t.regex(screen, /verifying sha256 digest\nwriting manifest\nsuccess\n$/);
  } finally {
    await h.close();
    await hub.close();
  }
});

test("the progress bar: bytes done and total, speed and time left, then the finished bar", (t) => {
  let out = "";
  let now = 0;
  const sink = { write: (s: string) => ((out += s), true), columns: 100 } as unknown as NodeJS.WritableStream;
  const bar = progressReporter({ out: sink, tty: true, now: () => now });
  bar({ status: "pulling manifest" });
  const total = 500_000_000;
  for (const [t2, done] of [
    [0, 0],
    [1000, 50_000_000],
    [2000, 100_000_000],
  ] as const) {
    now = t2;
    bar({ status: "pulling 0123456789ab", digest: "sha256:x", total, completed: done });
  }
  const last = out.slice(out.lastIndexOf("\r\x1b[K") + 4);
  t.regex(last, /^pulling 0123456789ab: +20% ▕█+ +▏ 100 MB\/500 MB {2}50 MB\/s {2}8\.00s$/);
  t.true(last.length <= 100, "fits the terminal");
  now = 3000;
  bar({ status: "pulling 0123456789ab", digest: "sha256:x", total, completed: total });
  bar({ status: "success" });
  t.regex(out, /pulling 0123456789ab: 100% ▕█+▏ 500 MB\nsuccess\n$/);
  t.true(out.startsWith("pulling manifest\n"));
});
