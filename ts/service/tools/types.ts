/** The types every tool-call format shares (the parsers in ./index.ts, the formats in ./hermes.ts and ./lfm2.ts). */
export interface ToolCall {
  name: string;
  arguments: Record<string, unknown>;
}

export interface ParseResult {
  content: string;
  calls: ToolCall[];
}

export type ToolParserName = "lfm2" | "hermes";

export interface ToolParser {
  name: ToolParserName;
  /** Opening and closing markers of a tool-call block. */
  readonly start: string;
  readonly end: string;
  /** Calls in one block's inner text, or undefined when the block is malformed. */
  parseBlock(inner: string): ToolCall[] | undefined;
  /** Calls written back as the model writes them, markers included (for past turns). */
  format(calls: ToolCall[]): string;
  /** The whole output at once. */
  parse(text: string): ParseResult;
  /** True if `tail` (the end of the text so far) may be the start of a marker. */
  couldBeToolCall(tail: string): boolean;
}
