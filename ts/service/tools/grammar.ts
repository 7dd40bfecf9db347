/**
 * Grammars that force a tool call, in llguidance's Lark dialect (the core compiles them; see
 * crates/wick-core/src/sampling/grammar). Each argument value is `%json{<its schema>}`, so the
 * arguments validate against the tool's schema by construction, and each family writes calls in
 * the syntax its parser reads back:
 *
 * - lfm2: `<|tool_call_start|>[get_weather(city="Paris", days=3)]<|tool_call_end|>`, keyword
 *   arguments in the schema's order (required ones, then each optional one or not), as llama.cpp's
 *   `python_style_tool_calls` grammar does. JSON values are Python literals too (strings in double
 *   quotes; true/false/null, which the LFM2 parser and llama.cpp both accept). The JSON form
 *   `[{"name": …, "arguments": {…}}]` is allowed in the same block.
 * - hermes: `<tool_call>{"name": …, "arguments": {…}}</tool_call>`, the call object one schema.
 */
import { grammarSchema } from "../json-schema.ts";
import type { ToolParser } from "./index.ts";

/** A function tool as the request gives it (OpenAI's `tools[].function`). */
export interface ToolSpec {
  name: string;
  parameters?: Record<string, unknown> | null;
}

/**
 * Most calls one turn may make. Without a bound, a small model held to `tool_choice: "required"`
 * can add call after call until `max_tokens`; with it the grammar completes, the turn ends with
 * "tool_calls", and real parallel use (a call per city, per file) is far below it.
 */
export const MAX_CALLS = 8;

export interface CallGrammarOptions {
  /** Several calls in one block (OpenAI's `parallel_tool_calls`, default true). */
  parallel: boolean;
}

/** Lark grammar whose only sentences are well-formed calls to `tools`, markers included. */
export function callGrammar(parser: ToolParser, tools: ToolSpec[], opts: CallGrammarOptions): string {
  return parser.name === "lfm2" ? pythonicGrammar(parser, tools, opts) : jsonBlockGrammar(parser, tools, opts);
}

function pythonicGrammar(parser: ToolParser, tools: ToolSpec[], { parallel }: CallGrammarOptions): string {
  const rules: string[] = [];
  const calls = tools.map((tool, t) => {
    const params = objectParams(tool.parameters);
    const arg = (name: string, k: number) => {
      const rule = `v${t}_${k}`;
      rules.push(`${rule}: %json ${json(params.schemaOf(name))}`);
      return `${lit(`${name}=`)} ${rule}`;
    };
    const required = params.required.map((name) => arg(name, params.names.indexOf(name)));
    const optional = params.optional.map((name) => arg(name, params.names.indexOf(name)));
    rules.push(`call${t}: ${lit(`${tool.name}(`)} ${argList(required, optional)} ")"`);
    return `call${t}`;
  });
  const call = `call: ${calls.join(" | ")}`;
  const list = parallel ? `"[" call ("," " "? call) ~ 0..${MAX_CALLS - 1} "]"` : `"[" call "]"`;
  // LFM2 writes the JSON form when its system prompt asks for JSON: allowed too, as the parser reads both.
  const jsonList = { type: "array", items: callObjects(tools), minItems: 1, maxItems: parallel ? MAX_CALLS : 1 };
  return [`start: ${marker(parser.start)} (${list} | json_calls) ${marker(parser.end)}`, call, `json_calls: %json ${json(jsonList)}`, ...rules].join("\n");
}

/**
 * `a=1, b=2` with every required argument in order and each optional one present or not. A
 * comma goes before every argument but the first, so with no required arguments the first
 * optional one present leads: one alternative per choice of leader.
 */
function argList(required: string[], optional: string[]): string {
  const sep = `"," " "?`;
  const tail = (from: number) =>
    optional
      .slice(from)
      .map((a) => `(${sep} ${a})?`)
      .join(" ");
  if (required.length > 0) return [required.join(` ${sep} `), tail(0)].filter(Boolean).join(" ");
  if (optional.length === 0) return "";
  const leaders = optional.map((a, i) => [a, tail(i + 1)].filter(Boolean).join(" "));
  return `(${leaders.join(" | ")})?`;
}

function jsonBlockGrammar(parser: ToolParser, tools: ToolSpec[], { parallel }: CallGrammarOptions): string {
  const block = `${marker(parser.start)} "\\n"? call "\\n"? ${marker(parser.end)}`;
  return [`start: ${parallel ? `block ("\\n" block) ~ 0..${MAX_CALLS - 1}` : "block"}`, `block: ${block}`, `call: %json ${json(callObjects(tools))}`].join("\n");
}

/** `{"name": <one of the tools>, "arguments": <its parameters>}` as one schema. */
function callObjects(tools: ToolSpec[]): Record<string, unknown> {
  return {
    anyOf: tools.map((tool) => ({
      type: "object",
      properties: { name: { const: tool.name }, arguments: tool.parameters ?? { type: "object" } },
      required: ["name", "arguments"],
      additionalProperties: false,
    })),
  };
}

/** The properties of an object schema, each carrying the root's `$defs` so its `$ref`s resolve. */
function objectParams(schema: Record<string, unknown> | null | undefined) {
  const props = (schema?.properties ?? {}) as Record<string, Record<string, unknown>>;
  const names = Object.keys(props);
  const req = new Set(Array.isArray(schema?.required) ? (schema.required as string[]) : []);
  const defs = Object.fromEntries(["$defs", "definitions"].filter((k) => schema?.[k] !== undefined).map((k) => [k, schema![k]]));
  return {
    names,
    required: names.filter((n) => req.has(n)),
    optional: names.filter((n) => !req.has(n)),
    schemaOf: (name: string) => ({ ...defs, ...props[name] }),
  };
}

/** Special-token markers are named as tokens (`<|x|>`); others are literal text. */
function marker(text: string): string {
  return /^<\|[^|]+\|>$/.test(text) ? text : lit(text);
}

/** Tool schemas come from clients that rarely mean `strict`: unknown keywords are ignored. */
function json(schema: Record<string, unknown>): string {
  return JSON.stringify(grammarSchema(schema, { lenient: true }));
}

function lit(text: string): string {
  return JSON.stringify(text);
}
