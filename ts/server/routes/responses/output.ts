/**
 * Answer events → a Responses `response`: output items in the order the answer produced them
 * (a `reasoning` item, a `message` with one `output_text` part, `function_call` items; a new
 * item whenever the kind changes) and, for a stream, the semantic events the `openai` SDK's
 * ResponseStream folds into the same object. Streamed and whole answers are one fold over the
 * events (not `collectAnswer`, which joins all text into one string and so loses the items'
 * order); `whole` simply drops the frames, so both modes answer with the same object.
 */
import { randomBytes } from "node:crypto";
import type { AnswerDone, AnswerEvent, DeltaEvent } from "../../../service/answer.ts";
import type { OutputCall } from "../../../service/tools/output.ts";
import { toApiError } from "../../errors.ts";
import type { NamedFrame } from "../../stream.ts";

const itemId = (prefix: string) => `${prefix}_${randomBytes(12).toString("hex")}`;
const unixNow = () => Math.floor(Date.now() / 1000);

/** What the response echoes of its request, set once by the route. */
export type ResponseEcho = Record<string, unknown> & { model: string };

type Status = "in_progress" | "completed" | "incomplete";

/** A message or reasoning item: both hold one text part the deltas grow. */
interface TextItem {
  kind: "message" | "reasoning";
  id: string;
  text: string;
}

interface Usage {
  input_tokens: number;
  input_tokens_details: { cached_tokens: number };
  output_tokens: number;
  output_tokens_details: { reasoning_tokens: number };
  total_tokens: number;
}

export class ResponseBuilder {
  private readonly id = itemId("resp");
  private readonly createdAt = unixNow();
  private readonly output: Record<string, unknown>[] = [];
  private open: TextItem | null = null;
  /** Whitespace between items (before a call, after thinking): kept only if text follows. */
  private heldSpace = "";
  private seq = 0;
  private status: Status = "in_progress";
  private usage: Usage | null = null;

  constructor(private readonly echo: ResponseEcho) {}

  /** The stream: created, in progress, the items' events, then completed or incomplete. */
  async *frames(events: AsyncIterable<AnswerEvent>): AsyncGenerator<NamedFrame> {
    yield this.frame("response.created", { response: this.response() });
    yield this.frame("response.in_progress", { response: this.response() });
    for await (const ev of events) yield* this.apply(ev);
  }

  /** The whole answer: the same fold, frames dropped. */
  async whole(events: AsyncIterable<AnswerEvent>): Promise<Record<string, unknown>> {
    for await (const ev of events) this.apply(ev);
    return this.response();
  }

  /** The stream's in-band error event (the API's `error` event, numbered as the rest). */
  error(err: unknown) {
    const api = toApiError(err);
    const { code, message, param } = api.body.error;
    return { frame: this.frame("error", { code, message, param }), internal: api.internal, summary: { code, message } };
  }

  response(): Record<string, unknown> {
    const incomplete = this.status === "incomplete";
    return {
      id: this.id,
      object: "response",
      created_at: this.createdAt,
      status: this.status,
      ...(this.status === "in_progress" ? {} : { completed_at: unixNow() }),
      error: null,
      incomplete_details: incomplete ? { reason: "max_output_tokens" } : null,
      ...this.echo,
      output: structuredClone(this.output),
      usage: this.usage,
    };
  }

  private apply(ev: AnswerEvent): NamedFrame[] {
    return ev.type === "delta" ? this.delta(ev) : this.done(ev);
  }

  private delta(ev: DeltaEvent): NamedFrame[] {
    const frames: NamedFrame[] = [];
    if (ev.reasoning) frames.push(...this.text("reasoning", ev.reasoning));
    if (ev.content) frames.push(...this.text("message", ev.content));
    for (const c of ev.calls) frames.push(...this.call(c));
    return frames;
  }

  private done(ev: AnswerDone): NamedFrame[] {
    const length = ev.finishReason === "length";
    const frames = this.close(length ? "incomplete" : "completed");
    this.status = length ? "incomplete" : "completed";
    const { promptTokens, cachedTokens, completionTokens } = ev.usage;
    this.usage = {
      input_tokens: promptTokens,
      input_tokens_details: { cached_tokens: cachedTokens },
      output_tokens: completionTokens,
      output_tokens_details: { reasoning_tokens: ev.reasoningTokens },
      total_tokens: promptTokens + completionTokens,
    };
    frames.push(this.frame(length ? "response.incomplete" : "response.completed", { response: this.response() }));
    return frames;
  }

  /** Text of one kind: appended to the open item of that kind, or a new item opened for it. */
  private text(kind: TextItem["kind"], text: string): NamedFrame[] {
    const frames: NamedFrame[] = [];
    if (this.open?.kind !== kind) {
      if (kind === "message") {
        // A message of nothing but whitespace is no message: hold it until real text comes.
        if (!text.trim()) {
          this.heldSpace += text;
          return frames;
        }
        text = this.heldSpace + text;
        this.heldSpace = "";
      }
      frames.push(...this.close("completed"), ...this.openItem(kind));
    }
    const item = this.open!;
    item.text += text;
    this.textPart().text = item.text;
    const at = { item_id: item.id, output_index: this.output.length - 1, content_index: 0, delta: text };
    frames.push(kind === "message" ? this.frame("response.output_text.delta", { ...at, logprobs: [] }) : this.frame("response.reasoning_text.delta", at));
    return frames;
  }

  private openItem(kind: TextItem["kind"]): NamedFrame[] {
    const item: TextItem = { kind, id: itemId(kind === "message" ? "msg" : "rs"), text: "" };
    const added =
      kind === "message"
        ? { id: item.id, type: "message", status: "in_progress", role: "assistant", content: [] as unknown[] }
        : { id: item.id, type: "reasoning", status: "in_progress", summary: [], content: [] as unknown[] };
    this.output.push(added);
    this.open = item;
    const output_index = this.output.length - 1;
    const part = kind === "message" ? { type: "output_text", text: "", annotations: [], logprobs: [] } : { type: "reasoning_text", text: "" };
    const frames = [this.frame("response.output_item.added", { output_index, item: structuredClone(added) })];
    added.content.push(part);
    frames.push(this.frame("response.content_part.added", { item_id: item.id, output_index, content_index: 0, part: structuredClone(part) }));
    return frames;
  }

  /** The open item's one part (the open item is always the last: any new item closes it first). */
  private textPart(): { text: string } {
    return (this.output.at(-1)!.content as { text: string }[])[0];
  }

  /** Ends the open text item, if any: its text, its part and the item itself are done. */
  private close(status: Status): NamedFrame[] {
    this.heldSpace = "";
    const item = this.open;
    if (!item) return [];
    this.open = null;
    const output_index = this.output.length - 1;
    const at = { item_id: item.id, output_index, content_index: 0 };
    const whole = this.output[output_index];
    whole.status = status;
    const done = item.kind === "message" ? this.frame("response.output_text.done", { ...at, text: item.text, logprobs: [] }) : this.frame("response.reasoning_text.done", { ...at, text: item.text });
    return [done, this.frame("response.content_part.done", { ...at, part: structuredClone(this.textPart()) }), this.frame("response.output_item.done", { output_index, item: structuredClone(whole) })];
  }

  /** A whole call: its item, its arguments in one delta, then done. */
  private call(c: OutputCall): NamedFrame[] {
    const frames = this.close("completed");
    const item = { id: itemId("fc"), type: "function_call", status: "in_progress", call_id: c.id, name: c.name, arguments: "" };
    this.output.push(item);
    const output_index = this.output.length - 1;
    frames.push(this.frame("response.output_item.added", { output_index, item: structuredClone(item) }));
    frames.push(this.frame("response.function_call_arguments.delta", { item_id: item.id, output_index, delta: c.arguments }));
    frames.push(this.frame("response.function_call_arguments.done", { item_id: item.id, output_index, name: c.name, arguments: c.arguments }));
    Object.assign(item, { arguments: c.arguments, status: "completed" });
    frames.push(this.frame("response.output_item.done", { output_index, item: structuredClone(item) }));
    return frames;
  }

  private frame(type: string, data: Record<string, unknown>): NamedFrame {
    return { event: type, data: { type, ...data, sequence_number: this.seq++ } };
  }
}
