/**
 * Tools for a model whose chat template does not render them (SmolLM2, the ChatML fallback, a
 * Modelfile TEMPLATE without `.Tools`). Ollama refuses such requests (400 "does not support
 * tools"); llama-server writes a generic tool prompt instead, and Wick follows llama-server:
 * the offered tools go into the system message, so `auto` can call them and a forced call is to
 * a tool the model was shown. The prompt asks for the Hermes `<tool_call>{json}</tool_call>`
 * form — what the hermes parser reads and the forced-call grammar writes — where llama-server's
 * generic format turns every answer into JSON; here an `auto` answer stays free text.
 */
import type { ChatTemplate } from "../chat-template.ts";

const PROBE = "wick_probe_tool_7c1e";
const probeTool = { type: "function", function: { name: PROBE, description: "", parameters: { type: "object", properties: {} } } };
const rendersTools = new WeakMap<ChatTemplate, boolean>();

/** Whether the template writes the tools it is given into the prompt (llama.cpp's `supports_tools` probe). */
export function templateRendersTools(template: ChatTemplate): boolean {
  let known = rendersTools.get(template);
  if (known === undefined) {
    try {
      known = template.render([{ role: "user", content: "Hi" }], { addGenerationPrompt: true, tools: [probeTool] }).includes(PROBE);
    } catch {
      known = false;
    }
    rendersTools.set(template, known);
  }
  return known;
}

/** The system-prompt text that offers `tools` (OpenAI `{type: "function", function}` objects) in the Hermes form. */
export function genericToolPrompt(tools: unknown[]): string {
  return [
    "# Tools",
    "",
    "You may call one or more functions to assist with the user query.",
    "",
    "You are provided with function signatures within <tools></tools> XML tags:",
    "<tools>",
    ...tools.map((t) => JSON.stringify(t)),
    "</tools>",
    "",
    "For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:",
    "<tool_call>",
    '{"name": <function-name>, "arguments": <args-json-object>}',
    "</tool_call>",
  ].join("\n");
}

/** `messages` with the generic tool prompt appended to the leading system message, or in a new one. */
export function withToolPrompt<M extends { role: string; content: string }>(messages: M[], tools: unknown[]): M[] {
  const prompt = genericToolPrompt(tools);
  const [first, ...rest] = messages;
  if (first?.role === "system") return [{ ...first, content: first.content ? `${first.content}\n\n${prompt}` : prompt }, ...rest];
  return [{ role: "system", content: prompt } as M, ...messages];
}
