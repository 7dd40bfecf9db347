/**
 * LoRA adapters through the user-facing surface of a real `wick serve` (a child process on
 * loopback, its own store): llama-server's flags (`--lora`), vLLM's (`--lora-modules`,
 * `--enable-lora`, `--max-loras` with a notice), per-request `lora: [{id, scale}]` (the openai
 * client passes the extra body key through), `model: "<adapter>"`, `GET/POST /lora-adapters`,
 * `/v1/load_lora_adapter` and `/v1/unload_lora_adapter`, and Ollama's ADAPTER / `adapters` in
 * /api/create, shown by /api/show. Behaviour is checked on greedy output: an adapter changes it,
 * scale 0 is the base. Bad input is a 4xx in each API's shape and the server keeps serving.
 */
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import test from "ava";
import { normalizeArgv } from "../ts/cli/flags.ts";
import { loraModule, loraScaled } from "../ts/cli/values.ts";
import { fixture, needs, writeFixtures } from "./helpers/assets.ts";
import { BIN, cliHome, type CliHome } from "./helpers/cli.ts";
import { spawnServe, type ServedProcess } from "./helpers/process.ts";
import { openaiClient, postJson } from "./helpers/server.ts";
import type OpenAI from "openai";

const ATTN = "lora-tiny-llama-q8_0-attn-f16.gguf";
const FFN = "lora-tiny-llama-q8_0-ffn-f32.gguf";
const ALL = "lora-tiny-llama-q8_0-all-q8_0.gguf";
const LFM2 = "lora-tiny-lfm2-q8_0-attn-f16.gguf";
writeFixtures(["tiny-llama-q8_0.gguf", ATTN, FFN, ALL, LFM2]);
writeFixtures(["bad-lora-wrong-base.gguf"], ["--bad"]);
const need = needs(fixture("tiny-llama-q8_0.gguf"), fixture(ATTN), fixture(FFN), fixture(ALL), fixture(LFM2), fixture("bad-lora-wrong-base.gguf"));
const file = (name: string) => (fixture(name) as { path: string }).path;

let home: CliHome;
let served: ServedProcess;
let client: OpenAI;
const BASE_ID = "tiny-llama-q8_0";

test.before(async () => {
  if (!need.path) return;
  home = await cliHome();
  served = await spawnServe(
    BIN,
    ["-m", need.path, "--port", "0", "-c", "512", "-np", "4", "--lora", file(ATTN), "--lora-modules", `ffn=${file(FFN)}`, "--enable-lora", "--max-loras", "4", "--max-lora-rank", "64"],
    { cwd: home.home, env: home.env },
  );
  client = openaiClient(served.url);
});

test.after.always(async () => {
  served?.child.kill("SIGTERM");
  await served?.exit;
  await home?.close();
});

const MESSAGES = [{ role: "user" as const, content: "Tell me a story about a lighthouse." }];

/** Greedy chat text, with the extra body keys (`lora`) passed through by the openai client. */
async function chat(extra: Record<string, unknown> = {}, model = BASE_ID): Promise<{ text: string; model: string }> {
  const res = await client.chat.completions.create({ model, messages: MESSAGES, max_tokens: 24, temperature: 0, ...extra } as OpenAI.ChatCompletionCreateParamsNonStreaming);
  return { text: res.choices[0].message.content ?? "", model: res.model };
}

async function getJson(path: string): Promise<{ status: number; body: unknown }> {
  const res = await fetch(served.url + path);
  return { status: res.status, body: (await res.json()) as unknown };
}

const OFF = { lora: [] };

need.serial("flags: --enable-lora and --max-loras are noticed, --lora and --lora-modules load in id order (the module off by default)", async (t) => {
  t.regex(served.stderr(), /ignoring --enable-lora \(vLLM flag/);
  t.regex(served.stderr(), /ignoring --max-loras \(vLLM flag/);
  const { status, body } = await getJson("/lora-adapters");
  t.is(status, 200);
  t.deepEqual(
    (body as { id: number; path: string; scale: number; name: string }[]).map(({ id, path, scale, name }) => ({ id, path, scale, name })),
    [
      { id: 0, path: file(ATTN), scale: 1, name: ATTN.replace(/\.gguf$/, "") },
      { id: 1, path: file(FFN), scale: 0, name: "ffn" },
    ],
  );
});

need.serial("per-request lora: an adapter changes greedy output, scale 0 equals the base, the default is --lora's scale 1", async (t) => {
  const base = await chat(OFF);
  const zero = await chat({ lora: [{ id: 0, scale: 0 }] });
  const dflt = await chat();
  const attn = await chat({ lora: [{ id: 0, scale: 1 }] });
  t.is(zero.text, base.text);
  t.is(dflt.text, attn.text);
  t.not(attn.text, base.text);
  // /v1/completions takes the same field.
  const completion = async (extra: Record<string, unknown>) =>
    (await client.completions.create({ model: BASE_ID, prompt: "Once upon a time", max_tokens: 16, temperature: 0, ...extra } as OpenAI.CompletionCreateParamsNonStreaming)).choices[0].text;
  t.is(
    await completion({
      lora: [
        { id: 0, scale: 0 },
        { id: 1, scale: 0 },
      ],
    }),
    await completion(OFF),
  );
  t.not(await completion({ lora: [{ id: 1, scale: 1 }] }), await completion(OFF));
});

need.serial("model: '<adapter>' (vLLM): the base with that adapter alone; the answer names the adapter; /v1/models lists it with its parent", async (t) => {
  const byName = await chat({}, "ffn");
  t.is(byName.model, "ffn");
  t.is(byName.text, (await chat({ lora: [{ id: 1, scale: 1 }] })).text);
  t.not(byName.text, (await chat(OFF)).text);
  const models = (await client.models.list()).data as unknown as { id: string; parent?: string; root?: string }[];
  const ffn = models.find((m) => m.id === "ffn");
  t.truthy(ffn);
  t.is(ffn!.parent, BASE_ID);
  t.is(ffn!.root, file(FFN));
  t.is((await client.models.retrieve("ffn")).id, "ffn");
});

need.serial("POST /lora-adapters sets the default scales", async (t) => {
  const base = await chat(OFF);
  const r = await postJson(`${served.url}/lora-adapters`, [{ id: 0, scale: 0 }]);
  t.is(r.status, 200);
  t.deepEqual(r.json, { success: true });
  t.is((await chat()).text, base.text);
  const listed = (await getJson("/lora-adapters")).body as { id: number; scale: number }[];
  t.is(listed[0].scale, 0);
  await postJson(`${served.url}/lora-adapters`, [{ id: 0, scale: 1 }]);
  t.not((await chat()).text, base.text);
});

need.serial("vLLM's /v1/load_lora_adapter and /v1/unload_lora_adapter: load, chat by name, unload", async (t) => {
  const load = await fetch(`${served.url}/v1/load_lora_adapter`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ lora_name: "all", lora_path: file(ALL) }) });
  t.is(load.status, 200);
  t.is(await load.text(), "Success: LoRA adapter 'all' added successfully.");
  const all = await chat({}, "all");
  t.is(all.model, "all");
  t.not(all.text, (await chat(OFF)).text);
  t.true((await client.models.list()).data.some((m) => m.id === "all"));
  // Requests naming the base do not get it (vLLM loads adapters off).
  const listed = (await getJson("/lora-adapters")).body as { name: string; scale: number }[];
  t.is(listed.find((a) => a.name === "all")?.scale, 0);
  const again = await postJson(`${served.url}/v1/load_lora_adapter`, { lora_name: "all", lora_path: file(ALL) });
  t.is(again.status, 400);
  t.regex((again.json as { error: { message: string } }).error.message, /already been loaded/);

  const unload = await fetch(`${served.url}/v1/unload_lora_adapter`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ lora_name: "all" }) });
  t.is(unload.status, 200);
  t.is(await unload.text(), "Success: LoRA adapter 'all' removed successfully.");
  t.false((await client.models.list()).data.some((m) => m.id === "all"));
  const gone = await postJson(`${served.url}/v1/unload_lora_adapter`, { lora_name: "all" });
  t.is(gone.status, 404);
  t.is((gone.json as { error: { type: string } }).error.type, "invalid_request_error");
});

need.serial("bad input: unknown id, a scale that is not a number, wrong-base and missing adapters → 4xx in OpenAI's shape; the server keeps serving", async (t) => {
  const cases: [string, string, unknown, number, RegExp][] = [
    ["unknown id", "/v1/chat/completions", { model: BASE_ID, messages: MESSAGES, max_tokens: 2, lora: [{ id: 9, scale: 1 }] }, 400, /no LoRA adapter with id 9/],
    ["NaN scale as a string", "/v1/chat/completions", { model: BASE_ID, messages: MESSAGES, max_tokens: 2, lora: [{ id: 0, scale: "NaN" }] }, 400, /lora\[0\]\.scale/],
    ["POST /lora-adapters unknown id", "/lora-adapters", [{ id: 9, scale: 1 }], 400, /no LoRA adapter with id 9/],
    ["POST /lora-adapters not an array", "/lora-adapters", { id: 0, scale: 1 }, 400, /must be an array/],
    ["wrong architecture", "/v1/load_lora_adapter", { lora_name: "x", lora_path: file(LFM2) }, 400, /made for a `lfm2` model, the loaded model is `llama`/],
    ["wrong base tensors", "/v1/load_lora_adapter", { lora_name: "x", lora_path: file("bad-lora-wrong-base.gguf") }, 400, /LoRA adapter .*bad-lora-wrong-base\.gguf/],
    ["not an adapter", "/v1/load_lora_adapter", { lora_name: "x", lora_path: need.path! }, 400, /not a LoRA adapter/],
    ["missing file", "/v1/load_lora_adapter", { lora_name: "x", lora_path: "/nonexistent/lora.gguf" }, 400, /no such file/],
    ["missing lora_path", "/v1/load_lora_adapter", { lora_name: "x" }, 400, /lora_path/],
  ];
  for (const [name, route, body, status, message] of cases) {
    const r = await postJson(served.url + route, body);
    t.is(r.status, status, name);
    const err = (r.json as { error?: { message?: string; type?: string } }).error;
    t.is(err?.type, "invalid_request_error", name);
    t.regex(err?.message ?? "", message, name);
  }
  t.deepEqual(
    ((await getJson("/lora-adapters")).body as { name: string }[]).map((a) => a.name),
    [ATTN.replace(/\.gguf$/, ""), "ffn"],
  );
  t.truthy((await chat()).text);
});

need.serial("Ollama: ADAPTER in a Modelfile and `adapters` in /api/create → an adapter layer, shown by /api/show, loaded with the model", async (t) => {
  const withAdapter = (await chat({ lora: [{ id: 0, scale: 1 }] })).text;
  const base = (await chat(OFF)).text;
  const created = await postJson(`${served.url}/api/create`, { model: "tuned", modelfile: `FROM ${need.path}\nADAPTER ${file(ATTN)}\n`, stream: false });
  t.is(created.status, 200, JSON.stringify(created.json));
  const manifest = JSON.parse(readFileSync(`${home.home}/manifests/registry.ollama.ai/library/tuned/latest`, "utf8")) as { layers: { mediaType: string; digest: string }[] };
  const adapterLayer = manifest.layers.find((l) => l.mediaType === "application/vnd.ollama.image.adapter");
  t.is(
    adapterLayer?.digest,
    `sha256:${createHash("sha256")
      .update(readFileSync(file(ATTN)))
      .digest("hex")}`,
  );
  const show = await postJson(`${served.url}/api/show`, { model: "tuned" });
  t.is(show.status, 200);
  t.regex((show.json as { modelfile: string }).modelfile, /^FROM .*\nADAPTER .*sha256-[0-9a-f]{64}$/m);
  const tuned = await chat({}, "tuned");
  t.is(tuned.model, "tuned:latest");
  t.is(tuned.text, withAdapter);
  t.not(tuned.text, base);
  // The baked adapter is the model's own, not a model id of its own.
  t.false((await client.models.list()).data.some((m) => (m as unknown as { parent?: string }).parent === "tuned:latest"));

  // `adapters` naming an uploaded blob, as ollama create sends it.
  const bytes = readFileSync(file(FFN));
  const digest = `sha256:${createHash("sha256").update(bytes).digest("hex")}`;
  t.is((await fetch(`${served.url}/api/blobs/${digest}`, { method: "POST", body: bytes })).status, 201);
  const viaBlobs = await postJson(`${served.url}/api/create`, { model: "tuned-ffn", from: need.path, adapters: { "ffn.gguf": digest }, stream: false });
  t.is(viaBlobs.status, 200, JSON.stringify(viaBlobs.json));
  t.is((await chat({}, "tuned-ffn")).text, (await chat({}, "ffn")).text);
});

need.serial("Ollama: a wrong-base or missing ADAPTER is a 400 in Ollama's shape before anything is written", async (t) => {
  const bad: [string, unknown, number, RegExp][] = [
    ["other architecture", { model: "bad1", modelfile: `FROM ${need.path}\nADAPTER ${file(LFM2)}\n` }, 400, /line 2.*made for a `lfm2` model, the base model is `llama`/],
    ["not an adapter", { model: "bad2", modelfile: `FROM ${need.path}\nADAPTER ${need.path}\n` }, 400, /not a LoRA adapter/],
    ["missing", { model: "bad3", modelfile: `FROM ${need.path}\nADAPTER /nonexistent/a.gguf\n` }, 404, /no such file/],
    ["relative path", { model: "bad4", modelfile: `FROM ${need.path}\nADAPTER ./a.gguf\n` }, 400, /must be absolute/],
  ];
  for (const [name, body, status, message] of bad) {
    const r = await postJson(`${served.url}/api/create`, { ...(body as object), stream: false });
    t.is(r.status, status, name);
    t.regex((r.json as { error: string }).error, message, name);
  }
  // Shapes that do not fit are found when the model loads: a 400 naming the adapter, the server unharmed.
  const wrongBase = await postJson(`${served.url}/api/create`, { model: "bad5", modelfile: `FROM ${need.path}\nADAPTER ${file("bad-lora-wrong-base.gguf")}\n`, stream: false });
  if (wrongBase.status === 200) {
    const r = await postJson(`${served.url}/api/chat`, { model: "bad5", messages: MESSAGES, stream: false });
    t.is(r.status, 400);
    t.regex((r.json as { error: string }).error, /LoRA adapter/);
  } else {
    t.is(wrongBase.status, 400);
  }
  t.truthy((await chat()).text);
});

test("flags: --lora-modules takes several values after one flag (vLLM's nargs), JSON too; --lora-scaled is FNAME:SCALE", (t) => {
  const { args } = normalizeArgv(["serve", "-m", "m.gguf", "--lora-modules", "a=/x.gguf", '{"name":"b","path":"/y.gguf"}', "--port", "1", "--lora-scaled", "/z.gguf:0.5"]);
  t.deepEqual(args, ["serve", "--model", "m.gguf", "--lora-modules", "a=/x.gguf", "--lora-modules", '{"name":"b","path":"/y.gguf"}', "--port", "1", "--lora-scaled", "/z.gguf:0.5"]);
  t.throws(() => loraScaled("/z.gguf"), { message: /FNAME:SCALE/ });
  t.throws(() => loraModule("noequals"), { message: /name=path/ });
});

need.serial("flags: --lora-scaled FNAME:SCALE sets the default scale; --lora-init-without-apply loads everything at 0", async (t) => {
  for (const [extra, scale] of [[[], 0.5] as const, [["--lora-init-without-apply"], 0] as const]) {
    const other = await spawnServe(BIN, ["-m", need.path!, "--port", "0", "-c", "512", "--lora-scaled", `${file(ATTN)}:0.5`, ...extra], { cwd: home.home, env: home.env });
    try {
      const listed = (await (await fetch(`${other.url}/lora-adapters`)).json()) as { id: number; scale: number }[];
      t.deepEqual(
        listed.map(({ id, scale }) => ({ id, scale })),
        [{ id: 0, scale }],
      );
    } finally {
      other.child.kill("SIGTERM");
      await other.exit;
    }
  }
});
