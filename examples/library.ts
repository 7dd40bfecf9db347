/**
 * Wick as a library: load a GGUF model in-process, generate tokens, chat with its template,
 * call a tool, and serve the OpenAI API from the same process.
 *
 *   npx tsx examples/library.ts path/to/model.gguf
 *
 * `main` returns what it saw, so test/library.test.ts runs these exact calls.
 */
import { applyChatTemplate, chat, chatStream, createServer, cpuIsa, Engine, type ChatTool } from "wick";

export async function main(modelPath: string, log: (line: string) => void = console.log) {
  const engine = await Engine.load({ modelPath, contextSize: 2048 });
  try {
    log(`loaded ${engine.info().architecture}, ${engine.info().nParams} parameters, ${cpuIsa()} kernels`);

    // 1. Raw generation: token ids in, token events out (greedy, 16 tokens at most).
    let completion = "";
    for await (const ev of engine.generate({ promptTokens: engine.tokenize("The capital of France is"), maxTokens: 16, temperature: 0 })) {
      if (ev.type === "token") completion += ev.text;
      else log(`generate: ${JSON.stringify(completion)} (${ev.finishReason}, ${ev.usage.completionTokens} tokens)`);
    }

    // 2. Chat: the model's own template, streamed.
    const messages = [{ role: "user" as const, content: "Name three colors." }];
    const prompt = applyChatTemplate(engine, messages);
    let streamed = "";
    for await (const ev of chatStream(engine, { messages, maxTokens: 32, temperature: 0 })) {
      if (ev.type === "content") streamed += ev.text;
    }
    log(`chat: ${JSON.stringify(streamed)}`);

    // 3. Tools: a forced call (one at most) comes back parsed, its arguments an object. A 135M
    //    model picks odd arguments; the call's shape is held by a grammar.
    const tools: ChatTool[] = [
      {
        type: "function",
        function: { name: "get_weather", description: "Current weather in a city", parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } },
      },
    ];
    const called = await chat(engine, {
      messages: [{ role: "user", content: "What is the weather in Paris?" }],
      tools,
      toolChoice: "required",
      parallelToolCalls: false,
      maxTokens: 64,
      temperature: 0,
    });
    log(`tool call: ${JSON.stringify(called.toolCalls)} (${called.finishReason})`);

    // 4. The HTTP server in-process: any OpenAI client can now talk to this engine.
    const server = await createServer({ models: { smollm: engine }, port: 0 });
    let served: string;
    try {
      const res = await fetch(`${server.url}/v1/chat/completions`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ model: "smollm", messages, max_tokens: 32, temperature: 0 }),
      });
      const body = (await res.json()) as { choices: { message: { content: string } }[] };
      served = body.choices[0]!.message.content;
      log(`server ${server.url}: ${JSON.stringify(served)}`);
    } finally {
      await server.close();
    }
    return { completion, prompt, streamed, called, served };
  } finally {
    await engine.unload();
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const modelPath = process.argv[2];
  if (!modelPath) throw new Error("usage: tsx examples/library.ts <model.gguf>");
  await main(modelPath);
}
