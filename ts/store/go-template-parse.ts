/**
 * Parser for Go's text/template syntax as Ollama's TEMPLATEs use it: text and `{{ actions }}`
 * with `{{-`/`-}}` trimming and comments; pipelines of commands (`a | f b`), fields (`.A.B`),
 * variables (`$`, `$x.A`, `$i, $m := …`, `$x = …`), parenthesised pipelines, string/raw/number/
 * bool/nil literals; `if`/`else if`/`else`/`range`/`with`/`end`, `break`/`continue`. `define`,
 * `template` and `block` are refused with a clear error. Errors carry line and column.
 */
import { StoreError } from "./errors.ts";

export interface Pos {
  line: number;
  col: number;
}

export type Arg =
  | { type: "field"; ident: string[]; pos: Pos }
  | { type: "dot"; pos: Pos }
  | { type: "var"; name: string; ident: string[]; pos: Pos }
  | { type: "func"; name: string; pos: Pos }
  | { type: "literal"; value: string | number | boolean | null; pos: Pos }
  | { type: "pipe"; pipe: Pipe; ident: string[]; pos: Pos };

export interface Pipe {
  decl: string[];
  /** `=` (assign to an existing variable) rather than `:=`. */
  assign: boolean;
  cmds: Arg[][];
  pos: Pos;
}

export interface BranchNode {
  type: "if" | "with" | "range";
  pipe: Pipe;
  list: Node[];
  elseList?: Node[];
  pos: Pos;
}

export type Node = { type: "text"; text: string } | { type: "action"; pipe: Pipe; pos: Pos } | BranchNode | { type: "break" | "continue"; pos: Pos };

export const FUNCS = new Set(["and", "or", "not", "len", "index", "slice", "eq", "ne", "lt", "le", "gt", "ge", "print", "printf", "println", "json", "html", "urlquery", "js"]);

type Tok =
  | { k: "field"; v: string }
  | { k: "var"; v: string }
  | { k: "ident"; v: string }
  | { k: "str"; v: string }
  | { k: "num"; v: number }
  | { k: "punct"; v: "(" | ")" | "|" | ":=" | "=" | "," | "." }
  | { k: "end" };

/** `sp`: whitespace came before the token (`.A .B` is two operands, `.A.B` one chain). */
type PosTok = Tok & { pos: Pos; sp?: boolean };

export function templateError(pos: Pos | null, msg: string): StoreError {
  return new StoreError("INVALID_TEMPLATE", pos ? `template: line ${pos.line}, column ${pos.col}: ${msg}` : `template: ${msg}`);
}

/** Splits the source into text and action token lists, applying trim markers. */
function lex(src: string): ({ text: string } | { toks: PosTok[]; pos: Pos })[] {
  const items: ({ text: string } | { toks: PosTok[]; pos: Pos })[] = [];
  const lineStarts = [0];
  for (let n = src.indexOf("\n"); n !== -1; n = src.indexOf("\n", n + 1)) lineStarts.push(n + 1);
  const posAt = (i: number): Pos => {
    let lo = 0;
    let hi = lineStarts.length - 1;
    while (lo < hi) {
      const mid = (lo + hi + 1) >> 1;
      if (lineStarts[mid] <= i) lo = mid;
      else hi = mid - 1;
    }
    return { line: lo + 1, col: i - lineStarts[lo] + 1 };
  };
  let i = 0;
  let trimNext = false;
  while (i < src.length) {
    const open = src.indexOf("{{", i);
    let text = src.slice(i, open === -1 ? src.length : open);
    if (trimNext) text = text.replace(/^\s+/, "");
    trimNext = false;
    if (open === -1) {
      if (text) items.push({ text });
      break;
    }
    let j = open + 2;
    if (/^-[ \t\r\n]/.test(src.slice(j, j + 2))) {
      text = text.replace(/\s+$/, "");
      j += 1;
    }
    if (text) items.push({ text });
    const start = open;
    const toks: PosTok[] = [];
    for (;;) {
      const wsStart = j;
      while (j < src.length && /[ \t\r\n]/.test(src[j])) j++;
      const sp = j > wsStart;
      if (j >= src.length) throw templateError(posAt(start), "unclosed action (no matching }})");
      if (src.startsWith("/*", j)) {
        const close = src.indexOf("*/", j + 2);
        if (close === -1) throw templateError(posAt(j), "unclosed comment");
        j = close + 2;
        continue;
      }
      if (src.startsWith("-}}", j) && /[ \t\r\n]/.test(src[j - 1])) {
        trimNext = true;
        j += 3;
        break;
      }
      if (src.startsWith("}}", j)) {
        j += 2;
        break;
      }
      const pos = posAt(j);
      const rest = src.slice(j);
      let m: RegExpExecArray | null;
      if ((m = /^\.[A-Za-z_][A-Za-z0-9_]*/.exec(rest))) toks.push({ k: "field", v: m[0].slice(1), pos });
      else if ((m = /^\$[A-Za-z0-9_]*/.exec(rest))) toks.push({ k: "var", v: m[0], pos });
      else if ((m = /^[A-Za-z_][A-Za-z0-9_]*/.exec(rest))) toks.push({ k: "ident", v: m[0], pos });
      else if ((m = /^"(?:[^"\\\n]|\\.)*"/.exec(rest))) toks.push({ k: "str", v: unescape(m[0], pos), pos });
      else if ((m = /^`[^`]*`/.exec(rest))) toks.push({ k: "str", v: m[0].slice(1, -1), pos });
      else if ((m = /^'(?:[^'\\]|\\.)'/.exec(rest))) toks.push({ k: "num", v: unescape(`"${m[0].slice(1, -1)}"`, pos).codePointAt(0)!, pos });
      else if ((m = /^[+-]?(0[xX][0-9a-fA-F]+|(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?)/.exec(rest))) toks.push({ k: "num", v: Number(m[0]), pos });
      else if ((m = /^(:=|[()|=,.])/.exec(rest))) toks.push({ k: "punct", v: m[0] as "(", pos });
      else throw templateError(pos, `unexpected ${JSON.stringify(rest[0])} in action`);
      toks[toks.length - 1].sp = sp;
      j += m[0].length;
    }
    toks.push({ k: "end", pos: posAt(j) });
    items.push({ toks, pos: posAt(start) });
    i = j;
  }
  return items;
}

function unescape(quoted: string, pos: Pos): string {
  try {
    return JSON.parse(
      quoted
        .replace(/\\x([0-9a-fA-F]{2})/g, "\\u00$1")
        .replace(/\\'/g, "'")
        .replace(/\\a/g, "\\u0007")
        .replace(/\\v/g, "\\u000b"),
    ) as string;
  } catch {
    throw templateError(pos, `invalid string literal ${quoted}`);
  }
}

/** Parses template source into a node list; throws INVALID_TEMPLATE with the position. */
export function parseTemplate(src: string): Node[] {
  const items = lex(src);
  let at = 0;

  /** Parses nodes until one of `stops` (end/else) and returns it. */
  function list(stops: string[]): { nodes: Node[]; stop?: { word: string; toks: PosTok[]; pos: Pos } } {
    const nodes: Node[] = [];
    while (at < items.length) {
      const item = items[at++];
      if ("text" in item) {
        nodes.push({ type: "text", text: item.text });
        continue;
      }
      const { toks, pos } = item;
      const first = toks[0];
      if (first.k === "end") continue; // a comment-only action
      const word = first.k === "ident" ? first.v : "";
      if (word === "end" || word === "else") {
        if (!stops.includes(word)) throw templateError(first.pos, `unexpected {{${word}}}`);
        return { nodes, stop: { word, toks: toks.slice(1), pos: first.pos } };
      }
      if (word === "if" || word === "with" || word === "range") {
        nodes.push(branch(word, toks.slice(1), pos));
      } else if (word === "break" || word === "continue") {
        if (toks[1].k !== "end") throw templateError(toks[1].pos, `unexpected operand after ${word}`);
        nodes.push({ type: word, pos: first.pos });
      } else if (word === "define" || word === "template" || word === "block") {
        throw templateError(first.pos, `{{${word}}} is not supported`);
      } else {
        nodes.push({ type: "action", pipe: pipeline(toks, 0, true).pipe, pos });
      }
    }
    if (stops.length) throw templateError(null, `unexpected end of template: a {{${stops.includes("else") ? "if/range/with" : "block"}}} has no {{end}}`);
    return { nodes };
  }

  function branch(kind: "if" | "with" | "range", toks: PosTok[], pos: Pos): Node {
    if (toks[0].k === "end") throw templateError(toks[0].pos, `missing value for ${kind}`);
    const { pipe } = pipeline(toks, 0, true);
    const body = list(["end", "else"]);
    const node: Node = { type: kind, pipe, list: body.nodes, pos };
    if (body.stop?.word === "else") {
      const rest = body.stop.toks;
      if (rest[0].k === "ident" && (rest[0].v === "if" || rest[0].v === "with")) {
        // {{else if …}} / {{else with …}}: a nested branch that shares this {{end}}.
        node.elseList = [branch(rest[0].v, rest.slice(1), body.stop.pos)];
      } else {
        if (rest[0].k !== "end") throw templateError(rest[0].pos, "unexpected operand after else");
        const tail = list(["end"]);
        node.elseList = tail.nodes;
      }
    }
    return node;
  }

  /** A pipeline from toks[i] up to `end` or a closing `)`. */
  function pipeline(toks: PosTok[], i: number, top: boolean): { pipe: Pipe; next: number } {
    const pos = toks[i].pos;
    const decl: string[] = [];
    let assign = false;
    // Declarations: $x := / $i, $e := / $x =
    let k = i;
    const names: string[] = [];
    while (toks[k].k === "var" && toks[k + 1]?.k === "punct") {
      names.push((toks[k] as { v: string }).v);
      const p = toks[k + 1] as { v: string };
      if (p.v === ",") {
        k += 2;
        continue;
      }
      if (p.v === ":=" || p.v === "=") {
        decl.push(...names);
        assign = p.v === "=";
        i = k + 2;
      }
      break;
    }
    const cmds: Arg[][] = [];
    let cmd: Arg[] = [];
    for (;;) {
      const t = toks[i];
      if (t.k === "end" || (t.k === "punct" && t.v === ")")) {
        if (t.k === "punct" && top) throw templateError(t.pos, "unexpected )");
        if (t.k === "end" && !top) throw templateError(t.pos, "unclosed left paren");
        break;
      }
      if (t.k === "punct" && t.v === "|") {
        if (!cmd.length) throw templateError(t.pos, "missing command before |");
        cmds.push(cmd);
        cmd = [];
        i++;
        continue;
      }
      const { arg, next } = operand(toks, i);
      cmd.push(arg);
      i = next;
    }
    if (!cmd.length) throw templateError(toks[i].pos, cmds.length ? "missing command after |" : "missing value");
    cmds.push(cmd);
    return { pipe: { decl, assign, cmds, pos }, next: i };
  }

  function operand(toks: PosTok[], i: number): { arg: Arg; next: number } {
    const t = toks[i];
    /** Field names chained right after toks[j - 1], with no space between. */
    const fields = (j: number, ident: string[] = []) => {
      while (toks[j].k === "field" && !toks[j].sp) ident.push((toks[j++] as { v: string }).v);
      return { ident, j };
    };
    switch (t.k) {
      case "field": {
        const { ident, j } = fields(i + 1, [t.v]);
        return { arg: { type: "field", ident, pos: t.pos }, next: j };
      }
      case "var": {
        const { ident, j } = fields(i + 1);
        return { arg: { type: "var", name: t.v, ident, pos: t.pos }, next: j };
      }
      case "str":
      case "num":
        return { arg: { type: "literal", value: t.v, pos: t.pos }, next: i + 1 };
      case "ident":
        if (t.v === "true" || t.v === "false") return { arg: { type: "literal", value: t.v === "true", pos: t.pos }, next: i + 1 };
        if (t.v === "nil") return { arg: { type: "literal", value: null, pos: t.pos }, next: i + 1 };
        if (!FUNCS.has(t.v)) throw templateError(t.pos, `function ${JSON.stringify(t.v)} not defined`);
        return { arg: { type: "func", name: t.v, pos: t.pos }, next: i + 1 };
      case "punct":
        if (t.v === ".") return { arg: { type: "dot", pos: t.pos }, next: i + 1 };
        if (t.v === "(") {
          const inner = pipeline(toks, i + 1, false);
          const { ident, j } = fields(inner.next + 1);
          return { arg: { type: "pipe", pipe: inner.pipe, ident, pos: t.pos }, next: j };
        }
        throw templateError(t.pos, `unexpected ${JSON.stringify(t.v)} in operand`);
      default:
        throw templateError(t.pos, "unexpected end of action");
    }
  }

  return list([]).nodes;
}
