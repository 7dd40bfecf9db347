/** Errors from the engine, with the stable `code` the binding assigns (see crates/wick-core/src/error.rs). */
export const ENGINE_CODES = [
  "INVALID_REQUEST",
  "CONTEXT_LENGTH_EXCEEDED",
  "MODEL_LOAD_FAILED",
  "UNSUPPORTED_ARCHITECTURE",
  "UNSUPPORTED_TOKENIZER",
  "QUEUE_FULL",
  "CANCELLED",
  "ENGINE_STOPPED",
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

const isCode = (c: unknown): c is EngineCode => typeof c === "string" && (ENGINE_CODES as readonly string[]).includes(c);

/**
 * Normalises what the addon throws. Sync calls set `err.code`; async calls (napi cannot give
 * them a custom code) put it in front of the message as "CODE: message".
 */
export function fromNative(err: unknown): WickError {
  if (err instanceof WickError) return err;
  const e = err as { code?: unknown; message?: unknown };
  const message = typeof e?.message === "string" ? e.message : String(err);
  if (isCode(e?.code)) return new WickError(e.code, message);
  const m = /^([A-Z_]+): ([\s\S]*)$/.exec(message);
  if (m && isCode(m[1])) return new WickError(m[1], m[2]);
  return new WickError("INTERNAL", message);
}
