/**
 * Whether and where a model's thinking is split from its answer (`reasoning.ts` does the split).
 *
 * Per model, once: the markers its chat template writes (`<think>`, or the template's own:
 * Seed-OSS `<seed:think>`, Kimi `◁think▷`, Mistral `[THINK]`), under the server's mode —
 * llama-server's `--reasoning-format auto|deepseek|none` or vLLM/SGLang's `--reasoning-parser
 * <name>`. Per request: whether the rendered prompt already opened the block, and what the
 * request asked (`think`, `reasoning_effort`), which the template reads as `enable_thinking`
 * (Qwen3's and most thinking templates' switch) and `reasoning_effort`.
 */
import type { ReasoningBudget } from "../engine/index.ts";
import type { ReasoningMarkers } from "./reasoning.ts";

const THINK: ReasoningMarkers = { open: "<think>", close: "</think>" };

/** Template-specific markers, looked for before the common `<think>`. */
const TEMPLATE_MARKERS: ReasoningMarkers[] = [
  { open: "<seed:think>", close: "</seed:think>" },
  { open: "◁think▷", close: "◁/think▷" },
  { open: "[THINK]", close: "[/THINK]" },
];

/** llama-server's `--reasoning-format` values (`deepseek-legacy` is not offered). */
export const REASONING_FORMATS = ["auto", "deepseek", "none"] as const;
export type ReasoningFormat = (typeof REASONING_FORMATS)[number];

/** vLLM's (snake_case) and SGLang's (kebab-case) `--reasoning-parser` names, by their markers. */
const PARSERS: Record<string, ReasoningMarkers> = {
  deepseek_r1: THINK,
  "deepseek-r1": THINK,
  deepseek_v3: THINK,
  "deepseek-v3": THINK,
  qwen3: THINK,
  "qwen3-thinking": THINK,
  glm45: THINK,
  step3: THINK,
  minimax_m2: THINK,
  kimi_k2: THINK,
  seed_oss: TEMPLATE_MARKERS[0],
  kimi: TEMPLATE_MARKERS[1],
  mistral: TEMPLATE_MARKERS[2],
};
export const REASONING_PARSERS = Object.keys(PARSERS);

/** The server's choice: split at the template's markers (auto), always (deepseek), never, or at a parser's. */
export type ReasoningMode = { format: ReasoningFormat } | { parser: string };

/** The markers a chat template writes: its own, else `<think>` if it thinks at all. */
export function templateMarkers(source: string): ReasoningMarkers | null {
  const own = TEMPLATE_MARKERS.find((m) => source.includes(m.open));
  if (own) return own;
  return [THINK.open, THINK.close, "enable_thinking"].some((s) => source.includes(s)) ? THINK : null;
}

export interface ModelReasoning {
  /** Where output is split; null when thinking stays in content (`none`, or a template that never thinks). */
  split: ReasoningMarkers | null;
  /** Marker control tokens the engine must leave in the text (also with `none`, as llama.cpp's preserved tokens). */
  markerTokens: number[];
  /** Tokens a thinking block may run (`--reasoning-budget`); undefined: no limit. */
  budget?: number;
}

export function modelReasoning(templateSource: string, mode: ReasoningMode, tokenId: (text: string) => number | undefined): ModelReasoning {
  const found = templateMarkers(templateSource);
  let split: ReasoningMarkers | null;
  if ("parser" in mode) split = PARSERS[mode.parser] ?? unknownParser(mode.parser);
  else if (mode.format === "none") split = null;
  else split = mode.format === "deepseek" ? (found ?? THINK) : found;
  const markers = split ?? found;
  const markerTokens = markers ? [tokenId(markers.open), tokenId(markers.close)].filter((id): id is number => id !== undefined) : [];
  return { split, markerTokens };
}

function unknownParser(name: string): never {
  throw new Error(`unknown reasoning parser '${name}' (known: ${REASONING_PARSERS.join(", ")})`);
}

/** One choice's split: the markers, and whether the prompt's generation prompt opened the block. */
export interface ChoiceReasoning {
  markers: ReasoningMarkers;
  inside: boolean;
}

export function choiceReasoning(model: ModelReasoning, promptText: string): ChoiceReasoning | undefined {
  if (!model.split) return undefined;
  return { markers: model.split, inside: promptText.trimEnd().endsWith(model.split.open) };
}

/** What a request asks of the model's thinking, whichever API's field it came from. */
export interface ThinkRequest {
  /** false: render the template with thinking off (where it reads `enable_thinking`). */
  enabled?: boolean;
  /** "low", "medium", "high" …, for templates that read `reasoning_effort` (gpt-oss). */
  effort?: string;
  /** Tokens the thinking block may run before its end is forced (Anthropic's `budget_tokens`). */
  budget?: number;
}

/** Ollama's `think`: a bool, or an effort ("low" | "medium" | "high" | "max"), which thinks. */
export function ollamaThink(think: boolean | string | null | undefined): ThinkRequest | undefined {
  if (think == null) return undefined;
  return typeof think === "boolean" ? { enabled: think } : { enabled: true, effort: think };
}

/** OpenAI chat's fields: `chat_template_kwargs.enable_thinking` (vLLM, llama-server) wins over `reasoning_effort`. */
export function chatThink(enable: boolean | null | undefined, effort: string | null | undefined): ThinkRequest | undefined {
  return typeof enable === "boolean" ? { enabled: enable } : effortThink(effort);
}

/** OpenAI's `reasoning_effort` (and Responses' `reasoning.effort`): "none" turns thinking off. */
export function effortThink(effort: string | null | undefined): ThinkRequest | undefined {
  if (effort == null) return undefined;
  return effort === "none" ? { enabled: false } : { effort };
}

/**
 * The Jinja variables a request's `ThinkRequest` sets. `enable_thinking` is always set, true
 * unless asked otherwise, as llama.cpp sets it: some templates test `not enable_thinking`, and
 * an undefined one would turn their thinking off.
 */
export function thinkTemplateVars(think: ThinkRequest | undefined): Record<string, unknown> {
  return { enable_thinking: think?.enabled ?? true, ...(think?.effort ? { reasoning_effort: think.effort } : {}) };
}

/**
 * The engine's budget for one choice: the request's, else the server's; none without split markers.
 * Markers are token ids (`tokenize` parses special tokens), the opening one for an answer that opens
 * the block itself.
 */
export function choiceBudget(model: ModelReasoning, think: ThinkRequest | undefined, choice: ChoiceReasoning | undefined, tokenize: (text: string) => number[]): ReasoningBudget | undefined {
  const tokens = think?.budget ?? model.budget;
  if (tokens === undefined || !choice) return undefined;
  return { tokens, start: tokenize(choice.markers.open), end: tokenize(choice.markers.close), inside: choice.inside };
}

/** A server budget of 0 means thinking off, as llama-server's: the template's switch too. */
export function budgetThink(model: ModelReasoning, think: ThinkRequest | undefined): ThinkRequest | undefined {
  return model.budget === 0 && think?.enabled === undefined ? { ...think, enabled: false } : think;
}
