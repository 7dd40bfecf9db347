/**
 * One choice's output with tools offered: text deltas in, content and numbered calls out, the
 * same whether the response is streamed or not. Calls get OpenAI's `call_…` ids and their index
 * within the choice; with `parallel_tool_calls: false` only the first call is kept.
 */
import { randomBytes } from "node:crypto";
import { ToolStream } from "./index.ts";
import type { ToolPlan } from "./request.ts";

export interface OutputCall {
  index: number;
  id: string;
  name: string;
  /** JSON text, as OpenAI sends arguments. */
  arguments: string;
  /** The same arguments as an object (Ollama's shape). */
  args: Record<string, unknown>;
}

export interface OutputDelta {
  content: string;
  calls: OutputCall[];
}

export class ToolOutput {
  private readonly stream: ToolStream | null;
  private count = 0;

  constructor(private readonly plan: ToolPlan) {
    this.stream = plan.parser ? new ToolStream(plan.parser, (calls) => calls.every((c) => plan.allowed.has(c.name))) : null;
  }

  /** True once a call has been emitted: the choice then finishes with "tool_calls". */
  get called(): boolean {
    return this.count > 0;
  }

  push(text: string): OutputDelta {
    return this.stream ? this.number(this.stream.push(text)) : { content: text, calls: [] };
  }

  /** `cut`: generation hit its token limit (a call it was writing is dropped, not shown as text). */
  finish(cut = false): OutputDelta {
    return this.stream ? this.number(this.stream.finish(cut)) : { content: "", calls: [] };
  }

  private number({ content, calls }: { content: string; calls: { name: string; arguments: Record<string, unknown> }[] }): OutputDelta {
    const out: OutputCall[] = [];
    for (const c of calls) {
      if (this.plan.single && this.count > 0) break;
      out.push({ index: this.count++, id: `call_${randomBytes(12).toString("hex")}`, name: c.name, arguments: JSON.stringify(c.arguments), args: c.arguments });
    }
    return { content, calls: out };
  }
}
