/**
 * Facts with one owner across the napi boundary: the error codes (generated from the Rust
 * enum), CONTEXT_LENGTH_EXCEEDED's numbers as fields, and the engine's sizing facts in info().
 */
import test from "ava";
import { readFileSync } from "node:fs";
import path from "node:path";
import { Engine, WickError } from "../ts/engine/index.ts";
import { engineCodes } from "../ts/engine/errors.ts";
import { fixture, needs, repoRoot } from "./helpers/assets.ts";

test("the TS error codes are the Rust codes, then the converter's CONVERT_FAILED", (t) => {
  const src = readFileSync(path.join(repoRoot, "crates/wick-core/src/error.rs"), "utf8");
  const list = src.slice(src.indexOf("macro_rules! with_error_codes"), src.indexOf("macro_rules! declare_error_codes"));
  const rust = [...list.matchAll(/^\s*[A-Za-z]+ => "([A-Z_]+)",$/gm)].map((m) => m[1]);
  t.true(rust.length >= 10, `parsed ${rust.length} codes`);
  t.deepEqual([...engineCodes()], [...rust, "CONVERT_FAILED"]);
});

const tinyLlama = needs(fixture("tiny-llama-q8_0.gguf"));
const tinyLfm2 = needs(fixture("tiny-lfm2-q8_0.gguf"));

tinyLlama.test("CONTEXT_LENGTH_EXCEEDED carries its numbers as fields, the message unchanged", async (t) => {
  const e = await Engine.load({ modelPath: tinyLlama.path!, contextSize: 64 });
  try {
    const ctx = e.info().contextSize;
    const long = new Array(ctx + 5).fill(1);
    const a = t.throws(() => e.generate({ promptTokens: long }), { instanceOf: WickError });
    t.is(a.code, "CONTEXT_LENGTH_EXCEEDED");
    t.is(a.message, `this model's context length is ${ctx} tokens; the request has ${ctx + 5} prompt tokens`);
    t.is(a.promptTokens, ctx + 5);
    t.is(a.contextSize, ctx);
    t.is(a.maxTokens, undefined);
    t.false("maxTokens" in a);
    const b = t.throws(() => e.generate({ promptTokens: [1, 2], maxTokens: ctx }), { instanceOf: WickError });
    t.is(b.message, `this model's context length is ${ctx} tokens; the request has 2 prompt tokens and asks for ${ctx} more`);
    t.like(b, { promptTokens: 2, contextSize: ctx, maxTokens: ctx });
    const other = t.throws(() => e.generate({ promptTokens: [] }), { instanceOf: WickError });
    t.is(other.code, "INVALID_REQUEST");
    t.false("promptTokens" in other);
  } finally {
    await e.unload();
  }
});

tinyLlama.test("info() reports the engine's sequence default and KV pool size", async (t) => {
  const e = await Engine.load({ modelPath: tinyLlama.path!, contextSize: 128 });
  try {
    const i = e.info();
    t.is(i.maxSequences, 4);
    t.is(i.kvTokens, 4 * 128);
    t.is(i.kvBytesPerToken, 2 * i.nLayer * i.nHeadKv * (i.nEmbd / i.nHead) * 2);
  } finally {
    await e.unload();
  }
  const two = await Engine.load({ modelPath: tinyLlama.path!, contextSize: 128, maxSequences: 2, kvTokens: 100 });
  try {
    t.like(two.info(), { maxSequences: 2, kvTokens: 128 });
  } finally {
    await two.unload();
  }
});

tinyLfm2.test("info()'s KV bytes per token leave out LFM2's conv layers", async (t) => {
  const e = await Engine.load({ modelPath: tinyLfm2.path!, contextSize: 128 });
  try {
    const i = e.info();
    const everyLayer = 2 * i.nLayer * i.nHeadKv * (i.nEmbd / i.nHead) * 2;
    t.true(i.kvBytesPerToken > 0);
    t.true(i.kvBytesPerToken < everyLayer, `${i.kvBytesPerToken} vs ${everyLayer}`);
  } finally {
    await e.unload();
  }
});
