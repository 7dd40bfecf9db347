/** Modelfiles: Ollama's grammar (a parse table and errors with line numbers) and `create` into the store. */
import { mkdtempSync, promises as fsp } from "node:fs";
import os from "node:os";
import path from "node:path";
import test from "ava";
import { tinyGguf } from "./helpers/hub.ts";
import { createModel } from "../ts/store/create.ts";
import { StoreError } from "../ts/store/errors.ts";
import { MEDIA } from "../ts/store/manifest.ts";
import { formatParameters, parseModelfile, renderModelfile, type Modelfile } from "../ts/store/modelfile.ts";
import { ModelStore } from "../ts/store/store.ts";

const parsed: [string, string, Partial<Modelfile>][] = [
  ["a bare FROM", "FROM llama3", { from: "llama3", fromLine: 1, parameters: {}, messages: [], license: [] }],
  [
    "case-insensitive instructions, comments and blank lines",
    "# a comment\n\n  from ./m.gguf\nsystem You are #1.\nTeMpLaTe {{ .Prompt }}",
    { from: "./m.gguf", fromLine: 3, system: "You are #1.", template: "{{ .Prompt }}" },
  ],
  [
    'a """ block kept as written, over lines, with quotes and # inside',
    'FROM m\nTEMPLATE """{{ if .System }}<|im_start|>system\n{{ .System }}<|im_end|>\n# not a comment "quoted"\n{{ end }}"""\nSYSTEM "one line"',
    { template: '{{ if .System }}<|im_start|>system\n{{ .System }}<|im_end|>\n# not a comment "quoted"\n{{ end }}', system: "one line" },
  ],
  ['a """ block opened on its own line keeps the leading newline', 'FROM m\nSYSTEM """\nhello\n"""', { system: "\nhello\n" }],
  [
    "typed parameters, stop repeated",
    'FROM m\nPARAMETER temperature 0.7\nPARAMETER top_k 40\nPARAMETER top_p .9\nPARAMETER min_p 0.05\nPARAMETER repeat_penalty 1.1\nPARAMETER repeat_last_n -1\nPARAMETER seed 42\nPARAMETER num_ctx 4096\nPARAMETER num_predict 128\nPARAMETER stop <|im_end|>\nPARAMETER stop "<|im_start|>"\nparameter stop """\n"""',
    {
      parameters: {
        temperature: 0.7,
        top_k: 40,
        top_p: 0.9,
        min_p: 0.05,
        repeat_penalty: 1.1,
        repeat_last_n: -1,
        seed: 42,
        num_ctx: 4096,
        num_predict: 128,
        stop: ["<|im_end|>", "<|im_start|>", "\n"],
      },
    },
  ],
  [
    "messages and licenses",
    'FROM m\nMESSAGE user Is Toronto in Canada?\nMESSAGE assistant "yes"\nMESSAGE system """be brief"""\nLICENSE MIT\nLICENSE """Apache\n2.0"""',
    {
      messages: [
        { role: "user", content: "Is Toronto in Canada?" },
        { role: "assistant", content: "yes" },
        { role: "system", content: "be brief" },
      ],
      license: ["MIT", "Apache\n2.0"],
    },
  ],
  ["CRLF line ends and a BOM", "\uFEFFFROM m\r\nSYSTEM hi\r\n", { from: "m", system: "hi" }],
  [
    "parameters Wick does not use are kept with a warning",
    "FROM m\nPARAMETER num_gpu 99\nPARAMETER mirostat 2",
    { parameters: { num_gpu: 99 }, warnings: ["line 2: parameter num_gpu is accepted but not used by Wick", "line 3: parameter mirostat is deprecated and ignored"] },
  ],
];

for (const [title, text, want] of parsed) {
  test(`Modelfile parses: ${title}`, (t) => t.like(parseModelfile(text), want));
}

const errors: [string, string, string, RegExp][] = [
  ["no FROM", "SYSTEM hi", "INVALID_MODELFILE", /^Modelfile: no FROM line$/],
  ["an unknown instruction", "FROM m\n\nFOO bar", "INVALID_MODELFILE", /^Modelfile \(line 3\): unknown instruction "FOO"; an instruction must be one of FROM, LICENSE/],
  ["an unknown parameter", "FROM m\nPARAMETER temprature 1", "INVALID_MODELFILE", /^Modelfile \(line 2\): unknown parameter 'temprature'; known: temperature, top_k/],
  ["a float that is not a number", "FROM m\nPARAMETER temperature hot", "INVALID_MODELFILE", /^Modelfile \(line 2\): invalid float value for temperature: "hot"$/],
  ["an integer with a fraction", "FROM m\n# c\nPARAMETER top_k 4.5", "INVALID_MODELFILE", /^Modelfile \(line 3\): invalid integer value for top_k: "4\.5"$/],
  ["an unknown message role", "FROM m\nMESSAGE tool hi", "INVALID_MODELFILE", /^Modelfile \(line 2\): message role must be one of "system", "user", or "assistant" \(got "tool"\)$/],
  ['an unclosed """', 'FROM m\nTEMPLATE """{{ .Prompt }}\nmore', "INVALID_MODELFILE", /^Modelfile \(line 2\): """ is not closed before the end of the file$/],
  ["FROM twice", "FROM a\nFROM b", "INVALID_MODELFILE", /^Modelfile \(line 2\): FROM is given twice \(first on line 1\)$/],
  ["an instruction without a value", "FROM m\nSYSTEM", "INVALID_MODELFILE", /^Modelfile \(line 2\): SYSTEM needs a value$/],
  ["PARAMETER without a value", "FROM m\nPARAMETER seed", "INVALID_MODELFILE", /^Modelfile \(line 2\): PARAMETER seed needs a value$/],
];

for (const [title, text, code, why] of errors) {
  test(`Modelfile error: ${title}`, (t) => {
    const err = t.throws(() => parseModelfile(text), { instanceOf: StoreError });
    t.is<string | undefined, string>(err?.code, code);
    t.regex(err?.message ?? "", why);
  });
}

test("ADAPTER lines: LoRA adapter files in order, with their lines", (t) => {
  t.deepEqual(parseModelfile("FROM m\nADAPTER ./a.gguf\nadapter /x/b.gguf").adapters, [
    { path: "./a.gguf", line: 2 },
    { path: "/x/b.gguf", line: 3 },
  ]);
});

test("parameters print as /api/show prints them", (t) => {
  t.is(formatParameters({ temperature: 0.7, stop: ["<|im_end|>", "</s>"] }), `${"stop".padEnd(30)} "<|im_end|>"\n${"stop".padEnd(30)} "</s>"\n${"temperature".padEnd(30)} 0.7`);
});

async function fixture() {
  const dir = mkdtempSync(path.join(os.tmpdir(), "wick-create-"));
  await fsp.writeFile(path.join(dir, "tiny.gguf"), tinyGguf());
  return { dir, store: new ModelStore({ home: path.join(dir, "home") }) };
}

test("create from a GGUF path relative to the Modelfile writes blobs and a manifest", async (t) => {
  const { dir, store } = await fixture();
  const statuses: string[] = [];
  const mf = 'FROM ./tiny.gguf\nTEMPLATE """{{ .System }} {{ .Prompt }}"""\nSYSTEM be brief\nPARAMETER temperature 0.2\nPARAMETER stop </s>\nMESSAGE user hi\nLICENSE MIT';
  const res = await createModel(store, "mine:v1", mf, { baseDir: dir, onProgress: (p) => statuses.push(p.status) });
  t.is(res.name, "mine:v1");
  t.is(statuses[0], "gathering model components");
  t.deepEqual(statuses.slice(-2), ["writing manifest", "success"]);
  const m = await store.resolve("mine:v1");
  t.is(m.template, "{{ .System }} {{ .Prompt }}");
  t.is(m.system, "be brief");
  t.deepEqual(m.params, { stop: ["</s>"], temperature: 0.2 });
  t.deepEqual(m.messages, [{ role: "user", content: "hi" }]);
  t.deepEqual(m.license, ["MIT"]);
  t.deepEqual(
    m.manifest.layers.map((l) => l.mediaType),
    [MEDIA.model, MEDIA.template, MEDIA.system, MEDIA.params, MEDIA.messages, MEDIA.license],
  );
  t.deepEqual(await fsp.readFile(m.modelPath), await fsp.readFile(path.join(dir, "tiny.gguf")));
  t.regex(
    renderModelfile(m.name, m),
    /^# Modelfile generated by "wick show"\n# To build a new Modelfile based on this, replace FROM with:\n# FROM mine:v1\n\nFROM .*sha256-[0-9a-f]{64}\nTEMPLATE """\{\{ \.System \}\} \{\{ \.Prompt \}\}"""\nSYSTEM """be brief"""\nPARAMETER stop <\/s>\nPARAMETER temperature 0\.2\nMESSAGE user hi\nLICENSE """MIT"""\n$/,
  );
});

test("create from a store model inherits its layers, overrides what the Modelfile sets, merges params", async (t) => {
  const { dir, store } = await fixture();
  await createModel(store, "base", "FROM ./tiny.gguf\nTEMPLATE T1\nSYSTEM S1\nPARAMETER temperature 0.2\nPARAMETER top_k 10", { baseDir: dir });
  await createModel(store, "child", "FROM base\nSYSTEM S2\nPARAMETER temperature 0.9");
  const base = await store.resolve("base");
  const child = await store.resolve("child");
  t.is(child.modelPath, base.modelPath, "the model blob is shared");
  t.is(child.template, "T1");
  t.is(child.system, "S2");
  t.deepEqual(child.params, { temperature: 0.9, top_k: 10 });
  await store.delete("base");
  t.truthy(await store.resolve("child"), "deleting the base keeps the blobs the child uses");
});

test("create fails clearly, and adds no model, when FROM names nothing or is not a GGUF", async (t) => {
  const { dir, store } = await fixture();
  await fsp.writeFile(path.join(dir, "notes.gguf"), "just text, not a model");
  const cases: [string, string, RegExp][] = [
    ["FROM ./missing.gguf", "FILE_NOT_FOUND", /^Modelfile \(line 1\): FROM \.\/missing\.gguf: no such file .*missing\.gguf$/],
    ["\nFROM nosuchmodel", "MODEL_NOT_FOUND", /^Modelfile \(line 2\): FROM nosuchmodel: model 'nosuchmodel:latest' not found \(and it is not a path to a \.gguf file\)$/],
    ["FROM hf.co/org/repo:Q4_K_M", "MODEL_NOT_FOUND", /is not in the store; pull it first/],
    ["FROM ../escape", "INVALID_MODELFILE", /^Modelfile \(line 1\): FROM \.\.\/escape: invalid model name/],
    ["FROM ./notes.gguf", "CORRUPT_MODEL", /notes\.gguf is not a GGUF file/],
  ];
  for (const [mf, code, why] of cases) {
    const err = await t.throwsAsync(createModel(store, "x", mf, { baseDir: dir }), { instanceOf: StoreError }, mf);
    t.is<string | undefined, string>(err?.code, code, mf);
    t.regex(err?.message ?? "", why);
  }
  await t.throwsAsync(createModel(store, "../x", "FROM ./tiny.gguf", { baseDir: dir }), { code: "INVALID_NAME" } as never);
  t.deepEqual(await store.list(), []);
});
