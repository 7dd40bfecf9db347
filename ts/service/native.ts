/**
 * Ollama-native requests → the shared service inputs: `options` → sampling with Ollama's own
 * defaults (temperature 0.8, top_k 40, top_p 0.9 — not OpenAI's) under the model's Modelfile
 * PARAMETERs, `format` → a grammar, and
 * native messages → the chat messages the template and tool checks read (call arguments as
 * JSON text, tool results paired with the call they answer).
 */
import type { ChatMessage, ContentPart } from "../schemas/chat.ts";
import { base64Ref } from "./images/index.ts";
import type { OllamaFormat, OllamaMessage, OllamaOptions } from "../schemas/ollama.ts";
import { RequestError } from "./errors.ts";
import { checkSchema, grammarSchema } from "./json-schema.ts";
import { ollamaSamplingRequest, samplingOptions, type SamplingOptions } from "./sampling.ts";
import type { Grammar } from "./tools/request.ts";

/** Ollama's DefaultOptions for sampling (api/types.go). */
const OLLAMA_DEFAULTS = { temperature: 0.8, top_k: 40, top_p: 0.9, repeat_last_n: 64, repeat_penalty: 1.0 };

/** Ollama's precedence: its defaults < the Modelfile's PARAMETERs (`modelParams`) < the request's `options`. */
export function ollamaSampling(options: OllamaOptions | null | undefined, nVocab: number, modelParams: Record<string, unknown> = {}): SamplingOptions {
  const o = { ...OLLAMA_DEFAULTS, ...(definedOnly(modelParams) as OllamaOptions), ...definedOnly(options ?? {}) };
  return samplingOptions(ollamaSamplingRequest(o), nVocab);
}

function definedOnly<T extends object>(o: T): Partial<{ [K in keyof T]: NonNullable<T[K]> }> {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== null && v !== undefined)) as never;
}

/** `"json"` → any JSON value that is an object (Ollama's JSON mode); a schema → JSON valid against it. */
export function formatGrammar(format: OllamaFormat | null | undefined): Grammar | undefined {
  if (format == null || format === "") return undefined;
  if (format === "json") return { kind: "json_schema", source: JSON.stringify(grammarSchema({ type: "object" }, { lenient: false })) };
  checkSchema(format, "format");
  return { kind: "json_schema", source: JSON.stringify(grammarSchema(format, { lenient: true })) };
}

/**
 * Native messages as chat messages. Ollama clients answer a call with `tool_name` (and often no
 * id), so a result without `tool_call_id` is paired with the earliest unanswered call of that
 * name — or of any name — from the assistant turn before it; calls without ids get ones here.
 */
export function toChatMessages(messages: OllamaMessage[]): ChatMessage[] {
  let open: { id: string; name: string }[] = [];
  return messages.map((m, i) => {
    const content = m.content ?? "";
    if (m.images?.length && (m.role === "user" || m.role === "system")) {
      // Ollama puts a message's images before its text.
      const parts: ContentPart[] = m.images.map((b64) => ({ type: "image_url", image_url: { url: base64Ref(b64) } }));
      return { role: m.role, content: content ? [...parts, { type: "text", text: content }] : parts };
    }
    if (m.images?.length) throw new RequestError("INVALID_REQUEST", "Only user and system messages may carry images.", `messages[${i}].images`);
    if (m.role === "assistant") {
      const calls = (m.tool_calls ?? []).map((c, j) => ({
        id: c.id || `call_${i}_${j}`,
        type: "function" as const,
        function: { name: c.function.name, arguments: JSON.stringify(c.function.arguments ?? {}) },
      }));
      open = calls.map((c) => ({ id: c.id, name: c.function.name }));
      return { role: "assistant", content, ...(calls.length ? { tool_calls: calls } : {}) };
    }
    if (m.role === "tool") {
      const k = m.tool_call_id
        ? open.findIndex((c) => c.id === m.tool_call_id)
        : Math.max(
            0,
            open.findIndex((c) => c.name === m.tool_name),
          );
      const id = m.tool_call_id ?? open[k]?.id ?? "";
      if (k >= 0 && open[k]) open.splice(k, 1);
      return { role: "tool", content, tool_call_id: id };
    }
    return { role: m.role, content };
  });
}
