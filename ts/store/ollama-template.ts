/**
 * A Modelfile TEMPLATE turned into a prompt the way Ollama's template.Execute does it:
 *
 * - consecutive messages of one role are merged with "\n\n" (tool messages never are), and all
 *   system messages are joined into `.System`;
 * - a template that uses `.Messages` gets `{System, Messages, Tools, Response: "", Think}`;
 * - an older template (only `.System`/`.Prompt`/`.Response`) is run once per exchange, and the
 *   last run is cut at `{{ .Response }}` so the prompt ends where the reply begins.
 */
import { GoTemplate } from "./go-template.ts";

/** A message in Ollama's /api/chat shape (tool-call arguments are objects). */
export interface PromptMessage {
  role: string;
  content: string;
  thinking?: string;
  images?: string[];
  tool_calls?: { id?: string; function: { index?: number; name: string; arguments: Record<string, unknown> } }[];
  tool_name?: string;
  tool_call_id?: string;
}

export interface PromptValues {
  messages: PromptMessage[];
  /** Tools in the API shape `{type: "function", function: {name, description, parameters}}`. */
  tools?: unknown[];
  think?: boolean;
}

/** Merges same-role runs (not tool) and gathers the system text, as Ollama's collate. */
export function collate(messages: PromptMessage[]): { system: string; messages: PromptMessage[] } {
  const system: string[] = [];
  const out: PromptMessage[] = [];
  for (const m of messages) {
    if (m.role === "system") system.push(m.content);
    const last = out.at(-1);
    if (last && last.role === m.role && m.role !== "tool") out[out.length - 1] = { ...last, content: `${last.content}\n\n${m.content}` };
    else out.push({ ...m });
  }
  return { system: system.join("\n\n"), messages: out };
}

/** Renders the prompt for `values` with a TEMPLATE (source or parsed). */
export function renderOllamaPrompt(template: GoTemplate | string, values: PromptValues): string {
  let t = typeof template === "string" ? GoTemplate.parse(template) : template;
  const vars = t.identifiers();
  const { system, messages } = collate(values.messages);
  const think = { Think: values.think ?? false, IsThinkSet: values.think !== undefined };
  if (vars.includes("messages")) {
    return t.execute({ System: system, Messages: messages, Tools: values.tools ?? [], Response: "", ...think });
  }
  if (!vars.includes("response")) t = t.withResponse();

  // Legacy templates: one run per exchange, the last one cut where the response starts.
  let out = "";
  let turn = { System: "", Prompt: "", Response: "" };
  const flush = () => {
    out += t.execute({ ...turn, ...think });
    turn = { System: "", Prompt: "", Response: "" };
  };
  for (const m of messages) {
    if (m.role === "system") {
      if (turn.Prompt || turn.Response) flush();
      turn.System = m.content;
    } else if (m.role === "user") {
      if (turn.Response) flush();
      turn.Prompt = m.content;
    } else if (m.role === "assistant") {
      turn.Response = m.content;
    }
  }
  return out + t.cutAtResponse().execute({ ...turn, ...think });
}
