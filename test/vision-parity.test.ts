/**
 * LFM2-VL answers token for token as llama.cpp: the synthetic `lfm2` text model with the
 * synthetic LFM2-VL projector, served by Wick and by llama-server `--mmproj` (built from the
 * bundled llama.cpp), the same chat with data-URI PNG images sent to both at temperature 0:
 * `prompt_tokens` and the greedy answer (text, and each token's logprob) are equal. Cases: one
 * tile, tiled + thumbnail, very wide, very tall, and two images in one message.
 * llama-server runs with flash attention off (as the parity tests' llama.cpp does) and without
 * context checkpoints (so it decodes each text and image chunk of the prompt in one piece, as
 * Wick does).
 */
import test from "ava";
import { fixture, needs } from "./helpers/assets.ts";
import { testImage, type TestImage } from "./helpers/images.ts";
import { llamaServerBin, startLlamaServer, type LlamaServer } from "./helpers/llama-server.ts";
import { serveModel, postJson } from "./helpers/server.ts";

const text = fixture("tiny-lfm2-vl-q8_0.gguf");
const proj = fixture("mmproj-tiny-lfm2-vl-q8_0.gguf");
const bin = llamaServerBin();
const { serial, path: modelPath } = needs(text, proj, bin);
const projPath = "path" in proj ? proj.path : "";
const N = 12;

const served = serveModel(modelPath, { mmproj: projPath, contextSize: 8192, maxSequences: 2 });
let peer: LlamaServer | undefined;

test.before(async () => {
  if (!modelPath) return;
  const args = ["-m", modelPath, "--mmproj", projPath, "-c", "8192", "-np", "1", "-t", "2", "-fa", "off", "--ctx-checkpoints", "0", "--jinja", "--no-warmup", "--cache-ram", "0"];
  peer = await startLlamaServer((bin as { path: string }).path, args);
});
test.after.always(() => peer?.stop());

type Part = { type: "text"; text: string } | { type: "image_url"; image_url: { url: string } };

function body(content: Part[]) {
  return { model: "m", messages: [{ role: "user", content }], temperature: 0, max_tokens: N, ignore_eos: true, logprobs: true, top_logprobs: 1 };
}

const img = (i: TestImage): Part => ({ type: "image_url", image_url: { url: i.dataUri } });
const cases: [string, () => Part[]][] = [
  ["one tile (200×150)", () => [img(testImage(200, 150, 1)), { type: "text", text: "What is in the image?" }]],
  ["tiled + thumbnail (1200×900 → 3×2)", () => [{ type: "text", text: "Describe:" }, img(testImage(1200, 900, 2))]],
  ["very wide (2400×400 → 6×1)", () => [img(testImage(2400, 400, 3)), { type: "text", text: "What is this?" }]],
  ["very tall (400×2400 → 1×6)", () => [img(testImage(400, 2400, 4)), { type: "text", text: "What is this?" }]],
  ["two images in one message", () => [{ type: "text", text: "Compare" }, img(testImage(300, 200, 5)), { type: "text", text: "with" }, img(testImage(640, 480, 6)), { type: "text", text: "please." }]],
];

for (const [name, content] of cases) {
  serial(`answers equal llama-server --mmproj: ${name}`, async (t) => {
    const req = body(content());
    const [want, got] = [await postJson(`${peer!.url}/v1/chat/completions`, req), await postJson(`${served.server.url}/v1/chat/completions`, req)];
    t.is(want.status, 200, want.text);
    t.is(got.status, 200, got.text);
    t.is(got.json.usage.prompt_tokens, want.json.usage.prompt_tokens, "prompt_tokens");
    t.is(got.json.usage.completion_tokens, N);
    const wantLp = want.json.choices[0].logprobs.content as { id: number; logprob: number }[];
    const gotLp = got.json.choices[0].logprobs.content as { id: number; logprob: number }[];
    // llama-server leaves a token out of its logprobs list when its text is an incomplete
    // UTF-8 sequence; every token it lists must be Wick's next one, with the same logprob.
    let at = 0;
    let worst = 0;
    for (const w of wantLp) {
      while (at < gotLp.length && gotLp[at].id !== w.id) at++;
      t.true(at < gotLp.length, `llama-server's token ${w.id} is not in Wick's answer ${JSON.stringify(gotLp.map((c) => c.id))}`);
      if (at >= gotLp.length) return;
      worst = Math.max(worst, Math.abs(gotLp[at].logprob - w.logprob));
      at++;
    }
    t.true(gotLp.length - wantLp.length <= 3, "at most a few tokens unlisted by llama-server");
    t.true(worst < 1e-3, `logprobs differ by up to ${worst}`);
    t.is(got.json.choices[0].message.content, want.json.choices[0].message.content, "greedy text");
    t.log(`prompt_tokens ${want.json.usage.prompt_tokens}, largest logprob difference ${worst.toExponential(2)}`);
  });
}
