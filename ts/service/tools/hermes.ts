/**
 * Hermes / Qwen tool calls: `<tool_call>{"name": "f", "arguments": {...}}</tool_call>`, one JSON
 * object per block. Qwen2.5 and Qwen3 templates put a newline on each side of the object; JSON
 * allows that whitespace, so no trimming is needed.
 */
import type { ToolCall } from "./types.ts";

export const HERMES_START = "<tool_call>";
export const HERMES_END = "</tool_call>";

/** The call in one block's inner text, or undefined if it is not exactly one call object. */
export function parseHermesBlock(inner: string): ToolCall[] | undefined {
  let value: unknown;
  try {
    value = JSON.parse(inner);
  } catch {
    return undefined;
  }
  const call = jsonCall(value);
  return call ? [call] : undefined;
}

/** One call per block, the object on its own line between the markers, as Qwen's templates write it. */
export function formatHermesBlock(calls: ToolCall[]): string {
  return calls.map((c) => `\n${JSON.stringify({ name: c.name, arguments: c.arguments })}\n`).join(HERMES_END + HERMES_START);
}

/**
 * One `{"name": string, "arguments"?: object}`. A missing `arguments` means a call without
 * parameters; anything but an object there (a JSON-encoded string, an array) is rejected rather
 * than guessed at. Shared with LFM2's JSON form.
 */
export function jsonCall(item: unknown): ToolCall | undefined {
  if (!isPlainObject(item)) return undefined;
  const { name, arguments: args } = item;
  if (typeof name !== "string" || name.length === 0) return undefined;
  if (args === undefined) return { name, arguments: {} };
  if (!isPlainObject(args)) return undefined;
  return { name, arguments: args };
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}
