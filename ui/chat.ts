/**
 * One answer: the branch up to its user message sent to /v1/chat/completions as a stream
 * (with `stream_options.include_usage`), content, `reasoning_content` and tool-call deltas
 * folded into the message as they arrive. Stop is the fetch's abort: the server sees the
 * client leave and cancels the sequence at its next step.
 */
import { ApiError, request, sse } from "./api.ts";
import { branch, type Conversation, type Message, type ToolCall } from "./db.ts";

type Part = { type: "text"; text: string } | { type: "image_url"; image_url: { url: string } };

/** The OpenAI messages for the branch ending at `leaf`. */
export function apiMessages(c: Conversation, leaf: string | null): Record<string, unknown>[] {
  const out: Record<string, unknown>[] = [];
  if (c.system.trim()) out.push({ role: "system", content: c.system });
  for (const m of branch(c, leaf)) {
    if (m.role === "user") {
      const images = m.images ?? [];
      const content: string | Part[] = images.length ? [...images.map((url): Part => ({ type: "image_url", image_url: { url } })), { type: "text", text: m.content }] : m.content;
      out.push({ role: "user", content });
    } else {
      // A past call is sent as text: the page runs no tools, so there is no tool result to pair it with.
      const calls = (m.toolCalls ?? []).map((t) => `${t.name}(${t.arguments})`).join("\n");
      out.push({ role: "assistant", content: m.content || calls });
    }
  }
  return out;
}

/** The request body; throws a readable error for settings the page cannot send. */
export function chatBody(c: Conversation, leaf: string | null): Record<string, unknown> {
  const s = c.settings;
  const body: Record<string, unknown> = { model: c.model, messages: apiMessages(c, leaf), stream: true, stream_options: { include_usage: true } };
  for (const k of ["temperature", "top_p", "max_tokens", "seed"] as const) if (s[k] !== null && s[k] !== undefined) body[k] = s[k];
  if (s.tools.trim()) {
    try {
      body.tools = JSON.parse(s.tools) as unknown;
    } catch (err) {
      throw new ApiError(`Settings → Tools is not valid JSON: ${(err as Error).message}`, 0);
    }
  }
  return body;
}

interface Delta {
  content?: string | null;
  reasoning_content?: string | null;
  tool_calls?: { index: number; id?: string; function?: { name?: string; arguments?: string } }[];
}

/**
 * Streams the answer into `m` (an assistant message whose parent is the user turn), calling
 * `update` after each change. Resolves when the stream ends, is stopped, or fails; the failure
 * is kept on the message as `error`.
 */
export async function generate(c: Conversation, m: Message, signal: AbortSignal, update: () => void): Promise<void> {
  const start = performance.now();
  let first = 0;
  let last = 0;
  try {
    const res = await request("POST", "/v1/chat/completions", chatBody(c, m.parent), signal);
    for await (const frame of sse(res)) {
      const choice = (frame.choices as { delta?: Delta }[] | undefined)?.[0];
      const d = choice?.delta;
      if (d) {
        if (d.content) m.content += d.content;
        if (d.reasoning_content) m.reasoning = (m.reasoning ?? "") + d.reasoning_content;
        for (const t of d.tool_calls ?? []) {
          const calls = (m.toolCalls ??= []);
          const call: ToolCall = (calls[t.index] ??= { name: "", arguments: "" });
          if (t.id) call.id = t.id;
          if (t.function?.name) call.name += t.function.name;
          if (t.function?.arguments) call.arguments += t.function.arguments;
        }
        if (d.content || d.reasoning_content || d.tool_calls) {
          last = performance.now();
          first ||= last;
        }
      }
      const usage = frame.usage as { prompt_tokens: number; completion_tokens: number } | undefined;
      if (usage) {
        const secs = (last - first) / 1000;
        // Decode speed: the tokens after the first over the time after it (the first token's wait is prefill).
        const tps = usage.completion_tokens > 1 && secs > 0 ? (usage.completion_tokens - 1) / secs : null;
        m.usage = { prompt: usage.prompt_tokens, completion: usage.completion_tokens, tps, ttft: first ? (first - start) / 1000 : null };
      }
      update();
    }
  } catch (err) {
    if ((err as Error).name === "AbortError") m.stopped = true;
    else m.error = (err as Error).message || String(err);
  }
  update();
}
