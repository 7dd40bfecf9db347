/**
 * Images through `wick run` as a person uses it: an LFM2-VL model pulled from a (loopback) hub
 * repo with its mmproj file, then in a real terminal `/image <path> <question>` and a path
 * inside the prompt text; one-shot `--image`. Each answer (greedy) equals the one the server's
 * /api/chat gives for the same image bytes and question — the CLI sends the image, not a
 * description of it — and a second image changes the answer's prompt.
 */
import { readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { fixture, needs, repoRoot } from "./helpers/assets.ts";
import { BIN, cliHome } from "./helpers/cli.ts";
import { startHub } from "./helpers/hub.ts";
import { testImage } from "./helpers/images.ts";
import { prompt, say, spawnPty } from "./helpers/pty.ts";

const text = fixture("tiny-lfm2-vl-q8_0.gguf");
const proj = fixture("mmproj-tiny-lfm2-vl-q8_0.gguf");
const { serial, path: modelPath } = needs(text, proj);

const REF = "hf.co/wick-test/Tiny-VL-GGUF:Q8_0";
const QUESTION = "What is in the image?";
const OPTIONS = { temperature: 0, num_predict: 8 };

serial("wick run on a pulled LFM2-VL model: /image, a path in the prompt and one-shot --image answer as /api/chat does with the same image", async (t) => {
  const hub = await startHub();
  const h = await cliHome({ HF_ENDPOINT: hub.url });
  const p = spawnPty(process.execPath, [BIN, "run", REF], { cwd: repoRoot, env: h.env });
  try {
    await hub.addRepo("wick-test/Tiny-VL-GGUF", [
      { path: "Tiny-VL-Q8_0.gguf", source: modelPath! },
      { path: "mmproj-Tiny-VL-Q8_0.gguf", source: (proj as { path: string }).path },
    ]);
    const a = path.join(h.home, "a.png");
    const b = path.join(h.home, "b.png");
    writeFileSync(a, testImage(320, 240, 9).png);
    writeFileSync(b, testImage(700, 300, 4).png);

    await prompt(p, 0, 120_000); // pulls the repo (model + projector), starts a server, loads
    t.regex(p.screen(), /pulling manifest\n/);
    await say(p, "/set parameter temperature 0");
    await say(p, "/set parameter num_predict 8");

    /** The answer the server gives to one user message with these images, through the Ollama API. */
    const served = async (files: string[]): Promise<string> => {
      const images = files.map((f) => readFileSync(f).toString("base64"));
      const res = await fetch(`http://127.0.0.1:${h.port}/api/chat`, {
        method: "POST",
        body: JSON.stringify({ model: REF, messages: [{ role: "user", content: QUESTION, images }], stream: false, options: OPTIONS }),
      });
      t.is(res.status, 200);
      const body = (await res.json()) as { message: { content: string }; prompt_eval_count: number };
      return body.message.content;
    };

    const viaSlash = await say(p, `/image ${a} ${QUESTION}`);
    t.true(viaSlash.startsWith(`Added image '${a}'\n`), viaSlash);
    const answerA = await served([a]);
    t.is(viaSlash.slice(`Added image '${a}'\n`.length).trimEnd(), answerA.trimEnd(), "/image answers as /api/chat with the same image");

    t.is(await say(p, "/clear"), "Cleared session context\n");
    const viaPath = await say(p, `${QUESTION} ${a}`);
    t.is(viaPath, `Added image '${a}'\n${answerA.trimEnd()}\n\n`, "a path in the prompt is the same image");

    // /image without a question waits for the next message; two images in one message.
    t.is(await say(p, "/clear"), "Cleared session context\n");
    t.is(await say(p, `/image ${b}`), `Added image '${b}'\n`);
    const two = await say(p, `${QUESTION} ${a}`);
    t.is(two, `Added image '${a}'\n${(await served([b, a])).trimEnd()}\n\n`, "the waiting image goes first, then the one in the text");

    p.type("/bye\r");
    t.is(await p.exited, 0);

    const oneShot = await h.wick(["run", REF, "--image", a, QUESTION, "--temp", "0", "-n", "8"]);
    t.is(oneShot.status, 0, oneShot.stderr);
    t.is(oneShot.stdout.trimEnd(), answerA.trimEnd(), "one-shot --image");
  } finally {
    p.kill();
    await h.close();
    await hub.close();
  }
});
