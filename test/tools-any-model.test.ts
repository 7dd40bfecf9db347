/**
 * Tools on a model whose chat template never renders them (SmolLM2-135M's), with the real
 * `openai` client: the tools reach the prompt through the generic tool prompt (llama-server's
 * behaviour, Hermes form), forced calls validate against their schemas and end the turn with
 * "tool_calls" whatever the seed, a call cut by max_tokens leaves no markup in content, and a
 * span the grammar fixes costs the tokens its text does (forced as canonical tokens).
 */
import { Ajv } from "ajv";
import type OpenAI from "openai";
import { needs, smollm2 } from "./helpers/assets.ts";
import { serveModel } from "./helpers/server.ts";

const { path: smol, serial } = needs(smollm2());
const MODEL = "SmolLM2-135M-Instruct.Q4_1";
const ASK = [{ role: "user" as const, content: "What is the weather in Paris?" }];
const PARAMS = {
  type: "object",
  properties: { city: { type: "string", maxLength: 40 }, days: { type: "integer", minimum: 1, maximum: 14 } },
  required: ["city"],
  additionalProperties: false,
};
const weather = { type: "function" as const, function: { name: "get_weather", description: "Weather forecast for a city", parameters: PARAMS } };
const clock = { type: "function" as const, function: { name: "get_time", description: "The current time", parameters: { type: "object", properties: {} } } };

const served = serveModel(smol);

async function chat(body: Record<string, unknown>): Promise<OpenAI.ChatCompletion> {
  return served.client.chat.completions.create({ model: MODEL, messages: ASK, ...body } as never);
}

serial("auto: the tools are written into the prompt of a template that has no place for them", async (t) => {
  const plain = await chat({ max_tokens: 1, temperature: 0 });
  const withTools = await chat({ max_tokens: 1, temperature: 0, tools: [weather, clock] });
  const words = JSON.stringify(weather.function).length / 4;
  t.true(withTools.usage!.prompt_tokens > plain.usage!.prompt_tokens + words, `${withTools.usage!.prompt_tokens} vs ${plain.usage!.prompt_tokens}`);
  // tool_choice "none": the tools stay out of the answer; the request is still served.
  const none = await chat({ max_tokens: 8, temperature: 0, tools: [weather], tool_choice: "none" });
  t.is(none.choices[0].message.tool_calls, undefined);
});

for (const choice of ["required", { type: "function", function: { name: "get_weather" } }] as const) {
  const name = typeof choice === "string" ? choice : "a named function";
  serial(`${name}: a schema-valid call and finish_reason "tool_calls" for 20 seeds`, async (t) => {
    const validate = new Ajv().compile(PARAMS);
    for (let seed = 1; seed <= 20; seed++) {
      const r = await chat({ tools: [weather], tool_choice: choice, seed, temperature: 1, max_tokens: 600 });
      const c = r.choices[0];
      t.is(c.finish_reason, "tool_calls", `seed ${seed}: ${JSON.stringify(c.message)}`);
      const calls = c.message.tool_calls ?? [];
      t.true(calls.length >= 1 && (typeof choice !== "string" || calls.length <= 8), `seed ${seed}: ${calls.length} calls`);
      if (typeof choice !== "string") t.is(calls.length, 1, `seed ${seed}: one call when parallel calls are not forced`);
      for (const call of calls) {
        if (call.type !== "function") throw new Error("not a function call");
        t.is(call.function.name, "get_weather");
        const args: unknown = JSON.parse(call.function.arguments);
        t.true(validate(args), `seed ${seed}: ${call.function.arguments} ${JSON.stringify(validate.errors)}`);
      }
      t.true(!c.message.content?.includes("<tool_call>"), `seed ${seed}: markup in content`);
    }
  });
}

serial("a call cut by max_tokens: the calls before it come back, no partial markup in content, streamed or not", async (t) => {
  const body = { tools: [weather], tool_choice: "required", seed: 2, temperature: 1 };
  // The first whole call takes ~30 tokens: cut inside the second block (or the first).
  for (const max_tokens of [12, 45]) {
    const r = await chat({ ...body, max_tokens });
    const c = r.choices[0];
    t.is(c.finish_reason, "length");
    t.true(!(c.message.content ?? "").includes("<tool_call>") && !(c.message.content ?? "").includes('{"name"'), JSON.stringify(c.message.content));
    const stream = await served.client.chat.completions.create({ model: MODEL, messages: ASK, ...body, max_tokens, stream: true } as never);
    let content = "";
    for await (const chunk of stream as unknown as AsyncIterable<OpenAI.ChatCompletionChunk>) content += chunk.choices[0]?.delta.content ?? "";
    t.true(!content.includes("<tool_call>"), JSON.stringify(content));
    t.is(content.trim(), (c.message.content ?? "").trim());
  }
});

serial("a forced span costs the tokens its text does: a fully fixed call equals its own tokenization", async (t) => {
  const fixed = {
    type: "function" as const,
    function: { name: "set_unit", parameters: { type: "object", properties: { unit: { const: "celsius" } }, required: ["unit"], additionalProperties: false } },
  };
  const r = await chat({ tools: [fixed], tool_choice: { type: "function", function: { name: "set_unit" } }, temperature: 1, seed: 9, max_tokens: 200, logprobs: true });
  const c = r.choices[0];
  t.is(c.finish_reason, "tool_calls");
  t.deepEqual(JSON.parse(c.message.tool_calls![0].type === "function" ? c.message.tool_calls![0].function.arguments : "null"), { unit: "celsius" });
  const tokens = c.logprobs!.content!.map((l) => l.token);
  const text = tokens.join("");
  t.true(text.startsWith("<tool_call>") && text.includes("</tool_call>"), JSON.stringify(text));
  const canonical = served.engine.tokenize(text, { addSpecial: false });
  t.is(tokens.length, canonical.length, `${JSON.stringify(tokens)} vs ${canonical.length} tokens`);
  t.true(r.usage!.completion_tokens - tokens.length <= 1, "no token beyond the call but its end");
});
