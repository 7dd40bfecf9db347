/**
 * The library entry (`import … from "wick"`): examples/library.ts run against SmolLM2 — raw
 * generation, the chat template, a streamed chat, a forced tool call, the HTTP server
 * in-process — plus what each of those calls must give.
 */
import { readFileSync } from "node:fs";
import path from "node:path";
import { main } from "../examples/library.ts";
import { Engine, parseToolCalls, toolParserOf, chat, createServer } from "wick";
import { needs, repoRoot, smollm2 } from "./helpers/assets.ts";

const { path: model, serial } = needs(smollm2());

serial("examples/library.ts runs: generate, chat template, stream, tool call, in-process server", async (t) => {
  const lines: string[] = [];
  const r = await main(model!, (l) => lines.push(l));
  t.log(lines.join("\n"));
  t.regex(lines[0], /^loaded llama, \d+ parameters, (scalar|avx2|avx512vnni) kernels$/);
  t.true(r.completion.length > 0, "raw generation produced text");
  // SmolLM2's template is ChatML with a default system prompt.
  t.true(r.prompt.includes("<|im_start|>user\nName three colors.<|im_end|>\n<|im_start|>assistant\n"), r.prompt);
  t.true(r.streamed.length > 0);
  t.is(r.called.finishReason, "tool_calls");
  t.is(r.called.toolCalls.length, 1);
  t.is(r.called.toolCalls[0].name, "get_weather");
  t.is(typeof r.called.toolCalls[0].arguments.city, "string");
  // Greedy both ways: the in-process server answers what the library's chat streamed.
  t.is(r.served, r.streamed);
});

serial("the library's pieces: tool parsing with the model's parser, API key on the server, engines left loaded", async (t) => {
  const engine = await Engine.load({ modelPath: model!, contextSize: 1024 });
  t.teardown(() => engine.unload());
  t.is(toolParserOf(engine), "hermes");
  const parsed = parseToolCalls(engine, 'Sure.<tool_call>\n{"name": "f", "arguments": {"x": 1}}\n</tool_call>');
  t.deepEqual(parsed, { content: "Sure.", calls: [{ name: "f", arguments: { x: 1 } }] });
  const server = await createServer({ models: engine, apiKey: "k" });
  const denied = await fetch(`${server.url}/v1/models`);
  t.is(denied.status, 401);
  const health = await fetch(`${server.url}/health`);
  t.is(health.status, 200);
  await server.close();
  // The engine is the caller's: still usable after the server is gone.
  const after = await chat(engine, { messages: [{ role: "user", content: "Hi" }], maxTokens: 4, temperature: 0 });
  t.is(after.usage.completionTokens, 4);
  t.is(after.finishReason, "length");
});

serial("docs/library.md shows the example's calls", (t) => {
  const doc = readFileSync(path.join(repoRoot, "docs/library.md"), "utf8");
  for (const call of ["Engine.load(", "engine.generate(", "applyChatTemplate(", "chatStream(", "chat(", "createServer(", "examples/library.ts"]) {
    t.true(doc.includes(call), `docs/library.md mentions ${call}`);
  }
});
