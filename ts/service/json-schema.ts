/**
 * User-supplied JSON schemas (tool parameters, response_format) are checked with ajv before a
 * grammar is built from them: a schema ajv cannot compile is the request's mistake, named by
 * its field, rather than an opaque grammar error later. Tests validate outputs with the same
 * compiler.
 */
import { Ajv } from "ajv";
import { RequestError } from "./errors.ts";

// Not strict: real schemas carry keywords ajv does not know (OpenAI's `strict`, titles, examples).
const ajv = new Ajv({ strict: false, allErrors: false });

/**
 * Larger schemas are refused before ajv sees them: checking one against the meta-schema is
 * quadratic in an enum's length (`uniqueItems`), and a 1.5 MB enum would hold the event loop for
 * seconds. Grammars this size are past what the engine compiles anyway.
 */
export const MAX_SCHEMA_BYTES = 64 * 1024;

/** Throws a 400 naming `param` unless `schema` is a JSON schema ajv compiles. */
export function checkSchema(schema: unknown, param: string): void {
  if (typeof schema !== "object" || schema === null || Array.isArray(schema)) {
    throw new RequestError("INVALID_REQUEST", `${param} must be a JSON schema object.`, param, "invalid_schema");
  }
  const bytes = JSON.stringify(schema).length;
  if (bytes > MAX_SCHEMA_BYTES) {
    throw new RequestError("INVALID_REQUEST", `${param} is too large: ${bytes} bytes of JSON, over the limit of ${MAX_SCHEMA_BYTES}.`, param, "schema_too_large");
  }
  try {
    ajv.compile(schema);
  } catch (err) {
    const why = err instanceof Error ? err.message : String(err);
    throw new RequestError("INVALID_REQUEST", `${param} is not a valid JSON schema: ${why}`, param, "invalid_schema");
  } finally {
    // ajv caches every compiled schema (and its $id); a server sees endless distinct ones.
    ajv.removeSchema(schema);
  }
}

/**
 * A schema as the grammar compiler (llguidance) gets it, with our JSON layout: `, ` and `: `
 * separators and no free whitespace — with free whitespace a weak or unlucky model can emit
 * newlines forever inside a valid prefix. `lenient` ignores keywords the compiler does not
 * implement instead of refusing the schema (for schemas not sent as `strict`).
 */
export function grammarSchema(schema: Record<string, unknown>, opts: { lenient: boolean }): Record<string, unknown> {
  const layout = { whitespace_flexible: false, item_separator: ", ", key_separator: ": ", lenient: opts.lenient };
  return { ...(closeObjects(schema) as Record<string, unknown>), "x-guidance": layout };
}

/**
 * Objects that list their properties get only those (`additionalProperties: false`) unless the
 * schema says otherwise, as xgrammar's strict mode does for vLLM: the answer still validates
 * against the schema as sent, and a model cannot wander into inventing keys forever.
 */
function closeObjects(node: unknown): unknown {
  if (Array.isArray(node)) return node.map(closeObjects);
  if (typeof node !== "object" || node === null) return node;
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(node)) out[k] = k === "const" || k === "enum" || k === "default" || k === "examples" ? v : closeObjects(v);
  if (out.properties && typeof out.properties === "object" && !("additionalProperties" in out) && !("patternProperties" in out)) out.additionalProperties = false;
  return out;
}
