/**
 * A chat request's tools → what generation needs: whether and how calls are parsed back out of
 * the text, the grammar that keeps a call well formed (forced for `tool_choice: "required"` or a
 * named function; lazy — armed by the call-start token — for `"auto"`), and the control tokens
 * the engine must leave in the text because the parser reads them as markers.
 *
 * Checked here, before anything runs: every tool's parameters are a JSON schema, names are
 * unique, `tool_choice` names an offered tool, and each `tool` message answers a call made
 * earlier in the conversation.
 */
import type { GenerateOptions } from "../../engine/index.ts";
import type { ChatMessage, ToolChoice } from "../../schemas/chat.ts";
import { RequestError } from "../errors.ts";
import { checkSchema } from "../json-schema.ts";
import type { ServedModel } from "../registry.ts";
import { callGrammar, type ToolSpec } from "./grammar.ts";
import type { ToolParser } from "./index.ts";

export type Grammar = NonNullable<GenerateOptions["grammar"]>;

interface RequestTool {
  function: { name: string; parameters?: Record<string, unknown> | null };
}

export interface ToolRequest {
  tools?: RequestTool[] | null;
  tool_choice?: ToolChoice | null;
  parallel_tool_calls?: boolean | null;
}

export interface ToolPlan {
  /** Reads calls out of the output; null when calls are not parsed (no tools, or "none"). */
  parser: ToolParser | null;
  /** Names of the offered tools: a block calling anything else stays text. */
  allowed: ReadonlySet<string>;
  /** At most one call per choice (`parallel_tool_calls: false`). */
  single: boolean;
  grammar?: Grammar;
  /** Control tokens kept in the text for the parser. */
  markerTokens: number[];
}

/** No tools offered: the output is plain text. */
export const NO_TOOLS: ToolPlan = { parser: null, allowed: new Set(), single: false, markerTokens: [] };

export function planTools(model: ServedModel, req: ToolRequest): ToolPlan {
  checkToolNames(req.tools);
  const tools = (req.tools ?? []).map((t, i) => toolSpec(t, i));
  const choice = req.tool_choice ?? "auto";
  if (tools.length === 0) {
    if (choice !== "none" && choice !== "auto") throw new RequestError("INVALID_REQUEST", "tool_choice requires tools.", "tool_choice");
    return NO_TOOLS;
  }
  const names = new Set(tools.map((t) => t.name));
  if (choice === "none") return NO_TOOLS;

  const parser = model.toolParser;
  const single = req.parallel_tool_calls === false;
  const startId = singleTokenId(model, parser.start);
  const endId = singleTokenId(model, parser.end);
  const markerTokens = [startId, endId].filter((id): id is number => id !== undefined);
  const plan: ToolPlan = { parser, allowed: names, single, markerTokens };

  if (choice === "auto") {
    // Lazy: the model is free until it writes the start marker itself, then the call is held to
    // the tools' schemas. Without a one-token marker there is nothing to arm on: parse only.
    if (startId !== undefined) plan.grammar = { kind: "lark", source: callGrammar(parser, tools, { parallel: !single }), triggerToken: startId };
    return plan;
  }
  let forced = tools;
  if (choice !== "required") {
    const name = choice.function.name;
    forced = tools.filter((t) => t.name === name);
    if (forced.length === 0) throw new RequestError("INVALID_REQUEST", `tool_choice names '${name}', which is not among the tools.`, "tool_choice");
  }
  plan.grammar = { kind: "lark", source: callGrammar(parser, forced, { parallel: !single && choice === "required" }) };
  return plan;
}

function toolSpec(tool: RequestTool, i: number): ToolSpec {
  const { name, parameters } = tool.function;
  const param = `tools[${i}].function.parameters`;
  if (parameters != null) {
    checkSchema(parameters, param);
    if (parameters.type !== undefined && parameters.type !== "object") {
      throw new RequestError("INVALID_REQUEST", `${param} must describe an object (type "object"), the function's keyword arguments.`, param, "invalid_schema");
    }
  }
  return { name, parameters };
}

function singleTokenId(model: ServedModel, text: string): number | undefined {
  return model.engine.tokenId(text) ?? undefined;
}

/** Tool names must be unique: a call names exactly one. */
function checkToolNames(tools: RequestTool[] | null | undefined): void {
  const seen = new Set<string>();
  (tools ?? []).forEach((t, i) => {
    if (seen.has(t.function.name)) throw new RequestError("INVALID_REQUEST", `Two tools are named '${t.function.name}'.`, `tools[${i}].function.name`);
    seen.add(t.function.name);
  });
}

/**
 * Each `tool` message must answer a call the conversation made before it: its `tool_call_id`
 * names one of the earlier assistant `tool_calls` ids (OpenAI rejects the request otherwise).
 */
export function checkToolMessages(messages: ChatMessage[]): void {
  const callIds = new Set<string>();
  messages.forEach((m, i) => {
    if (m.role === "assistant") for (const c of m.tool_calls ?? []) if (c.id) callIds.add(c.id);
    if (m.role !== "tool") return;
    const param = `messages[${i}].tool_call_id`;
    if (!m.tool_call_id) throw new RequestError("INVALID_REQUEST", "A tool message needs the tool_call_id of the call it answers.", param, "missing_required_parameter");
    if (!callIds.has(m.tool_call_id)) {
      throw new RequestError("INVALID_REQUEST", `messages[${i}] answers tool call '${m.tool_call_id}', but no earlier assistant message made a call with that id.`, param);
    }
  });
}
