/**
 * Tool-call extraction from generated text, whole or streamed.
 *
 * Every supported format is "blocks between a start and an end marker": text outside blocks is
 * content, and each block holds one or more calls in the format's own syntax (an end marker
 * inside a quoted string does not end a block). So one block scanner serves all formats, and a
 * format only says what its markers are and how to read a block's inside. A block that cannot
 * be read (or that never ends) is given back as content with its markers, so nothing the model
 * wrote is lost and a bad call never becomes an error.
 *
 * `parse` is `ToolStream` fed the whole text at once; the tests check that every other split of
 * the text gives the same result.
 */
import { formatHermesBlock, HERMES_END, HERMES_START, parseHermesBlock } from "./hermes.ts";
import { formatLfm2Block, LFM2_END, LFM2_START, parseLfm2Block } from "./lfm2.ts";
import type { ParseResult, ToolCall, ToolParser, ToolParserName } from "./types.ts";

export type { ParseResult, ToolCall, ToolParser, ToolParserName } from "./types.ts";

/**
 * Index from which `text` must be held back because it may begin `marker`: the earliest suffix
 * that is a proper prefix of the marker, or `text.length` when none is. Callers have already
 * checked that the whole marker does not occur.
 */
function holdFrom(text: string, marker: string): number {
  for (let i = Math.max(0, text.length - marker.length + 1); i < text.length; i++) {
    if (marker.startsWith(text.slice(i))) return i;
  }
  return text.length;
}

/** Whether `text` stops inside a double-quoted string (backslash escapes honoured). */
function endsInString(text: string): boolean {
  let inside = false;
  for (let i = 0; i < text.length; i++) {
    if (text[i] === "\\" && inside) i++;
    else if (text[i] === '"') inside = !inside;
  }
  return inside;
}

function isHighSurrogate(code: number): boolean {
  return code >= 0xd800 && code <= 0xdbff;
}

function makeParser(name: ToolParserName, start: string, end: string, parseBlock: (inner: string) => ToolCall[] | undefined, formatBlock: (calls: ToolCall[]) => string): ToolParser {
  return {
    name,
    start,
    end,
    parseBlock,
    format: (calls) => start + formatBlock(calls) + end,
    parse(text) {
      // The whole text is one delta of a stream: one block scanner for both ways.
      const stream = new ToolStream(this);
      const head = stream.push(text);
      const tail = stream.finish();
      return { content: head.content + tail.content, calls: [...head.calls, ...tail.calls] };
    },
    couldBeToolCall(tail) {
      return tail.endsWith(start) || holdFrom(tail, start) < tail.length;
    },
  };
}

export const lfm2Parser: ToolParser = makeParser("lfm2", LFM2_START, LFM2_END, parseLfm2Block, formatLfm2Block);
export const hermesParser: ToolParser = makeParser("hermes", HERMES_START, HERMES_END, parseHermesBlock, formatHermesBlock);

const PARSERS: Record<ToolParserName, ToolParser> = { lfm2: lfm2Parser, hermes: hermesParser };

export const TOOL_PARSER_NAMES = Object.keys(PARSERS) as ToolParserName[];

export function parserFor(name: string): ToolParser | undefined {
  return Object.hasOwn(PARSERS, name) ? PARSERS[name as ToolParserName] : undefined;
}

/**
 * The parser a chat template's own tool format calls for, as llama.cpp picks its chat format
 * from the template: LFM2 / LFM2.5 templates name their tool-list or tool-call tokens or write
 * "List of tools: ["; any other template gets the `<tool_call>{json}</tool_call>` family, which
 * is what Qwen, Hermes and most tool-tuned templates use (and what a forced call can always be
 * written in).
 */
export function detectParser(templateSource: string): ToolParser {
  const lfm2 = ["<|tool_list_start|>", LFM2_START, "List of tools: ["].some((s) => templateSource.includes(s));
  return lfm2 ? lfm2Parser : hermesParser;
}

/**
 * Streaming extraction over text deltas. Outside a block, content goes out as soon as it cannot
 * be the start of a marker; a possible partial marker at the end is held until the next delta
 * settles it. Inside a block nothing goes out until the end marker arrives, and the block's calls
 * then come out complete (arguments are not streamed), as SGLang's detectors do.
 */
export class ToolStream {
  /** Unsettled text: outside a block, a possible partial start marker; inside, the block so far (after the start marker). */
  private buf = "";
  private inBlock = false;
  /** Inside a block, where to resume looking for the end marker, so long blocks are not rescanned. */
  private scanFrom = 0;

  /** `accept` vets a block's calls (e.g. only offered tools); a refused block stays content. */
  constructor(
    private readonly parser: ToolParser,
    private readonly accept: (calls: ToolCall[]) => boolean = () => true,
  ) {}

  push(delta: string): ParseResult {
    this.buf += delta;
    const { start, end } = this.parser;
    let content = "";
    const calls: ToolCall[] = [];
    for (;;) {
      if (!this.inBlock) {
        const open = this.buf.indexOf(start);
        if (open < 0) {
          let hold = holdFrom(this.buf, start);
          // Keep a trailing high surrogate with its pair, so no delta carries half a character.
          if (hold > 0 && isHighSurrogate(this.buf.charCodeAt(hold - 1))) hold--;
          content += this.buf.slice(0, hold);
          this.buf = this.buf.slice(hold);
          break;
        }
        content += this.buf.slice(0, open);
        this.buf = this.buf.slice(open + start.length);
        this.inBlock = true;
        this.scanFrom = 0;
      } else {
        const close = this.buf.indexOf(end, this.scanFrom);
        if (close < 0) {
          // The end marker may already have begun in the text we have.
          this.scanFrom = Math.max(this.scanFrom, this.buf.length - end.length + 1);
          break;
        }
        const inner = this.buf.slice(0, close);
        // An end marker inside a quoted string (a value the model wrote, which a grammar allows)
        // does not end the block: look for the next one.
        if (endsInString(inner)) {
          this.scanFrom = close + end.length;
          continue;
        }
        const found = this.parser.parseBlock(inner);
        if (found && this.accept(found)) calls.push(...found);
        else content += start + inner + end;
        this.buf = this.buf.slice(close + end.length);
        this.inBlock = false;
      }
    }
    return { content, calls };
  }

  /**
   * End of generation: whatever is held is content, including an unterminated block — unless
   * the text was `cut` (max tokens) inside one: that block is a call the model never finished,
   * and its partial markup must not reach the client; the calls before it stand.
   */
  finish(cut = false): ParseResult {
    if (cut && this.inBlock) this.buf = "";
    const content = (this.inBlock && !cut ? this.parser.start : "") + this.buf;
    this.buf = "";
    this.inBlock = false;
    this.scanFrom = 0;
    return { content, calls: [] };
  }
}
