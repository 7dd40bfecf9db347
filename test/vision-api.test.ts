/**
 * Images through the APIs with real clients against a real server on 127.0.0.1: the `openai`
 * client with a data-URI image and with an http URL served from 127.0.0.1 (same answer), the
 * `ollama` client with `images` on /api/chat and /api/generate, /api/show's `vision`
 * capability; and the bad-input table, each a clear 400 after which the server keeps serving.
 */
import http from "node:http";
import type { AddressInfo } from "node:net";
import test from "ava";
import { Ollama } from "ollama";
import { loadImages, loadSharp } from "../ts/service/images/index.ts";
import { fixture, needs, type Asset } from "./helpers/assets.ts";
import { hugePngHeader, testImage } from "./helpers/images.ts";
import { loadModel, openaiClient, postJson, startServer, type LoadedModel, type RunningServer } from "./helpers/server.ts";

const sharp = await loadSharp().then(
  (s) => s,
  () => null,
);
const sharpAsset: Asset = sharp ? { path: "sharp" } : { missing: "the sharp package is not installed (npm install sharp)" };
const text = fixture("tiny-lfm2-vl-q8_0.gguf");
const proj = fixture("mmproj-tiny-lfm2-vl-q8_0.gguf");
const { serial, path: modelPath } = needs(text, proj, sharpAsset);

const img = testImage(320, 240, 9);
let vl: LoadedModel;
let plain: LoadedModel;
let server: RunningServer; // the VL model, private URLs allowed, 1.5 s fetch timeout, 1 MiB images
let strict: RunningServer; // the same model with --no-private-image-urls
let textOnly: RunningServer;
let files: http.Server;
let filesUrl = "";

test.before(async () => {
  if (!modelPath) return;
  vl = await loadModel(modelPath, { mmproj: (proj as { path: string }).path, contextSize: 4096 });
  plain = await loadModel(modelPath, { contextSize: 4096 });
  const images = { timeoutMs: 1500, maxBytes: 1024 * 1024 };
  server = await startServer({ registry: vl.registry, images });
  strict = await startServer({ registry: vl.registry, images: { ...images, allowPrivate: false } });
  textOnly = await startServer({ registry: plain.registry });
  files = http.createServer((req, res) => {
    if (req.url === "/img.png") return void res.writeHead(200, { "content-type": "image/png" }).end(img.png);
    if (req.url === "/moved") return void res.writeHead(302, { location: "/img.png" }).end();
    if (req.url === "/loop") return void res.writeHead(302, { location: "/loop" }).end();
    if (req.url === "/text") return void res.writeHead(200, { "content-type": "text/html" }).end("<html></html>");
    if (req.url === "/big") return void res.writeHead(200, { "content-type": "image/png" }).end(Buffer.alloc(2 * 1024 * 1024));
    if (req.url === "/slow") return; // never answers
    res.writeHead(404).end();
  });
  await new Promise<void>((r) => files.listen(0, "127.0.0.1", r));
  filesUrl = `http://127.0.0.1:${(files.address() as AddressInfo).port}`;
});

test.after.always(async () => {
  files?.closeAllConnections();
  files?.close();
  for (const s of [server, strict, textOnly]) await s?.close();
  await vl?.engine.unload();
  await plain?.engine.unload();
});

const MODEL = "tiny-lfm2-vl-q8_0";
const ask = (url: string) => ({
  model: MODEL,
  messages: [
    {
      role: "user" as const,
      content: [
        { type: "image_url" as const, image_url: { url } },
        { type: "text" as const, text: "What is in the image?" },
      ],
    },
  ],
  temperature: 0,
  max_tokens: 8,
});

serial("openai client: a data-URI image and the same image by http URL give the same answer", async (t) => {
  const client = openaiClient(server.url);
  const a = await client.chat.completions.create(ask(img.dataUri));
  const b = await client.chat.completions.create(ask(`${filesUrl}/moved`));
  // 320×240 → 320×256 (smart resize): 10×8 image tokens between <|image_start|> and <|image_end|>.
  t.true(a.usage!.prompt_tokens > 80, `prompt_tokens ${a.usage!.prompt_tokens}`);
  t.is(b.usage!.prompt_tokens, a.usage!.prompt_tokens);
  t.is(b.choices[0].message.content, a.choices[0].message.content);
  const textOnlyAnswer = await client.chat.completions.create({ ...ask(""), messages: [{ role: "user", content: "What is in the image?" }] });
  t.is(a.usage!.prompt_tokens - textOnlyAnswer.usage!.prompt_tokens, 2 + 80, "the image adds its markers and 80 embeddings");
});

serial("ollama client: images on /api/chat and /api/generate; /api/show says vision", async (t) => {
  const ollama = new Ollama({ host: server.url });
  const b64 = img.png.toString("base64");
  const chat = await ollama.chat({ model: MODEL, messages: [{ role: "user", content: "What is in the image?", images: [b64] }], options: { temperature: 0, num_predict: 8 } });
  const openai = await openaiClient(server.url).chat.completions.create(ask(img.dataUri));
  t.is(chat.message.content, openai.choices[0].message.content ?? "", "Ollama puts the images before the text, as here");
  t.is(chat.prompt_eval_count, openai.usage!.prompt_tokens);
  const gen = await ollama.generate({ model: MODEL, prompt: "What is in the image?", images: [b64], options: { temperature: 0, num_predict: 8 } });
  t.is(gen.response, chat.message.content);
  t.true((await ollama.show({ model: MODEL })).capabilities.includes("vision"));
  t.false((await new Ollama({ host: textOnly.url }).show({ model: MODEL })).capabilities.includes("vision"));
});

const bad: [string, () => { url: string; server?: () => RunningServer }, number, string | RegExp][] = [
  ["an image for a text-only model", () => ({ url: img.dataUri, server: () => textOnly }), 400, "image_input_not_supported"],
  ["non-image bytes", () => ({ url: `data:image/png;base64,${Buffer.from("not an image at all").toString("base64")}` }), 400, "invalid_image"],
  ["a truncated JPEG", () => ({ url: "JPEG" }), 400, "invalid_image"],
  ["a 100-megapixel image", () => ({ url: `data:image/png;base64,${hugePngHeader().toString("base64")}` }), 400, "image_too_large"],
  ["a URL that times out", () => ({ url: `${filesUrl}/slow` }), 400, "image_fetch_timeout"],
  ["a URL over the byte limit", () => ({ url: `${filesUrl}/big` }), 400, "image_too_large"],
  ["a URL that is not an image", () => ({ url: `${filesUrl}/text` }), 400, "invalid_image"],
  ["a redirect loop", () => ({ url: `${filesUrl}/loop` }), 400, "image_fetch_failed"],
  ["a file:// URL", () => ({ url: "file:///etc/passwd" }), 400, "invalid_image_url"],
  ["a loopback URL with --no-private-image-urls", () => ({ url: `${filesUrl}/img.png`, server: () => strict }), 400, "image_url_not_allowed"],
  ["localhost with --no-private-image-urls", () => ({ url: `${filesUrl.replace("127.0.0.1", "localhost")}/img.png`, server: () => strict }), 400, "image_url_not_allowed"],
  ["a link-local URL with --no-private-image-urls", () => ({ url: "http://169.254.169.254/latest/meta-data", server: () => strict }), 400, "image_url_not_allowed"],
];

for (const [name, make, status, code] of bad) {
  serial(`bad image input: ${name} → ${status} ${code}`, async (t) => {
    let { url, server: pick } = make();
    if (url === "JPEG") {
      const jpeg = await sharp!(img.png, {}).jpeg().toBuffer();
      url = `data:image/jpeg;base64,${jpeg.subarray(0, jpeg.length >> 1).toString("base64")}`;
    }
    const target = (pick ?? (() => server))();
    const res = await postJson(`${target.url}/v1/chat/completions`, ask(url));
    t.is(res.status, status, res.text);
    t.is(res.json.error.code, code, res.text);
    t.truthy(res.json.error.message);
    // The server keeps serving: a good image right after.
    const ok = await postJson(`${server.url}/v1/chat/completions`, ask(img.dataUri));
    t.is(ok.status, 200, ok.text);
  });
}

serial("decoding applies EXIF orientation and drops alpha", async (t) => {
  const small = testImage(40, 20, 3);
  const rotated = await sharp!(small.png, {}).jpeg().withMetadata({ orientation: 6 }).toBuffer();
  const rgba = await sharp!(small.png, {}).png({ palette: false }).toBuffer();
  const [a, b] = await loadImages([
    { url: `data:image/jpeg;base64,${rotated.toString("base64")}`, param: "a" },
    { url: `data:image/png;base64,${rgba.toString("base64")}`, param: "b" },
  ]);
  t.deepEqual([a.width, a.height], [20, 40], "orientation 6 turns 40×20 upright to 20×40");
  t.is(a.rgb.length, 20 * 40 * 3);
  t.deepEqual(b.rgb, small.rgb, "a PNG decodes to exactly its pixels");
});

serial("an image that does not fit the context is blamed on the messages", async (t) => {
  const small = await loadModel(modelPath!, { mmproj: (proj as { path: string }).path, contextSize: 512 });
  const s = await startServer({ registry: small.registry });
  try {
    const big = testImage(1200, 900, 2); // 6 tiles + thumbnail: 1790 image positions
    const res = await postJson(`${s.url}/v1/chat/completions`, ask(big.dataUri));
    t.is(res.status, 400, res.text);
    t.is(res.json.error.param, "messages", res.text);
    t.regex(res.json.error.message, /context length is 512/);
  } finally {
    await s.close();
    await small.engine.unload();
  }
});
