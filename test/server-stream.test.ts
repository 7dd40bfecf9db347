/**
 * SSE as the contract has it, seen on the wire with fetch: headers at once, `data:` frames,
 * `[DONE]`; a client that leaves cancels its sequence within 100 ms (or at the next engine step
 * when one step is slower than that on a loaded machine); an engine failure after
 * the stream began arrives as `data: {"error": …}`.
 */
import type { ExecutionContext } from "ava";
import OpenAI from "openai";
import { needs, smollm2 } from "./helpers/assets.ts";
import { postJson, serveModel, waitFor } from "./helpers/server.ts";

const { path: smol, serial } = needs(smollm2());
const served = serveModel(smol);

const idle = () => {
  const m = served.engine.metrics();
  return m.running === 0 && m.waiting === 0;
};

/** Reads SSE `data:` payloads from a fetch response as they arrive. */
async function* sseData(res: Response): AsyncGenerator<string> {
  const decoder = new TextDecoder();
  let buf = "";
  for await (const bytes of res.body!) {
    buf += decoder.decode(bytes, { stream: true });
    let end;
    while ((end = buf.indexOf("\n\n")) >= 0) {
      const frame = buf.slice(0, end);
      buf = buf.slice(end + 2);
      for (const line of frame.split("\n")) if (line.startsWith("data: ")) yield line.slice(6);
    }
  }
}

/**
 * Call right when the client leaves. The engine checks for cancellation between steps, so the
 * sequence must be gone within 100 ms — or, when one step alone takes longer (a machine
 * shared with compilers), after at most the step in flight plus one that may have started
 * before the server saw the socket close. A sequence that was not cancelled would keep
 * stepping for its 1500 tokens.
 */
async function assertCancelled(t: ExecutionContext, what: string) {
  const s0 = served.engine.metrics().stepsTotal;
  const ms = await waitFor(idle, 5_000, 1);
  const steps = served.engine.metrics().stepsTotal - s0;
  t.log(`${what}: engine idle ${ms.toFixed(1)} ms after the client left, ${steps} engine step(s) later`);
  t.true(ms >= 0, `${what}: still active after 5 s: ${JSON.stringify(served.engine.metrics())}`);
  t.true(ms <= 100 || steps <= 2, `${what}: took ${ms.toFixed(0)} ms and ${steps} steps to stop`);
}

const longChat = { model: "m", messages: [{ role: "user", content: "Tell me a long story about a dragon." }], max_tokens: 1500, ignore_eos: true, stream: true };

serial("SSE frames: event-stream headers sent at once, one id, role first, [DONE] last", async (t) => {
  const started = performance.now();
  // A long prompt: headers must not wait for its prefill.
  const prompt = "Summarise this: " + "the cat sat on the mat. ".repeat(50);
  const res = await fetch(`${served.server.url}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ messages: [{ role: "user", content: prompt }], max_tokens: 8, temperature: 0, stream: true }),
  });
  const headersMs = performance.now() - started;
  t.is(res.status, 200);
  t.regex(res.headers.get("content-type")!, /^text\/event-stream/);
  t.is(res.headers.get("cache-control"), "no-cache");
  const frames: string[] = [];
  let firstContentMs = -1;
  for await (const data of sseData(res)) {
    frames.push(data);
    if (firstContentMs < 0 && data.includes('"content":"') && !data.includes('"role"')) firstContentMs = performance.now() - started;
  }
  t.log(`headers after ${headersMs.toFixed(0)} ms, first content after ${firstContentMs.toFixed(0)} ms`);
  t.true(headersMs < firstContentMs, "headers came before the first token");
  t.is(frames.at(-1), "[DONE]");
  const chunks = frames.slice(0, -1).map((f) => JSON.parse(f));
  t.deepEqual(chunks[0].choices[0].delta, { role: "assistant", content: "" });
  t.is(new Set(chunks.map((c) => c.id)).size, 1);
  t.regex(chunks[0].id, /^chatcmpl-/);
  t.true(
    chunks.every((c) => !("usage" in c)),
    "no usage key without include_usage",
  );
});

serial("a streaming client (openai SDK) that leaves after 3 chunks has its sequence cancelled within 100 ms", async (t) => {
  const stream = await served.client.chat.completions.create(longChat as unknown as OpenAI.ChatCompletionCreateParamsStreaming);
  let n = 0;
  for await (const _ of stream) if (++n === 3) break; // the SDK aborts the HTTP request on break
  await assertCancelled(t, "openai SDK");
  const after = await served.client.chat.completions.create({ model: "m", messages: [{ role: "user", content: "hi" }], max_tokens: 3 });
  t.is(after.choices.length, 1, "the server keeps serving");
});

serial("a raw fetch client aborted after 3 frames: cancelled within 100 ms, for n = 2 as well", async (t) => {
  for (const n of [1, 2]) {
    const ac = new AbortController();
    const res = await fetch(`${served.server.url}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ ...longChat, n }),
      signal: ac.signal,
    });
    let frames = 0;
    let cancelled: Promise<void> | undefined;
    try {
      for await (const _ of sseData(res)) {
        if (++frames === 3 + n) {
          ac.abort();
          cancelled = assertCancelled(t, `fetch, n=${n}`);
        }
      }
    } catch {
      // AbortError from the body stream
    }
    t.truthy(cancelled, "the stream ended before 3 frames");
    await cancelled;
  }
});

serial("a non-streaming client that leaves also cancels its sequence", async (t) => {
  const ac = new AbortController();
  const pending = fetch(`${served.server.url}/v1/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ prompt: "Once upon a time", max_tokens: 1500, ignore_eos: true }),
    signal: ac.signal,
  }).catch((err: Error) => err);
  t.true((await waitFor(() => served.engine.metrics().running > 0, 5000)) >= 0, "generation started");
  ac.abort();
  await Promise.all([assertCancelled(t, "non-streaming"), pending]);
});

serial("completions stream: text_completion chunks, finish chunk, usage chunk, [DONE]", async (t) => {
  const res = await fetch(`${served.server.url}/v1/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ prompt: "Hello", max_tokens: 5, ignore_eos: true, stream: true, stream_options: { include_usage: true } }),
  });
  const frames: string[] = [];
  for await (const data of sseData(res)) frames.push(data);
  t.is(frames.at(-1), "[DONE]");
  const chunks = frames.slice(0, -1).map((f) => JSON.parse(f));
  t.true(chunks.every((c) => c.object === "text_completion"));
  const usage = chunks.at(-1);
  t.deepEqual(usage.choices, []);
  t.is(usage.usage.completion_tokens, 5);
  t.is(chunks.at(-2).choices[0].finish_reason, "length");
  t.true(chunks.slice(0, -2).every((c) => c.choices[0].finish_reason === null && c.usage === null));
});

serial("errors before the stream starts are plain JSON errors, not SSE", async (t) => {
  const res = await postJson(`${served.server.url}/v1/chat/completions`, { messages: [{ role: "user", content: "x ".repeat(5000) }], stream: true });
  t.is(res.status, 400);
  t.regex(res.headers.get("content-type")!, /application\/json/);
  t.is(res.json.error.code, "context_length_exceeded");
});

// Last: it stops this file's engine.
serial("an engine failure after the stream began arrives as data: {error} and the stream closes", async (t) => {
  const res = await fetch(`${served.server.url}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(longChat),
  });
  const frames: string[] = [];
  let unloading: Promise<void> | undefined;
  for await (const data of sseData(res)) {
    frames.push(data);
    if (frames.length === 3) unloading = served.engine.unload();
  }
  await unloading;
  const last = JSON.parse(frames.at(-1)!);
  t.truthy(last.error, `last frame: ${frames.at(-1)}`);
  t.deepEqual(Object.keys(last.error).sort(), ["code", "message", "param", "type"]);
  t.is(last.error.code, "model_unloaded");
  t.false(frames.includes("[DONE]"));
  t.log(frames.at(-1));
});
