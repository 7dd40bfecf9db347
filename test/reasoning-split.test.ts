/**
 * The thinking/answer splitter (ts/service/reasoning.ts) and the per-model and per-request plan
 * (ts/service/reasoning-plan.ts): markers cut across deltas anywhere give the same split as
 * the whole text; a block that never closes is all thinking; text before the open marker
 * means no thinking; a prompt that opened the block starts inside it; detection and the
 * `enable_thinking` switch on real chat templates from llama.cpp's source.
 */
import { readFileSync } from "node:fs";
import path from "node:path";
import test from "ava";
import { ChatTemplate } from "../ts/service/chat-template.ts";
import { ReasoningSplit, type ReasoningMarkers, type SplitDelta } from "../ts/service/reasoning.ts";
import { choiceReasoning, effortThink, modelReasoning, ollamaThink, templateMarkers, thinkTemplateVars } from "../ts/service/reasoning-plan.ts";
import { llamaSrc, localFile, needs } from "./helpers/assets.ts";

const THINK: ReasoningMarkers = { open: "<think>", close: "</think>" };

/** Feeds `pieces` one by one, then finishes: the concatenated reasoning and content. */
function run(pieces: string[], inside = false, markers = THINK): SplitDelta {
  const split = new ReasoningSplit(markers, inside);
  const out = { reasoning: "", content: "" };
  for (const d of [...pieces.map((p) => split.push(p)), split.finish()]) {
    out.reasoning += d.reasoning;
    out.content += d.content;
  }
  return out;
}

/** Every way to cut `text` in two and in three pieces, plus one character at a time. */
function cuts(text: string): string[][] {
  const all: string[][] = [[text], [...text]];
  for (let i = 0; i <= text.length; i++) {
    all.push([text.slice(0, i), text.slice(i)]);
    for (let j = i; j <= text.length; j += 3) all.push([text.slice(0, i), text.slice(i, j), text.slice(j)]);
  }
  return all;
}

const splits: [name: string, text: string, want: SplitDelta][] = [
  ["think then answer", "<think>Let me check the weather</think>\n\nIt is sunny today.", { reasoning: "Let me check the weather", content: "It is sunny today." }],
  ["whitespace around the block", "\n <think>\n  step one\n\n</think>  \nAnswer", { reasoning: "step one", content: "Answer" }],
  ["no think block", "Just an answer.", { reasoning: "", content: "Just an answer." }],
  ["text before <think> is not thinking", "Sure. <think>x</think> y", { reasoning: "", content: "Sure. <think>x</think> y" }],
  ["one block: a later one is content", "<think>a</think>b<think>c</think>", { reasoning: "a", content: "b<think>c</think>" }],
  ["a close marker lookalike inside thinking", "<think>a </thin b</think>c", { reasoning: "a </thin b", content: "c" }],
  ["an empty block", "<think></think>Answer", { reasoning: "", content: "Answer" }],
  ["a tool call inside thinking stays thinking", "<think><|tool_call_start|>[f()]<|tool_call_end|></think>ok", { reasoning: "<|tool_call_start|>[f()]<|tool_call_end|>", content: "ok" }],
  ["non-ASCII on both sides", "<think>東京 ✓ 😀</think>°C 😀", { reasoning: "東京 ✓ 😀", content: "°C 😀" }],
];

for (const [name, text, want] of splits) {
  test(`split: ${name}, cut anywhere`, (t) => {
    for (const pieces of cuts(text)) t.deepEqual(run(pieces), want, JSON.stringify(pieces));
  });
}

test("split: no closing marker (finish length) is all reasoning, a partial marker included", (t) => {
  for (const pieces of cuts("<think>Let me check")) t.deepEqual(run(pieces), { reasoning: "Let me check", content: "" });
  t.deepEqual(run(["<think>Let me </th"]), { reasoning: "Let me </th", content: "" });
});

test("split: a partial open marker at the end is content", (t) => {
  t.deepEqual(run(["  <thi"]), { reasoning: "", content: "  <thi" });
  t.deepEqual(run([""]), { reasoning: "", content: "" });
});

test("split: nothing is emitted while a marker may still be forming", (t) => {
  const split = new ReasoningSplit(THINK);
  t.deepEqual(split.push("<th"), { reasoning: "", content: "" });
  t.deepEqual(split.push("ink>Hmm"), { reasoning: "Hmm", content: "" });
  t.deepEqual(split.push(" ok </"), { reasoning: " ok", content: "" });
  t.deepEqual(split.push("think>"), { reasoning: "", content: "" });
  t.deepEqual(split.push(" Done"), { reasoning: "", content: "Done" });
});

test("split: a prompt that opened the block starts inside it", (t) => {
  for (const pieces of cuts("\nreason here\n</think>\n\nAnswer")) t.deepEqual(run(pieces, true), { reasoning: "reason here", content: "Answer" });
  t.deepEqual(run(["all thinking"], true), { reasoning: "all thinking", content: "" });
});

test("split: a template's own markers", (t) => {
  const kimi = { open: "◁think▷", close: "◁/think▷" };
  for (const pieces of cuts("◁think▷hm◁/think▷ok")) t.deepEqual(run(pieces, false, kimi), { reasoning: "hm", content: "ok" });
});

test("plan: markers from the template, the server's mode, the prompt", (t) => {
  t.deepEqual(templateMarkers("{{ '<think>' }}"), THINK);
  t.deepEqual(templateMarkers("{% if enable_thinking %}{% endif %}"), THINK);
  t.deepEqual(templateMarkers("<seed:think>"), { open: "<seed:think>", close: "</seed:think>" });
  t.is(templateMarkers("{{ messages }}"), null);
  const ids = (s: string) => ({ "<think>": 5, "</think>": 6 })[s];
  t.deepEqual(modelReasoning("<think>", { format: "auto" }, ids), { split: THINK, markerTokens: [5, 6] });
  // none: no split, but the markers stay visible in the content (llama.cpp's preserved tokens).
  t.deepEqual(modelReasoning("<think>", { format: "none" }, ids), { split: null, markerTokens: [5, 6] });
  t.deepEqual(modelReasoning("plain", { format: "auto" }, ids), { split: null, markerTokens: [] });
  t.deepEqual(modelReasoning("plain", { format: "deepseek" }, ids), { split: THINK, markerTokens: [5, 6] });
  t.deepEqual(modelReasoning("plain", { parser: "kimi" }, ids).split, { open: "◁think▷", close: "◁/think▷" });
  t.throws(() => modelReasoning("plain", { parser: "nope" }, ids), { message: /unknown reasoning parser 'nope'/ });
  const model = modelReasoning("<think>", { format: "auto" }, ids);
  t.deepEqual(choiceReasoning(model, "<|im_start|>assistant\n<think>\n"), { markers: THINK, inside: true });
  t.deepEqual(choiceReasoning(model, "<|im_start|>assistant\n<think>\n\n</think>\n\n"), { markers: THINK, inside: false });
  t.is(choiceReasoning(modelReasoning("<think>", { format: "none" }, ids), "x"), undefined);
});

test("plan: what each API's field asks of the template", (t) => {
  t.deepEqual(ollamaThink(false), { enabled: false });
  t.deepEqual(ollamaThink("high"), { enabled: true, effort: "high" });
  t.is(ollamaThink(undefined), undefined);
  t.deepEqual(effortThink("none"), { enabled: false });
  t.deepEqual(effortThink("low"), { effort: "low" });
  t.deepEqual(thinkTemplateVars({ enabled: false, effort: "low" }), { enable_thinking: false, reasoning_effort: "low" });
  t.deepEqual(thinkTemplateVars(undefined), { enable_thinking: true });
});

const template = (name: string) => localFile(path.join(llamaSrc, "models/templates", name), "run ./scripts/llama-src.sh");
const real = needs(template("Qwen-Qwen3-0.6B.jinja"), template("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja"), template("LFM2.5-8B-A1B.jinja"));

real.test("real templates: Qwen3 thinks by default and closes an empty block with enable_thinking false; R1 opens the block in the prompt unless thinking is off", (t) => {
  const load = (name: string) => new ChatTemplate(readFileSync(path.join(llamaSrc, "models/templates", name), "utf8"), { bos_token: "<s>", eos_token: "</s>" });
  const ask = [{ role: "user", content: "hi" }];
  const ids = () => undefined;
  for (const name of ["Qwen-Qwen3-0.6B.jinja", "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", "LFM2.5-8B-A1B.jinja"]) {
    t.deepEqual(templateMarkers(load(name).source), THINK, name);
  }
  const qwen = load("Qwen-Qwen3-0.6B.jinja");
  const model = modelReasoning(qwen.source, { format: "auto" }, ids);
  const on = qwen.render(ask, { addGenerationPrompt: true, vars: thinkTemplateVars(undefined) });
  const off = qwen.render(ask, { addGenerationPrompt: true, vars: thinkTemplateVars({ enabled: false }) });
  t.false(on.includes("<think>"));
  t.true(off.endsWith("<think>\n\n</think>\n\n"), JSON.stringify(off));
  t.false(choiceReasoning(model, on)!.inside);
  t.false(choiceReasoning(model, off)!.inside);
  const r1 = load("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja");
  const r1Prompt = r1.render(ask, { addGenerationPrompt: true, vars: thinkTemplateVars(undefined) });
  t.true(choiceReasoning(modelReasoning(r1.source, { format: "auto" }, ids), r1Prompt)!.inside, JSON.stringify(r1Prompt));
  const r1Off = r1.render(ask, { addGenerationPrompt: true, vars: thinkTemplateVars({ enabled: false }) });
  t.false(choiceReasoning(modelReasoning(r1.source, { format: "auto" }, ids), r1Off)!.inside, JSON.stringify(r1Off));
});
