/** Model references: Ollama's name grammar, hub references, local paths, and names that try to escape the store. */
import path from "node:path";
import test from "ava";
import { StoreError } from "../ts/store/errors.ts";
import { formatName, parseModelName, parseReference } from "../ts/store/reference.ts";

const valid: [string, { kind: "name" | "hub" | "path"; name?: string; hub?: { repo: string; quant?: string }; path?: string }][] = [
  ["llama3", { kind: "name", name: "llama3:latest" }],
  ["llama3:8b", { kind: "name", name: "llama3:8b" }],
  ["Llama3.2:1B-instruct_q4", { kind: "name", name: "Llama3.2:1B-instruct_q4" }],
  ["me/mymodel:v1", { kind: "name", name: "me/mymodel:v1", hub: { repo: "me/mymodel", quant: "v1" } }],
  ["bartowski/Llama-3.2-1B-Instruct-GGUF", { kind: "name", name: "bartowski/Llama-3.2-1B-Instruct-GGUF:latest", hub: { repo: "bartowski/Llama-3.2-1B-Instruct-GGUF" } }],
  ["registry.ollama.ai/library/llama3:latest", { kind: "name", name: "llama3:latest" }],
  ["example.com/team/model:tag", { kind: "name", name: "example.com/team/model:tag" }],
  ["localhost:5000/ns/m:tag", { kind: "name", name: "localhost:5000/ns/m:tag" }],
  [
    "hf.co/bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M",
    { kind: "hub", name: "hf.co/bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M", hub: { repo: "bartowski/Llama-3.2-1B-Instruct-GGUF", quant: "Q4_K_M" } },
  ],
  ["hf.co/org/repo", { kind: "hub", name: "hf.co/org/repo:latest", hub: { repo: "org/repo" } }],
  ["huggingface.co/org/repo:q8_0", { kind: "hub", name: "hf.co/org/repo:q8_0", hub: { repo: "org/repo", quant: "q8_0" } }],
  ["https://hf.co/org/repo:iq4_xs", { kind: "hub", name: "hf.co/org/repo:iq4_xs", hub: { repo: "org/repo", quant: "iq4_xs" } }],
  ["hf.co/org/repo:Model-Q8_0.gguf", { kind: "hub", name: "hf.co/org/repo:Model-Q8_0.gguf", hub: { repo: "org/repo", quant: "Model-Q8_0.gguf" } }],
  ["./x.gguf", { kind: "path", path: path.resolve("x.gguf") }],
  ["../x.gguf", { kind: "path", path: path.resolve("../x.gguf") }],
  ["/abs/x.gguf", { kind: "path", path: "/abs/x.gguf" }],
  ["model.GGUF", { kind: "path", path: path.resolve("model.GGUF") }],
];

for (const [raw, want] of valid) {
  test(`reference ${JSON.stringify(raw)} parses as ${want.kind}`, (t) => {
    const ref = parseReference(raw);
    t.is(ref.kind, want.kind);
    if (ref.kind === "path") return t.is(ref.path, want.path!);
    t.is(formatName(ref.name), want.name!);
    t.deepEqual(ref.hub, want.hub);
  });
}

test("relative paths resolve against the base directory (a Modelfile's folder)", (t) => {
  t.deepEqual(parseReference("./m.gguf", { baseDir: "/models" }), { kind: "path", path: "/models/m.gguf" });
});

test("a store name fills Ollama's defaults and keeps the case it was given", (t) => {
  t.deepEqual(parseModelName("Qwen"), { host: "registry.ollama.ai", namespace: "library", model: "Qwen", tag: "latest" });
  t.deepEqual(parseModelName("huggingface.co/a/b:Q4_K_M"), { host: "hf.co", namespace: "a", model: "b", tag: "Q4_K_M" });
});

const invalid: [string, RegExp][] = [
  ["", /empty/],
  ["../x", /"\.\." is not allowed/],
  ["..", /"\.\." is not allowed/],
  ["a/../b", /"\.\." is not allowed/],
  ["a..b", /"\.\." and "\." are not allowed in the model/],
  ["./x", /"\.\." and "\." are not allowed in the namespace/],
  ["/abs", /absolute path/],
  ["/etc/passwd", /absolute path/],
  ["a\0b", /NUL/],
  ["a\\b", /backslash/],
  ["a//b", /namespace is empty/],
  ["/", /absolute path/],
  ["a:", /tag after ':' is empty/],
  [":tag", /model is empty/],
  ["a/b/c/d", /too many/],
  ["-x", /must start with a letter, digit or "_"/],
  ["x*y", /character "\*" is not allowed in the model/],
  ["my.ns/model", /character "\." is not allowed in the namespace/],
  ["model:ta/g", /character|namespace/],
  ["m:t:x", /character ":" is not allowed in the model/],
  ["a b", /whitespace/],
  ["x".repeat(81), /81 characters long; at most 80/],
  ["m:" + "t".repeat(81), /tag is 81 characters/],
  ["hf.co/repo", /owner and the repository/],
];

for (const [raw, why] of invalid) {
  test(`reference ${JSON.stringify(raw)} is rejected naming the problem`, (t) => {
    const err = t.throws(() => parseReference(raw), { instanceOf: StoreError });
    t.is(err?.code, "INVALID_NAME");
    t.regex(err?.message ?? "", why);
  });
}
