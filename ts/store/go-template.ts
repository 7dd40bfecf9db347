/**
 * Renders Go text/template source (go-template-parse.ts) over plain JS data, the way Ollama
 * renders a Modelfile TEMPLATE. Ollama's data are Go structs whose JSON names are lower/snake
 * case (`ToolCalls` ↔ `tool_calls`); here a field `.X` looks up `X`, then `x`, then the snake
 * case `x_y`, so API-shaped objects (`{role, content, tool_calls}`) render unchanged.
 *
 * Go's semantics where templates depend on them: truthiness (false, 0, "", nil, empty
 * list/map are false), `and`/`or` return an operand and stop early, `eq a b c` is a==b||a==c,
 * `len`/`slice` on strings count bytes, maps range in key order, objects print as JSON (as
 * Ollama's Tool and tool-call Arguments do through their String methods), `json` escapes
 * <, > and & as Go's json.Marshal does. Deliberately lenient: a missing field is empty (Go
 * prints "<no value>"), comparing different types is false rather than an error.
 */
import { templateError, parseTemplate, type Arg, type BranchNode, type Node, type Pipe, type Pos } from "./go-template-parse.ts";

type Vars = { name: string; value: unknown }[];

class Stop {
  constructor(readonly kind: "break" | "continue") {}
}

export class GoTemplate {
  private constructor(
    readonly source: string,
    private readonly nodes: Node[],
  ) {}

  /** Parses `source`; throws INVALID_TEMPLATE with line and column. */
  static parse(source: string): GoTemplate {
    return new GoTemplate(source, parseTemplate(source));
  }

  /** Renders with `data` as `.` and `$`; throws INVALID_TEMPLATE naming the failing action's position. */
  execute(data: unknown): string {
    const out: string[] = [];
    walk(this.nodes, data, [{ name: "$", value: data }], out);
    return out.join("");
  }

  /** Every field and variable name the template uses, lower-cased (Ollama's Template.Vars). */
  identifiers(): string[] {
    const names = new Set<string>();
    const fromPipe = (p: Pipe) => p.cmds.flat().forEach(fromArg);
    const fromArg = (a: Arg) => {
      if (a.type === "field") a.ident.forEach((n) => names.add(n.toLowerCase()));
      if (a.type === "var") [a.name, ...a.ident].forEach((n) => names.add(n.toLowerCase()));
      if (a.type === "pipe") fromPipe(a.pipe);
    };
    const visit = (nodes: Node[]) => {
      for (const n of nodes) {
        if (n.type === "action") fromPipe(n.pipe);
        if (n.type === "if" || n.type === "with" || n.type === "range") {
          fromPipe(n.pipe);
          visit(n.list);
          if (n.elseList) visit(n.elseList);
        }
      }
    };
    visit(this.nodes);
    return [...names].sort();
  }

  /** A copy with `{{ .Response }}` appended (Ollama adds it to templates that use neither .Messages nor .Response). */
  withResponse(): GoTemplate {
    const pos = { line: 0, col: 0 };
    return new GoTemplate(this.source, [...this.nodes, { type: "action", pos, pipe: { decl: [], assign: false, pos, cmds: [[{ type: "field", ident: ["Response"], pos }]] } }]);
  }

  /**
   * A copy cut at the first `.Response` field: it and everything after it (in document order,
   * through nested bodies) removed, so a prompt ends where the reply starts (Ollama's deleteNode).
   * Conditions (`{{ if .Response }}`) are not cut, as in Ollama.
   */
  cutAtResponse(): GoTemplate {
    let cut = false;
    const inArgs = (args: Arg[]) => args.some((a) => (a.type === "field" && a.ident.includes("Response")) || (a.type === "pipe" && a.pipe.cmds.some(inArgs)));
    const list = (nodes: Node[]): Node[] => {
      const kept: Node[] = [];
      for (const n of nodes) {
        if (cut) break;
        if (n.type === "action") {
          const cmds: Arg[][] = [];
          for (const c of n.pipe.cmds) {
            if (inArgs(c)) {
              cut = true;
              break;
            }
            cmds.push(c);
          }
          if (cmds.length) kept.push({ ...n, pipe: { ...n.pipe, cmds } });
        } else if (n.type === "if" || n.type === "with" || n.type === "range") {
          const body = list(n.list);
          const elseList = n.elseList && !cut ? list(n.elseList) : n.elseList && [];
          kept.push({ ...n, list: body, elseList });
        } else kept.push(n);
      }
      return kept;
    };
    return new GoTemplate(this.source, list(this.nodes));
  }
}

/** Renders `source` over `data` in one call. */
export function renderGoTemplate(source: string, data: unknown): string {
  return GoTemplate.parse(source).execute(data);
}

function walk(nodes: Node[], dot: unknown, vars: Vars, out: string[]): void {
  for (const n of nodes) {
    switch (n.type) {
      case "text":
        out.push(n.text);
        break;
      case "action": {
        const v = pipe(n.pipe, dot, vars);
        if (n.pipe.decl.length === 0) out.push(print(v));
        break;
      }
      case "if":
      case "with": {
        const mark = vars.length;
        const v = pipe(n.pipe, dot, vars);
        if (truth(v)) walk(n.list, n.type === "with" ? v : dot, vars, out);
        else if (n.elseList) walk(n.elseList, dot, vars, out);
        vars.length = mark;
        break;
      }
      case "range":
        range(n, dot, vars, out);
        break;
      case "break":
      case "continue":
        // eslint-disable-next-line @typescript-eslint/only-throw-error -- a control-flow signal ({{break}} / {{continue}}) that range() catches, not an error
        throw new Stop(n.type);
    }
  }
}

function range(n: BranchNode, dot: unknown, vars: Vars, out: string[]): void {
  const mark = vars.length;
  const decl = n.pipe.decl;
  const v = pipe({ ...n.pipe, decl: [] }, dot, vars);
  let entries: [unknown, unknown][];
  if (Array.isArray(v)) entries = v.map((e, i) => [i, e]);
  else if (typeof v === "number" && Number.isInteger(v)) entries = Array.from({ length: Math.max(0, v) }, (_, i) => [i, i]);
  else if (v && typeof v === "object")
    entries = Object.keys(v)
      .sort()
      .map((k) => [k, (v as Record<string, unknown>)[k]]);
  else if (v === null || v === undefined) entries = [];
  else throw templateError(n.pos, `range can't iterate over ${print(v)}`);
  for (const [k, e] of entries) {
    vars.length = mark;
    if (decl.length === 1) vars.push({ name: decl[0], value: e });
    if (decl.length === 2) vars.push({ name: decl[0], value: k }, { name: decl[1], value: e });
    try {
      walk(n.list, e, vars, out);
    } catch (s) {
      if (!(s instanceof Stop)) throw s;
      if (s.kind === "break") break;
    }
  }
  vars.length = mark;
  if (entries.length === 0 && n.elseList) walk(n.elseList, dot, vars, out);
}

function pipe(p: Pipe, dot: unknown, vars: Vars): unknown {
  let value: unknown;
  p.cmds.forEach((cmd, i) => {
    value = command(cmd, dot, vars, i === 0 ? NONE : value);
  });
  if (p.decl.length) {
    const name = p.decl[p.decl.length - 1];
    if (p.assign) {
      const v = [...vars].reverse().find((x) => x.name === name);
      if (!v) throw templateError(p.pos, `undefined variable: ${name}`);
      v.value = value;
    } else vars.push({ name, value });
  }
  return value;
}

const NONE = Symbol("none");

function command(cmd: Arg[], dot: unknown, vars: Vars, final: unknown): unknown {
  const [head, ...rest] = cmd;
  if (head.type === "func") {
    const args: (() => unknown)[] = rest.map((a) => () => arg(a, dot, vars));
    if (final !== NONE) args.push(() => final);
    return call(head.name, args, head.pos);
  }
  if (rest.length || final !== NONE) throw templateError(head.pos, `can't give argument to non-function ${describe(head)}`);
  return arg(head, dot, vars);
}

function arg(a: Arg, dot: unknown, vars: Vars): unknown {
  switch (a.type) {
    case "literal":
      return a.value;
    case "dot":
      return dot;
    case "field":
      return fields(dot, a.ident);
    case "var": {
      const v = [...vars].reverse().find((x) => x.name === a.name);
      if (!v) throw templateError(a.pos, `undefined variable: ${a.name}`);
      return fields(v.value, a.ident);
    }
    case "pipe":
      return fields(pipe(a.pipe, dot, vars), a.ident);
    case "func":
      return call(a.name, [], a.pos);
  }
}

/** `.A.B` on a value: each name as written, then lower-first, then snake_case (JSON names). */
function fields(v: unknown, ident: string[]): unknown {
  let cur = v;
  for (const name of ident) {
    if (cur === null || cur === undefined || typeof cur !== "object") return undefined;
    const o = cur as Record<string, unknown>;
    const lower = name[0].toLowerCase() + name.slice(1);
    const snake = name.replace(/([a-z0-9])([A-Z])/g, "$1_$2").toLowerCase();
    cur = name in o ? o[name] : lower in o ? o[lower] : o[snake];
  }
  return cur;
}

const describe = (a: Arg) => (a.type === "field" ? `.${a.ident.join(".")}` : a.type === "var" ? a.name + a.ident.map((i) => `.${i}`).join("") : a.type);

/** Go's truth: false, 0, "", nil and empty lists/maps are false; anything else true. */
export function truth(v: unknown): boolean {
  if (v === null || v === undefined || v === false || v === 0 || v === "") return false;
  if (Array.isArray(v)) return v.length > 0;
  if (typeof v === "object") return Object.keys(v).length > 0;
  return true;
}

/** How Go's fmt prints a value into the output. */
export function print(v: unknown): string {
  if (v === null || v === undefined) return "";
  if (typeof v === "string") return v;
  if (typeof v === "number" || typeof v === "boolean") return String(v);
  if (Array.isArray(v)) return `[${v.map(print).join(" ")}]`;
  return goJson(v);
}

/** JSON as Go's json.Marshal writes it (HTML-safe escapes). */
export function goJson(v: unknown): string {
  return (JSON.stringify(v) ?? "null").replace(/[<>&\u2028\u2029]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);
}

const byteLen = (s: string) => Buffer.byteLength(s, "utf8");

function equal(a: unknown, b: unknown): boolean {
  return a === b || (a == null && b == null);
}

function compare(a: unknown, b: unknown, pos: Pos): number {
  if (typeof a === "number" && typeof b === "number") return a - b;
  if (typeof a === "string" && typeof b === "string") return a < b ? -1 : a > b ? 1 : 0;
  throw templateError(pos, `incompatible types for comparison: ${typeof a} and ${typeof b}`);
}

function call(name: string, args: (() => unknown)[], pos: Pos): unknown {
  const need = (n: number) => {
    if (args.length < n) throw templateError(pos, `wrong number of args for ${name}: want at least ${n} got ${args.length}`);
  };
  const vals = () => args.map((a) => a());
  switch (name) {
    case "and": {
      need(1);
      let v: unknown;
      for (const a of args) if (!truth((v = a()))) return v;
      return v;
    }
    case "or": {
      need(1);
      let v: unknown;
      for (const a of args) if (truth((v = a()))) return v;
      return v;
    }
    case "not":
      need(1);
      return !truth(args[0]());
    case "eq": {
      need(2);
      const [first, ...rest] = vals();
      return rest.some((r) => equal(first, r));
    }
    case "ne":
      need(2);
      return !equal(args[0](), args[1]());
    case "lt":
    case "le":
    case "gt":
    case "ge": {
      need(2);
      const c = compare(args[0](), args[1](), pos);
      return name === "lt" ? c < 0 : name === "le" ? c <= 0 : name === "gt" ? c > 0 : c >= 0;
    }
    case "len": {
      need(1);
      const v = args[0]();
      if (typeof v === "string") return byteLen(v);
      if (Array.isArray(v)) return v.length;
      if (v && typeof v === "object") return Object.keys(v).length;
      if (v === null || v === undefined) return 0;
      throw templateError(pos, `len of ${typeof v}`);
    }
    case "index": {
      need(1);
      let [v, ...keys] = vals();
      for (const k of keys) {
        if (Array.isArray(v) && typeof k === "number") {
          if (k < 0 || k >= v.length) throw templateError(pos, `index out of range: ${k}`);
          v = v[k];
        } else if (v && typeof v === "object") v = (v as Record<string, unknown>)[String(k)];
        else throw templateError(pos, `can't index item of type ${typeof v}`);
      }
      return v;
    }
    case "slice": {
      need(1);
      const [v, ...ix] = vals();
      const bytes = typeof v === "string" ? Buffer.from(v, "utf8") : null;
      const len = bytes ? bytes.length : Array.isArray(v) ? v.length : -1;
      if (len < 0) throw templateError(pos, `can't slice item of type ${typeof v}`);
      const [i = 0, j = len] = ix as number[];
      if (i < 0 || j < i || j > len) throw templateError(pos, `slice index out of range: [${i}:${j}] with length ${len}`);
      return bytes ? bytes.subarray(i, j).toString("utf8") : (v as unknown[]).slice(i, j);
    }
    case "json":
      need(1);
      return goJson(args[0]());
    case "print":
    case "println": {
      const vs = vals();
      if (name === "println") return vs.map(print).join(" ") + "\n";
      // Go's Sprint puts spaces between operands when neither side is a string.
      return vs.map((v, i) => (i > 0 && typeof v !== "string" && typeof vs[i - 1] !== "string" ? " " : "") + print(v)).join("");
    }
    case "printf": {
      need(1);
      const [format, ...rest] = vals();
      let k = 0;
      return String(format).replace(/%([-+# 0]*\d*(?:\.\d+)?)([svdqtfgx%])/g, (_, _flags, verb: string) => {
        if (verb === "%") return "%";
        const v = rest[k++];
        if (verb === "q") return goJson(String(v));
        if (verb === "d") return String(Math.trunc(Number(v)));
        if (verb === "x") return typeof v === "number" ? v.toString(16) : Buffer.from(String(v)).toString("hex");
        return print(v);
      });
    }
    default:
      throw templateError(pos, `function ${JSON.stringify(name)} is not supported`);
  }
}
