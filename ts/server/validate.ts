/**
 * Validates a request body with its zod schema and turns the first problem into an OpenAI
 * style 400: a sentence a person can act on, `param` in OpenAI's path syntax
 * (`messages[0].role`) and a machine code (`missing_required_parameter`, `invalid_type`, …).
 */
import type { z } from "zod";
import { RequestError } from "../service/errors.ts";

export function parseBody<S extends z.ZodType>(schema: S, body: unknown): z.infer<S> {
  const res = schema.safeParse(body, { reportInput: true });
  if (res.success) return res.data;
  throw describeIssue(res.error.issues[0], []);
}

type Issue = z.core.$ZodIssue;
type Path = PropertyKey[];

/** `["messages", 0, "role"]` → `messages[0].role`. */
function paramName(path: Path): string {
  return path.reduce<string>((s, k) => (typeof k === "number" ? `${s}[${k}]` : s ? `${s}.${String(k)}` : String(k)), "");
}

function describeIssue(issue: Issue, prefix: Path): RequestError {
  const path = [...prefix, ...issue.path];
  const param = paramName(path) || null;
  const name = param ?? "body";
  const input = (issue as { input?: unknown }).input;
  const bad = (message: string, detail: string) => new RequestError("INVALID_REQUEST", message, param, detail);

  switch (issue.code) {
    case "invalid_type":
      if (input === undefined) return bad(`Missing required parameter: '${name}'.`, "missing_required_parameter");
      return bad(`Invalid type for '${name}': expected ${article(issue.expected)}, but got ${typeName(input)} instead.`, "invalid_type");
    case "too_small":
      if (issue.origin === "array") {
        return bad(`Invalid '${name}': expected an array with at least ${issue.minimum} item(s), but got ${(input as unknown[]).length}.`, issue.minimum === 1 ? "empty_array" : "array_too_short");
      }
      return bad(`Invalid '${name}': expected a value ${issue.inclusive ? ">=" : ">"} ${issue.minimum}, but got ${show(input)} instead.`, "value_below_minimum");
    case "too_big":
      if (issue.origin === "array") {
        return bad(`Invalid '${name}': expected an array with at most ${issue.maximum} item(s), but got ${(input as unknown[]).length}.`, "array_too_long");
      }
      return bad(`Invalid '${name}': expected a value ${issue.inclusive ? "<=" : "<"} ${issue.maximum}, but got ${show(input)} instead.`, "value_above_maximum");
    case "invalid_value":
      return bad(`Invalid value for '${name}': ${show(input)}. Supported values are: ${issue.values.map(show).join(", ")}.`, "invalid_value");
    case "invalid_union":
      return describeUnion(issue, path, input);
    case "custom":
      if ((issue.params as { verbatim?: boolean } | undefined)?.verbatim) return bad(issue.message, "invalid_value");
      return bad(`Invalid '${name}': ${issue.message}.`, "invalid_value");
    default:
      return bad(`Invalid '${name}': ${issue.message}.`, "invalid_value");
  }
}

/**
 * Unions are where zod's own messages say least ("Invalid input"). A discriminated union
 * names the bad tag; a plain union either failed on the value's type in every branch (say
 * which types would do) or got further in one branch (report that branch's deepest issue).
 */
function describeUnion(issue: z.core.$ZodIssueInvalidUnion, path: Path, input: unknown): RequestError {
  const disc = (issue as { discriminator?: string }).discriminator;
  const options = (issue as { options?: unknown[] }).options;
  if (disc && options) {
    const value = (input as Record<string, unknown> | undefined)?.[disc];
    const param = paramName(path);
    if (value === undefined) return new RequestError("INVALID_REQUEST", `Missing required parameter: '${param}'.`, param, "missing_required_parameter");
    return new RequestError("INVALID_REQUEST", `Invalid value for '${param}': ${show(value)}. Supported values are: ${options.map(show).join(", ")}.`, param, "invalid_value");
  }
  const branches = issue.errors.filter((b) => b.length > 0);
  const typeOnly = branches.every((b) => b.length === 1 && b[0].code === "invalid_type" && b[0].path.length === 0);
  const name = paramName(path) || "body";
  if (typeOnly) {
    if (input === undefined) return new RequestError("INVALID_REQUEST", `Missing required parameter: '${name}'.`, name, "missing_required_parameter");
    const expected = [...new Set(branches.map((b) => article((b[0] as { expected: string }).expected)))];
    return new RequestError("INVALID_REQUEST", `Invalid type for '${name}': expected ${expected.join(" or ")}, but got ${typeName(input)} instead.`, name, "invalid_type");
  }
  // The branch that matched the value's shape best is the one whose issues lie deepest; at
  // equal depth, one that accepted the value's type beats one that did not.
  const score = (b: Issue[]) => {
    const depth = Math.max(...b.map((i) => i.path.length + (i.code === "invalid_union" ? 1 : 0)));
    const typeMismatch = b[0].code === "invalid_type" && b[0].path.length === 0;
    return depth * 2 + (typeMismatch ? 0 : 1);
  };
  const best = branches.reduce((a, b) => (score(b) > score(a) ? b : a));
  return describeIssue(best[0], path);
}

function typeName(v: unknown): string {
  if (v === null) return "null";
  if (Array.isArray(v)) return "an array";
  if (typeof v === "object") return "an object";
  return `${article(typeof v)} (${show(v)})`;
}

function article(t: string): string {
  const word = t === "int" ? "integer" : t;
  return /^[aeiou]/.test(word) ? `an ${word}` : `a ${word}`;
}

function show(v: unknown): string {
  const s = typeof v === "string" ? `'${v}'` : (JSON.stringify(v) ?? String(v));
  return s.length > 60 ? `${s.slice(0, 57)}...` : s;
}
