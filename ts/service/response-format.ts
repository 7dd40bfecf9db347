/**
 * OpenAI's `response_format` → the grammar that holds the output to it: `json_object` is any
 * JSON object, `json_schema` JSON valid against the given schema (checked with ajv first, so a
 * schema that is not one is a 400 naming the field, not a grammar error).
 */
import type { ResponseFormat } from "../schemas/chat.ts";
import { RequestError } from "./errors.ts";
import { checkSchema, grammarSchema } from "./json-schema.ts";
import type { Grammar } from "./tools/request.ts";

export function responseFormatGrammar(format: ResponseFormat | null | undefined): Grammar | undefined {
  if (!format || format.type === "text") return undefined;
  if (format.type === "json_object") return { kind: "json_schema", source: JSON.stringify(grammarSchema({ type: "object" }, { lenient: false })) };
  const param = "response_format.json_schema.schema";
  const schema = format.json_schema.schema;
  if (schema == null) throw new RequestError("INVALID_REQUEST", `${param} is required for type "json_schema".`, param, "missing_required_parameter");
  checkSchema(schema, param);
  return { kind: "json_schema", source: JSON.stringify(grammarSchema(schema, { lenient: format.json_schema.strict !== true })) };
}
