/**
 * Tokenizer parity with llama.cpp itself (the prebuilt node-llama-cpp binding) on the
 * vocab-only GGUFs shipped with llama.cpp and on real model files: llama.cpp's corpora plus
 * a few hundred deterministic strings per vocab (scripts, emoji, code, digit and whitespace
 * runs, special-token text), tokenized with and without special-token parsing.
 */
import test from "ava";
import { existsSync, readFileSync } from "node:fs";
import path from "node:path";
import type { Llama } from "node-llama-cpp";
import { Engine } from "../ts/engine/index.ts";
import { llamaVocab, localFile, needs, repoRoot, smollm2, type Asset } from "./helpers/assets.ts";
import { referenceLlama, withBos } from "./helpers/llama.ts";

const VOCABS = ["llama-spm", "phi-3", "llama-bpe", "qwen2", "qwen35", "gpt-2", "starcoder", "deepseek-llm", "deepseek-coder", "falcon", "mpt", "refact", "command-r"];

let llama: Llama;
test.before(async () => {
  llama = await referenceLlama();
});
test.after.always(async () => {
  await llama?.dispose();
});

/** mulberry32: a small seeded PRNG so every run checks the same strings. */
function prng(seed: number): () => number {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const FIXED = [
  "",
  " ",
  "  ",
  "\t",
  "\n",
  "\r\n",
  "\n\n\n",
  " \t \n ",
  "a",
  "Hello world",
  " Hello world",
  "Hello  world",
  "line1\nline2\r\nline3\rline4",
  "trailing   ",
  "   leading",
  "mixed \t\n\t  space \n",
  "a\n \n  \n   \nb",
  "don't DON'T I'm I'M y'all we'll you've they're it'd 's 't '' ’s ’re",
  "'s's's",
  "O'Neil's",
  "3",
  "33",
  "333",
  "3333",
  "1234567890",
  "12345678901234567890",
  "3.14159",
  "1,000,000",
  "0x1F2E",
  "-42",
  "٣٤٥ ١٢٣",
  "１２３４５",
  "²³¹ ½ ¾ Ⅻ ⅻ",
  "v1.2.3-beta+42",
  "café naïve résumé Ångström",
  "Ελληνικά κείμενα",
  "Привет, мир! Ёжик",
  "مرحبا بالعالم",
  "שלום עולם",
  "नमस्ते दुनिया",
  "สวัสดีชาวโลก",
  "ក្រុមហ៊ុន",
  "你好，世界！今天天气很好。",
  "こんにちは、世界。カタカナ",
  "안녕하세요 세계",
  "e\u0301 a\u0308 n\u0303",
  "\u0301\u0302 leading marks",
  "zero\u200bwidth\u200djoiner\ufeffbom",
  "nbsp\u00a0here ideographic\u3000space em\u2003space nel\u0085line ls\u2028ps\u2029",
  "\u3000\u3000",
  "a\u3000。b",
  "ctrl\u0001\u0002\u007f\u001f chars",
  "tab\u000bvt\u000cff",
  "nul\u0000byte",
  "🦙 llama",
  "🚀 (normal) 😶‍🌫️ (multiple emojis concatenated) ✅",
  "👨‍👩‍👧‍👦 👍🏽 🇫🇷🇯🇵",
  "😀😃😄😁😆😅🤣😂",
  "∑∫∂√∞≠≤≥ ← → ⇒ ∀x∈ℝ",
  "╔══╗║  ║╚══╝",
  "€£¥₹ $100 ¢50",
  "<>&\"'`~!@#$%^&*()_+-=[]{}|;:,./?\\",
  "....!!!???,,,;;;",
  "---===+++***",
  "https://example.com/path?q=1&r=two#frag",
  "user@example.com",
  "def foo(x):\n    return x ** 2\n\n\nclass Bar:\n\tpass\n",
  'fn main() {\n    let v: Vec<u32> = (0..10).collect();\n    println!("{:?}", v);\n}\n',
  "const f = async (a, b) => { await g(a ?? b); };\n// comment\n/* block */",
  '<div class="x">&nbsp;</div>',
  "SELECT * FROM t WHERE id = 42;",
  "    indented four\n        eight\n\t\ttabs",
  " ".repeat(40),
  "\n".repeat(20),
  "9".repeat(50),
  "CamelCaseWordsAndHTTPServer",
  "snake_case_words_here",
  "The quick brown fox jumps over the lazy dog.",
  "<0x0A> <0xFF> ▁ ▁▁ ▁hello",
  "[UNK] <unk> <s> </s> <pad> <mask>",
  "<|endoftext|>",
  "<|im_start|>user\nhi<|im_end|>",
  "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>",
  "<|user|>\nHello<|end|>\n<|assistant|>",
  "<|im_start",
  "|im_start|>",
  "<<|im_end|>>",
  "x<|endoftext|>y",
  " <|endoftext|> ",
];

const POOL = [
  "a",
  "e",
  "the",
  " the",
  "The",
  " ",
  "  ",
  "\t",
  "\n",
  "\r\n",
  "'",
  "'s",
  "'ll",
  ".",
  ",",
  "!",
  "?",
  "...",
  "-",
  "_",
  "(",
  ")",
  "{",
  "}",
  "<",
  ">",
  "/",
  "\\",
  '"',
  "0",
  "7",
  "42",
  "2024",
  "é",
  "ß",
  "Ж",
  "λ",
  "中",
  "文",
  "日本",
  "한",
  "ก",
  "क्",
  "ि",
  "\u0301",
  "\u200b",
  "\u00a0",
  "\u3000",
  "🦙",
  "👍🏽",
  "😶‍🌫️",
  "✅",
  "€",
  "∑",
  "Hello",
  "world",
  "HTTP",
  "json",
  "=>",
  "::",
  "->",
  "//",
  "#",
  "$",
];

/** Random codepoints from across Unicode (no lone surrogates: JS → UTF-8 would replace them). */
function randomCodepoints(rnd: () => number): string {
  const ranges = [
    [0x20, 0x7e],
    [0x0, 0x1f],
    [0xa0, 0x52f],
    [0x590, 0xfff],
    [0x1000, 0x2bff],
    [0x2e00, 0x9fff],
    [0xa000, 0xd7ff],
    [0xe000, 0xffff],
    [0x10000, 0x1ffff],
    [0x1f300, 0x1faff],
    [0x20000, 0x10ffff],
  ];
  let s = "";
  for (let n = 1 + Math.floor(rnd() * 24); n > 0; n--) {
    const [lo, hi] = ranges[Math.floor(rnd() * ranges.length)];
    s += String.fromCodePoint(lo + Math.floor(rnd() * (hi - lo + 1)));
    if (rnd() < 0.2) s += " ";
  }
  return s;
}

/** Corpus cases split as llama.cpp's test-tokenizer-0 does. */
function corpus(file: string): string[] {
  const inp = `${file}.inp`;
  if (!existsSync(inp)) return [];
  const cases = readFileSync(inp, "utf8").split("\n__ggml_vocab_test__\n");
  if (cases.at(-1) === "") cases.pop();
  return cases;
}

function strings(file: string, specials: string[]): string[] {
  const rnd = prng(1234);
  const pool = POOL.concat(specials);
  const random = Array.from({ length: 200 }, () => {
    let s = "";
    for (let n = 1 + Math.floor(rnd() * 40); n > 0; n--) s += pool[Math.floor(rnd() * pool.length)];
    return s;
  });
  const wrapped = specials.flatMap((s) => [s, ` ${s} `, `a${s}b`, `${s}\n${s}`, `\n${s}  text  ${s}`]);
  const unicode = Array.from({ length: 100 }, () => randomCodepoints(rnd));
  return [...corpus(file), ...FIXED, ...wrapped, ...random, ...unicode];
}

async function parity(t: import("ava").ExecutionContext, file: string) {
  const model = await llama.loadModel({ modelPath: file, vocabOnly: true });
  const wick = await Engine.load({ modelPath: file, vocabOnly: true });
  try {
    // A few control / user-defined tokens of this vocab, to embed in the test strings.
    const meta = model.fileInfo.metadata.tokenizer.ggml as unknown as { tokens: string[]; token_type?: number[] };
    const specialIds = (meta.token_type ?? []).flatMap((ty, i) => (ty === 3 || ty === 4 ? [i] : []));
    const specials = [...new Set([...specialIds.slice(0, 6), ...specialIds.slice(-6)].map((i) => meta.tokens[i]))];

    const cases = strings(file, specials);
    const mismatches: string[] = [];
    let lossy = 0;
    for (const text of cases) {
      for (const parseSpecial of [false, true]) {
        const want = Array.from(model.tokenize(text, parseSpecial));
        const got = wick.tokenize(text, { addSpecial: false, parseSpecial });
        if (JSON.stringify(got) !== JSON.stringify(want)) {
          mismatches.push(`parseSpecial=${parseSpecial} ${JSON.stringify(text)}\n  llama.cpp ${JSON.stringify(want)}\n  wick      ${JSON.stringify(got)}`);
        }
      }
      // Where llama.cpp's own detokenizer gives the text back, Wick's must too.
      const ids = Array.from(model.tokenize(text, false));
      if (model.detokenize(ids, true) === text && wick.detokenize(ids) !== text) lossy++;
    }
    t.log(`${path.basename(file)}: ${cases.length} strings × 2, ${mismatches.length} tokenize mismatches, ${lossy} lossy decodes`);
    t.deepEqual(mismatches.slice(0, 10), [], `${mismatches.length} mismatches`);
    t.is(lossy, 0);

    const withSpecial = withBos(model, Array.from(model.tokenize("Hello world", false)));
    t.deepEqual(wick.tokenize("Hello world", { addSpecial: true, parseSpecial: false }), withSpecial);
  } finally {
    await wick.unload();
    await model.dispose();
  }
}

/** The parity test on `asset`'s file, registered under `title`. */
function parityTest(title: string, asset: Asset) {
  const gate = needs(asset);
  gate.test(title, (t) => parity(t, gate.path!));
}

for (const name of VOCABS) parityTest(`tokenizer parity with llama.cpp: ${name}`, llamaVocab(name));
parityTest("tokenizer parity with llama.cpp: SmolLM2-135M-Instruct", smollm2());
parityTest("tokenizer parity with llama.cpp: gemma-3-270m (if cached)", localFile(path.join(repoRoot, ".cache/models/gemma-3-270m-q4_k_m.gguf"), "python3 scripts/fetch_models.py gemma3-270m"));
