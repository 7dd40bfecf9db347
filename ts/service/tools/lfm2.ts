/**
 * LFM2 / LFM2.5 tool calls: `<|tool_call_start|>[get_weather(city="Paris"), g()]<|tool_call_end|>`.
 *
 * The model writes Python call syntax by default and the JSON form
 * `[{"name": "f", "arguments": {...}}]` when the system prompt asks for JSON. Like SGLang's
 * `Lfm2Detector`, JSON is tried first when the block opens with `{` or `[{`, and the Pythonic
 * reader is the fallback. The Pythonic reader is a small recursive-descent parser over a
 * literal-only subset of Python (what `ast.literal_eval` would accept, plus JSON's
 * true/false/null that the templates and llama.cpp's grammar also allow): anything else makes
 * the whole block fail, and the caller then keeps the block as plain content.
 */
import { jsonCall } from "./hermes.ts";
import type { ToolCall } from "./types.ts";

export const LFM2_START = "<|tool_call_start|>";
export const LFM2_END = "<|tool_call_end|>";

/** Calls in one block's inner text (between the markers), or undefined if it is malformed. */
export function parseLfm2Block(inner: string): ToolCall[] | undefined {
  const trimmed = inner.trimStart();
  if (trimmed.startsWith("{") || /^\[\s*\{/.test(trimmed)) {
    const calls = parseJsonCalls(inner);
    if (calls) return calls;
  }
  try {
    return new PythonReader(inner).block();
  } catch (e) {
    if (e instanceof Malformed) return undefined;
    throw e;
  }
}

/**
 * `[f(a="x", n=1), g()]`: keyword arguments with JSON values, which are Python literals too
 * (true/false/null included, which LFM2 reads as well as True/False/None).
 */
export function formatLfm2Block(calls: ToolCall[]): string {
  const call = (c: ToolCall) =>
    `${c.name}(${Object.entries(c.arguments)
      .map(([k, v]) => `${k}=${JSON.stringify(v)}`)
      .join(", ")})`;
  return `[${calls.map(call).join(", ")}]`;
}

/** `[{"name", "arguments"}, ...]` or a single such object. */
function parseJsonCalls(inner: string): ToolCall[] | undefined {
  let value: unknown;
  try {
    value = JSON.parse(inner);
  } catch {
    return undefined;
  }
  const items = Array.isArray(value) ? value : [value];
  const calls: ToolCall[] = [];
  for (const item of items) {
    const call = jsonCall(item);
    if (!call) return undefined;
    calls.push(call);
  }
  return calls;
}

/** Thrown inside the reader only; never escapes `parseLfm2Block`. */
class Malformed extends Error {}

const IDENT = /[\p{L}_][\p{L}\p{N}_]*/uy;
const NUMBER = /[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?/y;
const WORDS: Record<string, unknown> = {
  True: true,
  False: false,
  None: null,
  true: true,
  false: false,
  null: null,
};
const SIMPLE_ESCAPES: Record<string, string> = {
  n: "\n",
  t: "\t",
  r: "\r",
  b: "\b",
  f: "\f",
  v: "\v",
  a: "\x07",
  "0": "\0",
  "\\": "\\",
  "'": "'",
  '"': '"',
  "\n": "", // a backslash-newline continues the string, as in Python
};

class PythonReader {
  private pos = 0;
  constructor(private readonly src: string) {}

  /** A list of calls, or one bare call, and nothing after it. */
  block(): ToolCall[] {
    this.ws();
    const calls: ToolCall[] = [];
    if (this.eat("[")) {
      this.sequence("]", () => calls.push(this.call()));
    } else {
      calls.push(this.call());
    }
    this.ws();
    if (this.pos !== this.src.length) this.fail();
    return calls;
  }

  /** `name(kw=value, ...)`; dotted names are allowed, positional arguments are not. */
  private call(): ToolCall {
    let name = this.ident();
    while (this.peek() === ".") {
      this.pos++;
      name += "." + this.ident();
    }
    this.ws();
    this.expect("(");
    const args: Record<string, unknown> = {};
    this.sequence(")", () => {
      const key = this.ident();
      this.ws();
      this.expect("=");
      // Python rejects a repeated keyword at compile time, so a repeat means a broken call.
      if (Object.hasOwn(args, key)) this.fail();
      args[key] = this.value();
    });
    return { name, arguments: args };
  }

  private value(): unknown {
    this.ws();
    const c = this.peek();
    if (c === '"' || c === "'") return this.string();
    if (c === "[") {
      this.pos++;
      return this.list("]");
    }
    // A tuple literal becomes a list, as json.dumps does with it.
    if (c === "(") {
      this.pos++;
      return this.list(")");
    }
    if (c === "{") {
      this.pos++;
      return this.dict();
    }
    NUMBER.lastIndex = this.pos;
    const num = NUMBER.exec(this.src);
    if (num) {
      this.pos = NUMBER.lastIndex;
      // `1abc` is not a number followed by something we could read.
      if (/[\p{L}\p{N}_.]/u.test(this.peek())) this.fail();
      return Number(num[0]);
    }
    const word = this.ident();
    if (!Object.hasOwn(WORDS, word)) this.fail();
    return WORDS[word];
  }

  private list(close: string): unknown[] {
    const out: unknown[] = [];
    this.sequence(close, () => out.push(this.value()));
    return out;
  }

  /** Keys must be strings or numbers: JSON objects have string keys only. */
  private dict(): Record<string, unknown> {
    const out: Record<string, unknown> = {};
    this.sequence("}", () => {
      const key = this.value();
      if (typeof key !== "string" && typeof key !== "number") this.fail();
      this.ws();
      this.expect(":");
      const k = String(key);
      // defineProperty so a "__proto__" key is stored as data, not as the prototype.
      Object.defineProperty(out, k, { value: this.value(), enumerable: true, writable: true, configurable: true });
    });
    return out;
  }

  /**
   * Comma-separated items up to `close`, with an optional trailing comma. The opening bracket
   * has been consumed already.
   */
  private sequence(close: string, item: () => void): void {
    this.ws();
    if (this.eat(close)) return;
    for (;;) {
      item();
      this.ws();
      if (this.eat(close)) return;
      this.expect(",");
      this.ws();
      if (this.eat(close)) return;
    }
  }

  /** A single- or double-quoted string with Python's escapes. */
  private string(): string {
    const quote = this.src[this.pos++];
    let out = "";
    for (;;) {
      if (this.pos >= this.src.length) this.fail();
      const c = this.src[this.pos++];
      if (c === quote) return out;
      if (c !== "\\") {
        out += c;
        continue;
      }
      if (this.pos >= this.src.length) this.fail();
      const e = this.src[this.pos++];
      if (Object.hasOwn(SIMPLE_ESCAPES, e)) out += SIMPLE_ESCAPES[e];
      else if (e === "x") out += this.codePoint(2);
      else if (e === "u") out += this.codePoint(4);
      else if (e === "U") out += this.codePoint(8);
      // Python keeps an unknown escape as written (`"\d"` is backslash, d).
      else out += "\\" + e;
    }
  }

  private codePoint(digits: number): string {
    const hex = this.src.slice(this.pos, this.pos + digits);
    if (hex.length !== digits || !/^[0-9a-fA-F]+$/.test(hex)) this.fail();
    const cp = parseInt(hex, 16);
    if (cp > 0x10ffff) this.fail();
    this.pos += digits;
    return String.fromCodePoint(cp);
  }

  private ident(): string {
    IDENT.lastIndex = this.pos;
    const m = IDENT.exec(this.src);
    if (!m) this.fail();
    this.pos = IDENT.lastIndex;
    return m[0];
  }

  private ws(): void {
    while (this.pos < this.src.length && /\s/.test(this.src[this.pos])) this.pos++;
  }

  private peek(): string {
    return this.src[this.pos] ?? "";
  }

  private eat(s: string): boolean {
    if (this.peek() !== s) return false;
    this.pos++;
    return true;
  }

  private expect(s: string): void {
    if (!this.eat(s)) this.fail();
  }

  private fail(): never {
    throw new Malformed();
  }
}
