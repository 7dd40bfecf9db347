/**
 * Chat templates: rendering with @huggingface/jinja (Python-style tojson, raise_exception,
 * add_generation_prompt) and the prompt tokens of real vocabularies — special tokens parsed,
 * exactly one BOS whether the template writes it (phi-3), the vocabulary adds it (llama SPM,
 * ChatML fallback) or neither (SmolLM2) — checked against llama.cpp's own tokenizer.
 */
import test from "ava";
import type { Llama } from "node-llama-cpp";
import { Engine } from "../ts/engine/index.ts";
import { ChatTemplate, CHATML_TEMPLATE } from "../ts/service/chat-template.ts";
import { RequestError } from "../ts/service/errors.ts";
import { chatPromptTokens, completionPromptTokens } from "../ts/service/prompt.ts";
import { ModelRegistry, type ServedModel } from "../ts/service/registry.ts";
import type { ChatMessage } from "../ts/schemas/chat.ts";
import { llamaVocab, needs, smollm2 } from "./helpers/assets.ts";
import { referenceLlama, withBos } from "./helpers/llama.ts";

const specials = { bos_token: "<s>", eos_token: "</s>" };
const hi: ChatMessage[] = [{ role: "user", content: "Hi there" }];

test("tojson is Python-style (', ' and ': ' separators, non-ASCII kept)", (t) => {
  const tpl = new ChatTemplate("{{ tools | tojson }}", specials);
  const tools = [{ type: "function", function: { name: "get_weather", parameters: { city: "Zürich", days: [1, 2] } } }];
  t.is(tpl.render([], { addGenerationPrompt: false, tools }), '[{"type": "function", "function": {"name": "get_weather", "parameters": {"city": "Zürich", "days": [1, 2]}}}]');
});

test("raise_exception in a template is a 400 naming messages, with the template's words", (t) => {
  const tpl = new ChatTemplate("{% if messages[0]['role'] != 'system' %}{{ raise_exception('System message required') }}{% endif %}ok", specials);
  const err = t.throws(() => tpl.render([{ role: "user", content: "x" }], { addGenerationPrompt: true }), { instanceOf: RequestError });
  t.is(err.code, "INVALID_REQUEST");
  t.is(err.param, "messages");
  t.regex(err.message, /System message required/);
  t.is(tpl.render([{ role: "system", content: "x" }], { addGenerationPrompt: true }), "ok");
});

test("add_generation_prompt, bos_token and eos_token reach the template", (t) => {
  const tpl = new ChatTemplate("{{ bos_token }}{% for m in messages %}{{ m.role }}:{{ m.content }}{{ eos_token }}{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}", specials);
  t.is(tpl.render([{ role: "user", content: "a" }], { addGenerationPrompt: true }), "<s>user:a</s>assistant:");
  t.is(tpl.render([{ role: "user", content: "a" }], { addGenerationPrompt: false }), "<s>user:a</s>");
});

test("the ChatML fallback renders as llama.cpp's", (t) => {
  const tpl = new ChatTemplate(CHATML_TEMPLATE, specials);
  t.is(
    tpl.render(
      [
        { role: "system", content: "S" },
        { role: "user", content: "U" },
      ],
      { addGenerationPrompt: true },
    ),
    "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n",
  );
});

// --- real vocabularies (vocab-only loads) against llama.cpp's tokenizer ---

let llama: Llama;
test.before(async () => {
  llama = await referenceLlama();
});
test.after.always(async () => llama?.dispose());

async function served(modelPath: string): Promise<ServedModel> {
  const engine = await Engine.load({ modelPath, vocabOnly: true });
  return new ModelRegistry().add(engine, { path: modelPath });
}

/** llama.cpp's tokens for the rendered prompt: special tokens parsed, BOS only if the vocab adds it and it is not there. */
async function llamaCppPrompt(modelPath: string, text: string): Promise<number[]> {
  const model = await llama.loadModel({ modelPath, vocabOnly: true });
  try {
    return withBos(model, model.tokenize(text, true));
  } finally {
    await model.dispose();
  }
}

const count = (ids: number[], id: number | undefined | null) => ids.filter((x) => x === id).length;

const phi3 = needs(llamaVocab("phi-3"));
phi3.serial("phi-3: the template writes BOS, so it is not added again (exactly one BOS)", async (t) => {
  const file = phi3.path!;
  const m = await served(file);
  try {
    t.true(m.info.addBos);
    t.false(m.templateIsFallback);
    const text = m.template.render([{ role: "user", content: "Hi there" }], { addGenerationPrompt: true });
    t.true(text.startsWith("<s>"), text);
    const ids = chatPromptTokens(m, hi);
    t.is(ids[0], m.info.bosToken!);
    t.is(count(ids, m.info.bosToken), 1);
    t.deepEqual(ids, await llamaCppPrompt(file, text));
  } finally {
    await m.engine.unload();
  }
});

const llamaSpm = needs(llamaVocab("llama-spm"));
llamaSpm.serial("llama SPM without a template: ChatML fallback, BOS prepended once", async (t) => {
  const file = llamaSpm.path!;
  const m = await served(file);
  try {
    t.true(m.templateIsFallback);
    const ids = chatPromptTokens(m, hi);
    t.is(ids[0], m.info.bosToken!);
    t.is(count(ids, m.info.bosToken), 1);
    const text = m.template.render([{ role: "user", content: "Hi there" }], { addGenerationPrompt: true });
    t.deepEqual(ids, await llamaCppPrompt(file, text));
    // Completions: same rule; a prompt that already starts with the BOS text gets no second one.
    t.is(count(completionPromptTokens(m, "<s>Hello")[0], m.info.bosToken), 1);
    t.is(completionPromptTokens(m, "Hello")[0][0], m.info.bosToken!);
    t.deepEqual(completionPromptTokens(m, [5, 6, 7]), [[5, 6, 7]], "token prompts are taken as given");
  } finally {
    await m.engine.unload();
  }
});

const smol = needs(smollm2());
smol.serial("SmolLM2: the GGUF's template, <|im_start|> parsed as one special token, no BOS", async (t) => {
  const m = await served(smol.path!);
  try {
    t.false(m.info.addBos);
    t.false(m.templateIsFallback);
    const text = m.template.render([{ role: "user", content: "Hi there" }], { addGenerationPrompt: true });
    t.is(text, "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n");
    const ids = chatPromptTokens(m, hi);
    t.is(ids[0], m.engine.tokenId("<|im_start|>")!);
    t.deepEqual(ids, await llamaCppPrompt(smol.path!, text));
    // Content parts are joined; "developer" is a system message to the template.
    const parts = chatPromptTokens(m, [
      { role: "developer", content: "Be brief." },
      {
        role: "user",
        content: [
          { type: "text", text: "Hi" },
          { type: "text", text: "there" },
        ],
      },
    ]);
    const expected = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi\nthere<|im_end|>\n<|im_start|>assistant\n";
    t.deepEqual(parts, m.engine.tokenize(expected, { addSpecial: false, parseSpecial: true }));
  } finally {
    await m.engine.unload();
  }
});
