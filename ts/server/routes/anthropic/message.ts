/**
 * Answer events → Anthropic's `message`: the whole body (from `collectAnswer`) or its stream of
 * named events (`message_start`, `ping`, a `content_block_start` / `_delta` / `_stop` run per
 * block, `message_delta` with the stop reason and usage, `message_stop`), which the SDK's
 * MessageStream folds back into the same body. Blocks come as Anthropic orders them: thinking,
 * text, then each tool call as one `tool_use` block whose input arrives as one
 * `input_json_delta`. Calls are whole by the time they are events, so there is nothing to
 * stream piece by piece.
 */
import { randomBytes } from "node:crypto";
import type { Answer, AnswerDone, DeltaEvent, WholeAnswer } from "../../../service/answer.ts";
import type { OutputCall } from "../../../service/tools/output.ts";
import type { NamedFrame } from "../../stream.ts";

export interface MessageMeta {
  id: string;
  model: string;
}

/** `msg_…`, as Anthropic names messages. */
export const messageId = () => `msg_${randomBytes(12).toString("hex")}`;

type StopReason = "end_turn" | "max_tokens" | "stop_sequence" | "tool_use";

function stopOf(done: AnswerDone): { stop_reason: StopReason; stop_sequence: string | null } {
  if (done.finishReason === "length") return { stop_reason: "max_tokens", stop_sequence: null };
  if (done.finishReason === "tool_calls") return { stop_reason: "tool_use", stop_sequence: null };
  const seq = done.stopSequence;
  return { stop_reason: seq === null ? "end_turn" : "stop_sequence", stop_sequence: seq };
}

/**
 * Wick's prefix cache is automatic, not Anthropic's opt-in cache: the whole prompt is input,
 * so input_tokens is what count_tokens says and clients that add the cache fields count once.
 */
const usageOf = (input: number, output: number) => ({ input_tokens: input, output_tokens: output, cache_creation_input_tokens: 0, cache_read_input_tokens: 0 });

const toolUseId = (c: OutputCall) => c.id.replace(/^call_/, "toolu_");

export function messageBody(meta: MessageMeta, whole: WholeAnswer) {
  const c = whole.choices[0];
  const content = [
    ...(c.reasoning ? [{ type: "thinking", thinking: c.reasoning, signature: "" }] : []),
    ...(c.content ? [{ type: "text", text: c.content }] : []),
    ...c.calls.map((call) => ({ type: "tool_use", id: toolUseId(call), name: call.name, input: call.args })),
  ];
  const { usage } = c.done;
  return { id: meta.id, type: "message", role: "assistant", model: meta.model, content, ...stopOf(c.done), usage: usageOf(usage.promptTokens, usage.completionTokens) };
}

const frame = (event: string, data: Record<string, unknown> = {}): NamedFrame => ({ event, data: { type: event, ...data } });

/** The event stream of one message; `inputTokens` is the prompt as planned (message_start goes out before prefill). */
export async function* messageFrames(meta: MessageMeta, { events }: Answer, inputTokens: number): AsyncGenerator<NamedFrame> {
  const message = { id: meta.id, type: "message", role: "assistant", model: meta.model, content: [], stop_reason: null, stop_sequence: null, usage: usageOf(inputTokens, 0) };
  yield frame("message_start", { message });
  yield frame("ping");
  const blocks = new Blocks();
  for await (const ev of events) {
    if (ev.type === "delta") {
      yield* blocks.delta(ev);
      continue;
    }
    yield* blocks.close();
    yield frame("message_delta", { delta: stopOf(ev), usage: usageOf(ev.usage.promptTokens, ev.usage.completionTokens) });
    yield frame("message_stop");
  }
}

/** The open content block of a stream: a new one starts whenever the kind of delta changes. */
class Blocks {
  private index = -1;
  private open: "text" | "thinking" | null = null;

  *delta(ev: DeltaEvent): Generator<NamedFrame> {
    if (ev.reasoning) yield* this.text("thinking", ev.reasoning);
    if (ev.content) yield* this.text("text", ev.content);
    for (const c of ev.calls) {
      yield* this.start({ type: "tool_use", id: toolUseId(c), name: c.name, input: {} });
      yield frame("content_block_delta", { index: this.index, delta: { type: "input_json_delta", partial_json: c.arguments } });
      yield frame("content_block_stop", { index: this.index });
    }
  }

  *close(): Generator<NamedFrame> {
    if (this.open) yield frame("content_block_stop", { index: this.index });
    this.open = null;
  }

  private *text(kind: "text" | "thinking", s: string): Generator<NamedFrame> {
    if (this.open !== kind) {
      yield* this.start(kind === "text" ? { type: "text", text: "" } : { type: "thinking", thinking: "", signature: "" });
      this.open = kind;
    }
    const delta = kind === "text" ? { type: "text_delta", text: s } : { type: "thinking_delta", thinking: s };
    yield frame("content_block_delta", { index: this.index, delta });
  }

  private *start(block: Record<string, unknown>): Generator<NamedFrame> {
    yield* this.close();
    this.index++;
    yield frame("content_block_start", { index: this.index, content_block: block });
  }
}
