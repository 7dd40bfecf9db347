/**
 * One choice's thinking split from its answer, streamed: text deltas in, `{reasoning, content}`
 * out, the same whether the response is streamed or not. It runs before the tool parser, so a
 * call written while thinking stays thinking (llama.cpp parses reasoning first too).
 *
 * The rules are llama.cpp's and Ollama's: a think block opens only at the start of the answer
 * (leading whitespace allowed) — text first means the model is not thinking, and all of it is
 * content; or the prompt itself opened it (DeepSeek-R1, Qwen3-Thinking write the open marker in
 * the generation prompt), and the answer starts inside. Whitespace after either marker and
 * before the close marker is dropped; one block per answer, so later markers are content. A
 * block that never closes (finish "length") is all reasoning.
 */

/** A reasoning format's markers, e.g. `<think>` / `</think>`. */
export interface ReasoningMarkers {
  open: string;
  close: string;
}

export interface SplitDelta {
  reasoning: string;
  content: string;
}

/** Where the splitter is: before anything but whitespace, inside the block, or after it. */
type State = "start" | "thinking" | "content";

export class ReasoningSplit {
  private state: State;
  /** Text not yet settled: a possible partial marker, or whitespace the next text decides. */
  private buf = "";
  /** Drop whitespace until the next other character (just after a marker). */
  private trimLeading: boolean;

  /** `inside`: the prompt opened the block, so the answer begins as reasoning. */
  constructor(
    private readonly markers: ReasoningMarkers,
    inside = false,
  ) {
    this.state = inside ? "thinking" : "start";
    this.trimLeading = inside;
  }

  /** Inside the think block (its open marker seen, its close not yet). */
  get thinking(): boolean {
    return this.state === "thinking";
  }

  push(text: string): SplitDelta {
    const out: SplitDelta = { reasoning: "", content: "" };
    this.buf += text;
    if (this.state === "start") this.atStart();
    if (this.state === "thinking") this.inBlock(out);
    if (this.state === "content") this.afterBlock(out);
    return out;
  }

  /** End of generation: held text is what it looked like (an unfinished marker is plain text). */
  finish(): SplitDelta {
    const held = this.buf;
    this.buf = "";
    if (this.state === "thinking") return { reasoning: held.trimEnd(), content: "" };
    if (this.state === "start") return { reasoning: "", content: held };
    return { reasoning: "", content: this.trimLeading ? held.trimStart() : held };
  }

  /** Before the answer's first non-space text: is it the open marker? */
  private atStart(): void {
    const { open } = this.markers;
    const lead = this.buf.trimStart();
    if (lead.startsWith(open)) {
      this.buf = lead.slice(open.length);
      this.state = "thinking";
      this.trimLeading = true;
    } else if (!open.startsWith(lead)) {
      // Not thinking: everything, held whitespace included, is the answer.
      this.state = "content";
    }
    // Else still a possible open marker: hold it all.
  }

  private inBlock(out: SplitDelta): void {
    const { close } = this.markers;
    if (this.trimLeading) this.skipSpace();
    const end = this.buf.indexOf(close);
    if (end >= 0) {
      out.reasoning += this.buf.slice(0, end).trimEnd();
      this.buf = this.buf.slice(end + close.length);
      this.state = "content";
      this.trimLeading = true;
      return;
    }
    // Hold a possible partial close marker, and trailing whitespace (dropped if the block ends next).
    const hold = trailingSpaceFrom(this.buf, holdFrom(this.buf, close));
    out.reasoning += this.buf.slice(0, hold);
    this.buf = this.buf.slice(hold);
  }

  private afterBlock(out: SplitDelta): void {
    if (this.trimLeading) this.skipSpace();
    out.content += this.buf;
    this.buf = "";
  }

  /** Drops leading whitespace; once other text arrives, stops dropping. */
  private skipSpace(): void {
    this.buf = this.buf.trimStart();
    if (this.buf) this.trimLeading = false;
  }
}

/**
 * Index from which `text` must be held because it may begin `marker`: the earliest suffix that
 * is a proper prefix of the marker, or `text.length` when none is.
 */
function holdFrom(text: string, marker: string): number {
  for (let i = Math.max(0, text.length - marker.length + 1); i < text.length; i++) {
    if (marker.startsWith(text.slice(i))) return i;
  }
  return text.length;
}

/** Moves `at` back over the whitespace just before it. */
function trailingSpaceFrom(text: string, at: number): number {
  while (at > 0 && /\s/.test(text[at - 1])) at--;
  return at;
}
