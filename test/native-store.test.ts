/**
 * The store behind the native API, through the real `ollama` npm client against a real server on
 * 127.0.0.1 (temp WICK_HOME, loopback hub serving real GGUF files): create from a Modelfile (its
 * PARAMETERs drive sampling, its TEMPLATE/SYSTEM/MESSAGEs the prompt), tags, show, generate and
 * chat on store models, pull with progress, copy, delete, ps, two models loaded on demand, and
 * keep_alive (timed expiry, forever, 0 unloads).
 */
import { Ollama } from "ollama";
import { Engine } from "../ts/engine/index.ts";
import { renderOllamaPrompt } from "../ts/store/index.ts";
import { fixture, needs, smollm2 } from "./helpers/assets.ts";
import { send, startStoreServer, type StoreServer } from "./helpers/store-server.ts";
import { waitFor } from "./helpers/server.ts";
import test from "ava";

const tinyAsset = fixture("tiny-llama-q8_0.gguf");
const { path: smol, serial } = needs(smollm2(), tinyAsset);
const tiny = "path" in tinyAsset ? tinyAsset.path : "";

const HUB_REPO = "wick-test/SmolLM2-135M-Instruct-GGUF";
const TEMPLATE = "{{ if .System }}System: {{ .System }}\n{{ end }}User: {{ .Prompt }}\nAssistant:{{ .Response }}";
const SYSTEM = "You answer in one word.";

let s: StoreServer;
let ollama: Ollama;

test.before(async () => {
  if (!smol) return;
  s = await startStoreServer();
  ollama = s.ollama;
  await s.hub.addRepo(HUB_REPO, [
    { path: "README.md", source: Buffer.from("# SmolLM2\n"), notLfs: true },
    { path: "SmolLM2-135M-Instruct-Q4_1.gguf", source: smol },
  ]);
});
test.after.always(async () => s?.close());

serial("pull from the hub: Ollama's progress stream (manifest, digest/total/completed, success), then the model serves", async (t) => {
  const events: { status: string; digest?: string; total?: number; completed?: number }[] = [];
  for await (const p of await ollama.pull({ model: `hf.co/${HUB_REPO}:Q4_1`, stream: true })) events.push(p);
  t.is(events[0].status, "pulling manifest");
  t.is(events.at(-1)!.status, "success");
  const layer = events.filter((e) => e.digest);
  t.true(layer.length >= 3, `progress for the model layer as it downloads (${layer.length} events)`);
  t.is(layer[0].completed, 0);
  t.true(layer.every((e) => /^sha256:[0-9a-f]{64}$/.test(e.digest!) && e.total! > 90e6 && e.completed! <= e.total!));
  t.is(layer.at(-1)!.completed, layer.at(-1)!.total);
  t.true(events.some((e) => e.status === "verifying sha256 digest"));
  const names = (await ollama.list()).models.map((m) => m.name);
  t.true(names.includes(`hf.co/${HUB_REPO}:Q4_1`), names.join(", "));
  const again = await ollama.pull({ model: `${HUB_REPO}:Q4_1`, stream: false });
  t.deepEqual(again, { status: "success" });
  const r = await ollama.chat({ model: `hf.co/${HUB_REPO}:Q4_1`, messages: [{ role: "user", content: "Hi" }], options: { num_predict: 2 } });
  t.is(r.eval_count, 2);
  t.true((await ollama.ps()).models.some((m) => m.name === `hf.co/${HUB_REPO}:Q4_1`));
  await ollama.generate({ model: `hf.co/${HUB_REPO}:Q4_1`, prompt: "", keep_alive: 0 });
});

serial("create from a Modelfile: a progress stream ending in success, then the model is in /api/tags with its details", async (t) => {
  const modelfile = `# a greedy, short SmolLM2\nFROM ${smol}\nPARAMETER temperature 0\nPARAMETER num_predict 3\n`;
  const events: string[] = [];
  for await (const p of await ollama.create({ model: "smol", modelfile, stream: true } as never)) events.push((p as { status: string }).status);
  t.is(events[0], "gathering model components");
  t.true(
    events.some((e) => e.startsWith("copying file")),
    events.join(" | "),
  );
  t.is(events.at(-1), "success");

  const { models } = await ollama.list();
  t.deepEqual(
    models.map((m) => m.name),
    ["smol:latest", `hf.co/${HUB_REPO}:Q4_1`],
    "newest first",
  );
  const m = models[0];
  t.is(m.model, "smol:latest");
  t.regex(m.digest, /^[0-9a-f]{64}$/);
  t.true(m.size > 90e6, `size ${m.size}`);
  t.like(m.details, { format: "gguf", family: "llama", families: ["llama"], parameter_size: "135M", quantization_level: "Q4_1", parent_model: "" });
  t.false(Number.isNaN(Date.parse(String(m.modified_at))));
  const head = await fetch(`${s.url}/api/tags`, { method: "HEAD" });
  t.is(head.status, 200);
  t.deepEqual(s.registry.list(), [], "create loads nothing");
});

serial("generate on a store model: PARAMETER num_predict 3 gives 3 eval tokens, temperature 0 is deterministic; options override", async (t) => {
  const a = await ollama.generate({ model: "smol", prompt: "Name a colour." });
  const b = await ollama.generate({ model: "smol", prompt: "Name a colour." });
  t.is(a.eval_count, 3);
  t.is(a.done_reason, "length");
  t.is(a.response, b.response, "temperature 0 from the Modelfile: greedy");
  t.true((a.response ?? "").length > 0);
  let streamed = "";
  for await (const part of await ollama.generate({ model: "smol", prompt: "Name a colour.", stream: true })) streamed += part.response ?? "";
  t.is(streamed, a.response ?? "");
  const longer = await ollama.generate({ model: "smol", prompt: "Name a colour.", options: { num_predict: 5 } });
  t.is(longer.eval_count, 5, "request options win over PARAMETERs");
  t.true((longer.response ?? "").startsWith(a.response ?? "\0"), "still greedy: the first 3 tokens agree");
  t.is(s.loads(), 2, "loaded once, on first use (after the pulled model)");
});

serial("chat on a store model, streamed and not, and /v1/chat/completions with the Modelfile's defaults", async (t) => {
  const messages = [{ role: "user", content: "Say hello." }];
  const one = await ollama.chat({ model: "smol", messages });
  t.is(one.eval_count, 3);
  t.is(one.message.role, "assistant");
  let streamed = "";
  for await (const part of await ollama.chat({ model: "smol", messages, stream: true })) streamed += part.message.content;
  t.is(streamed, one.message.content);
  const oa = await (await send(`${s.url}/v1/chat/completions`, { model: "smol", messages })).json();
  t.is(oa.model, "smol:latest");
  t.is(oa.usage.completion_tokens, 3, "num_predict fills max_tokens");
  t.is(oa.choices[0].message.content, one.message.content, "temperature 0 on /v1 too");
  const oa5 = await (await send(`${s.url}/v1/chat/completions`, { model: "smol", messages, max_tokens: 5 })).json();
  t.is(oa5.usage.completion_tokens, 5);
});

serial("a Modelfile TEMPLATE, SYSTEM and MESSAGEs shape the prompt: prompt_eval_count is the token count of the Go-rendered prompt", async (t) => {
  const modelfile = `FROM smol\nTEMPLATE """${TEMPLATE}"""\nSYSTEM ${SYSTEM}\nMESSAGE user Is the sky blue?\nMESSAGE assistant Yes.\nPARAMETER num_predict 2`;
  await ollama.create({ model: "smol-tpl", modelfile } as never);
  const vocab = await Engine.load({ modelPath: smol!, vocabOnly: true });
  const info = vocab.info();
  const count = (text: string) => {
    const ids = vocab.tokenize(text, { addSpecial: false, parseSpecial: true });
    return info.addBos && ids[0] !== info.bosToken ? ids.length + 1 : ids.length;
  };
  const prompt = "Name a fruit.";
  const rendered = renderOllamaPrompt(TEMPLATE, {
    messages: [
      { role: "system", content: SYSTEM },
      { role: "user", content: "Is the sky blue?" },
      { role: "assistant", content: "Yes." },
      { role: "user", content: prompt },
    ],
  });
  t.true(rendered.includes("System: You answer in one word.\nUser: Is the sky blue?\nAssistant:Yes.") && rendered.endsWith(`User: ${prompt}\nAssistant:`), rendered);
  const g = await ollama.generate({ model: "smol-tpl", prompt, options: { temperature: 0 } });
  t.is(g.prompt_eval_count, count(rendered));
  t.is(g.eval_count, 2, "its own PARAMETER");
  t.is((await ollama.generate({ model: "smol-tpl", prompt: "Name a fruit.", options: { temperature: 0 } })).response, g.response);
  const plain = await ollama.generate({ model: "smol", prompt });
  t.not(plain.prompt_eval_count, g.prompt_eval_count, "the GGUF's own template renders differently");

  // A system message in the request replaces SYSTEM; a per-request template replaces the model's.
  const sys = await ollama.generate({ model: "smol-tpl", prompt, system: "Be terse." });
  const withSys = renderOllamaPrompt(TEMPLATE, {
    messages: [
      { role: "system", content: "Be terse." },
      { role: "user", content: "Is the sky blue?" },
      { role: "assistant", content: "Yes." },
      { role: "user", content: prompt },
    ],
  });
  t.is(sys.prompt_eval_count, count(withSys));
  const own = await ollama.generate({ model: "smol", prompt, template: "Q: {{ .Prompt }}\nA:" });
  t.is(own.prompt_eval_count, count(`Q: ${prompt}\nA:`));
  await vocab.unload();
  t.log(`Go-template prompt: ${g.prompt_eval_count} tokens; GGUF template: ${plain.prompt_eval_count}`);
});

serial("/api/show by store name: the Modelfile, parameters text, Go template, system, messages, details", async (t) => {
  const r = await ollama.show({ model: "smol-tpl" });
  t.is(r.template, TEMPLATE);
  t.is(r.system, SYSTEM);
  t.regex(r.parameters, /^num_predict +2$/m);
  t.regex(r.parameters, /^temperature +0$/m, "inherited from FROM smol");
  t.regex(r.modelfile, /^FROM \S+sha256-[0-9a-f]{64}$/m);
  t.true(r.modelfile.includes(`TEMPLATE """${TEMPLATE}"""`));
  t.deepEqual((r as unknown as { messages: unknown }).messages, [
    { role: "user", content: "Is the sky blue?" },
    { role: "assistant", content: "Yes." },
  ]);
  t.like(r.details, { family: "llama", quantization_level: "Q4_1", parameter_size: "135M" });
  t.is((r.model_info as unknown as Record<string, unknown>)["general.architecture"], "llama");
  t.deepEqual(r.capabilities, ["completion"]);
  const plain = await ollama.show({ model: "smol:latest" });
  t.regex(plain.template, /<\|im_start\|>/, "no TEMPLATE: the GGUF's chat template");
  t.is((plain as { system?: string }).system, undefined);
});

serial("copy and delete: 200 with the ollama client, 404 for a missing source or model", async (t) => {
  await ollama.copy({ source: "smol", destination: "me/smol-copy:v1" });
  const names = (await ollama.list()).models.map((m) => m.name);
  t.true(names.includes("me/smol-copy:v1"));
  const copy = (await ollama.list()).models.find((m) => m.name === "me/smol-copy:v1")!;
  const orig = (await ollama.list()).models.find((m) => m.name === "smol:latest")!;
  t.is(copy.digest, orig.digest, "the same manifest under a second name");
  t.is((await ollama.generate({ model: "me/smol-copy:v1", prompt: "Hi" })).eval_count, 3, "the copy keeps the PARAMETERs");
  const missing = await send(`${s.url}/api/copy`, { source: "nope", destination: "x" });
  t.is(missing.status, 404);
  t.deepEqual(await missing.json(), { error: "model 'nope' not found" });

  await ollama.delete({ model: "me/smol-copy:v1" });
  t.false((await ollama.list()).models.some((m) => m.name === "me/smol-copy:v1"));
  t.false(
    (await ollama.ps()).models.some((m) => m.name === "me/smol-copy:v1"),
    "a deleted model is unloaded",
  );
  const again = await send(`${s.url}/api/delete`, { model: "me/smol-copy:v1" }, "DELETE");
  t.is(again.status, 404);
  t.deepEqual(await again.json(), { error: "model 'me/smol-copy:v1' not found" });
  t.is((await ollama.generate({ model: "smol", prompt: "Hi" })).eval_count, 3, "the original still serves");
});

serial("two models at once, each loaded on demand; /api/ps lists both; /v1/models lists store and loaded models", async (t) => {
  const created = await send(`${s.url}/api/create`, { model: "tiny", from: tiny, stream: false });
  t.deepEqual(await created.json(), { status: "success" });
  t.false(
    (await ollama.ps()).models.some((m) => m.name === "tiny:latest"),
    "not loaded by create",
  );
  const before = s.loads();
  const [a, b] = await Promise.all([ollama.generate({ model: "tiny", prompt: "hello", options: { num_predict: 4, temperature: 0 } }), ollama.generate({ model: "smol", prompt: "hello" })]);
  t.is(a.eval_count, 4);
  t.is(b.eval_count, 3);
  t.is(s.loads(), before + 1, "only tiny needed loading");
  const ps = (await ollama.ps()).models;
  const byName = new Map(ps.map((m) => [m.name, m]));
  t.true(byName.has("tiny:latest") && byName.has("smol:latest"), [...byName.keys()].join(", "));
  const smolPs = byName.get("smol:latest")! as unknown as Record<string, unknown>;
  t.like(smolPs, { size_vram: 0, context_length: 2048, model: "smol:latest" });
  t.is(smolPs.digest, (await ollama.list()).models.find((m) => m.name === "smol:latest")!.digest);
  t.true((smolPs.size as number) > 90e6);
  const expires = Date.parse(smolPs.expires_at as string) - Date.now();
  t.true(expires > 4 * 60_000 && expires <= 5 * 60_000 + 1000, `expires in ${expires} ms (default 5m)`);
  t.like(smolPs.details, { family: "llama", quantization_level: "Q4_1" });

  const list = await (await fetch(`${s.url}/v1/models`)).json();
  const ids = list.data.map((m: { id: string }) => m.id);
  for (const id of ["smol:latest", "tiny:latest", "smol-tpl:latest", `hf.co/${HUB_REPO}:Q4_1`]) t.true(ids.includes(id), id);
  t.is(new Set(ids).size, ids.length, "each model once");
  t.is(list.data.find((m: { id: string }) => m.id === "smol:latest").max_model_len, 2048, "loaded models carry their context");
  t.is((await fetch(`${s.url}/v1/models/smol-tpl:latest`)).status, 200);
  const { version } = await ollama.version();
  t.regex(version, /^\d+\.\d+\.\d+/);
});

serial("keep_alive as a duration: the model unloads when it expires", async (t) => {
  await ollama.generate({ model: "tiny", prompt: "hi", keep_alive: "300ms", options: { num_predict: 2 } });
  const entry = (await ollama.ps()).models.find((m) => m.name === "tiny:latest");
  t.truthy(entry);
  const left = Date.parse(String(entry!.expires_at)) - Date.now();
  t.true(left <= 300 && left > -1000, `expires in ${left} ms`);
  const ms = await waitFor(() => !s.registry.get("tiny:latest"), 5000, 20);
  t.true(ms >= 0, "unloaded after its keep_alive");
  t.false((await ollama.ps()).models.some((m) => m.name === "tiny:latest"));
  // keep_alive -1 (forever), as a number of seconds or a string
  await ollama.generate({ model: "tiny", prompt: "hi", keep_alive: -1, options: { num_predict: 1 } });
  const forever = (await ollama.ps()).models.find((m) => m.name === "tiny:latest")!;
  t.true(Date.parse(String(forever.expires_at)) > Date.now() + 100 * 365 * 86400e3, String(forever.expires_at));
});

serial("keep_alive 0 with an empty prompt unloads every model: done_reason unload, /api/ps empty (RSS: native-lifecycle.test.ts)", async (t) => {
  const names = (await ollama.ps()).models.map((m) => m.name);
  t.true(names.length >= 2, names.join(", "));
  for (const name of names) {
    const r = await ollama.generate({ model: name, prompt: "", keep_alive: 0 });
    t.like(r, { done: true, done_reason: "unload", response: "" });
  }
  t.deepEqual((await ollama.ps()).models, []);
  t.deepEqual(s.registry.list(), []);
  // /api/chat with no messages and keep_alive 0 answers the same; a chat loads it again.
  const c = await ollama.chat({ model: "smol", messages: [], keep_alive: 0 });
  t.like(c, { done: true, done_reason: "unload" });
  const load = await ollama.chat({ model: "smol", messages: [] });
  t.like(load, { done: true, done_reason: "load" });
  t.deepEqual(
    (await ollama.ps()).models.map((m) => m.name),
    ["smol:latest"],
  );
});
