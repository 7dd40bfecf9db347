/** Errors from the engine, with the stable `code` the binding assigns (see crates/wick-core/src/error.rs). */
export const ENGINE_CODES = [
  "INVALID_REQUEST",
  "CONTEXT_LENGTH_EXCEEDED",
  "INVALID_GRAMMAR",
  "MODEL_LOAD_FAILED",
  "UNSUPPORTED_ARCHITECTURE",
  "UNSUPPORTED_TOKENIZER",
  "QUEUE_FULL",
  "CANCELLED",
  "ENGINE_STOPPED",
  // The scheduler thread died: every request fails until the model is loaded again.
  "ENGINE_DEAD",
  "CONVERT_FAILED",
  "INTERNAL",
] as const;

export type EngineCode = (typeof ENGINE_CODES)[number];

export class WickError extends Error {
  constructor(
    readonly code: EngineCode,
    message: string,
  ) {
    super(message);
    this.name = "WickError";
  }
}

export const isEngineCode = (c: unknown): c is EngineCode => typeof c === "string" && (ENGINE_CODES as readonly string[]).includes(c);

/**
 * Normalises what the addon throws or rejects with: an Error whose `code` is the engine's.
 * napi's own argument conversion fails with `InvalidArg` (e.g. a grammar `kind` outside the
 * union): the caller's fault, so INVALID_REQUEST.
 */
export function fromNative(err: unknown): WickError {
  if (err instanceof WickError) return err;
  const e = err as { code?: unknown; message?: unknown };
  const message = typeof e?.message === "string" ? e.message : String(err);
  const code = isEngineCode(e?.code) ? e.code : e?.code === "InvalidArg" ? "INVALID_REQUEST" : "INTERNAL";
  return new WickError(code, message);
}
