/**
 * Errors from the engine, with the stable `code` the binding assigns. The code list is the
 * binding's (`errorCodes()`, generated from `wick_core::with_error_codes!` in
 * crates/wick-core/src/error.rs plus the converter's CONVERT_FAILED): a new Rust code arrives
 * here by itself instead of turning into INTERNAL.
 */
import type * as Native from "../native/native.d.ts";
import { native } from "./addon.ts";

export type EngineCode = Native.ErrorCode;

let codes: readonly EngineCode[] | undefined;
/**
 * Every engine code, in the engine's order, CONVERT_FAILED last. Asked of the addon on first
 * use, not at import: which addon runs is chosen later (./addon.ts).
 */
export const engineCodes = (): readonly EngineCode[] => (codes ??= Object.freeze(native().errorCodes()));

/** The numbers a CONTEXT_LENGTH_EXCEEDED error carries (set by the binding, not parsed from text). */
export interface ContextLengthDetails {
  /** Prompt tokens as laid out (image placeholders included). */
  promptTokens?: number;
  /** The engine's tokens per sequence. */
  contextSize?: number;
  /** The request's max_tokens, when it set one. */
  maxTokens?: number;
}

export class WickError extends Error {
  // `declare`: own properties only when the error has them (no `promptTokens: undefined`).
  declare readonly promptTokens?: number;
  declare readonly contextSize?: number;
  declare readonly maxTokens?: number;

  constructor(
    readonly code: EngineCode,
    message: string,
    details: ContextLengthDetails = {},
  ) {
    super(message);
    this.name = "WickError";
    const own = this as { -readonly [K in keyof ContextLengthDetails]: ContextLengthDetails[K] };
    if (details.promptTokens !== undefined) own.promptTokens = details.promptTokens;
    if (details.contextSize !== undefined) own.contextSize = details.contextSize;
    if (details.maxTokens !== undefined) own.maxTokens = details.maxTokens;
  }
}

export const isEngineCode = (c: unknown): c is EngineCode => typeof c === "string" && (engineCodes() as readonly string[]).includes(c);

const numberOr = (v: unknown): number | undefined => (typeof v === "number" ? v : undefined);

/**
 * Normalises what the addon throws or rejects with: an Error whose `code` is the engine's.
 * napi's own argument conversion fails with `InvalidArg` (e.g. a grammar `kind` outside the
 * union): the caller's fault, so INVALID_REQUEST.
 */
export function fromNative(err: unknown): WickError {
  if (err instanceof WickError) return err;
  const e = err as { code?: unknown; message?: unknown; promptTokens?: unknown; contextSize?: unknown; maxTokens?: unknown };
  const message = typeof e?.message === "string" ? e.message : String(err);
  const code = isEngineCode(e?.code) ? e.code : e?.code === "InvalidArg" ? "INVALID_REQUEST" : "INTERNAL";
  return new WickError(code, message, {
    promptTokens: numberOr(e?.promptTokens),
    contextSize: numberOr(e?.contextSize),
    maxTokens: numberOr(e?.maxTokens),
  });
}
