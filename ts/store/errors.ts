/**
 * Errors from the model store, the hub client and the Modelfile tools. Each carries a stable
 * `code` the server maps to a status (INVALID_* → 400, *_NOT_FOUND → 404, DISK_FULL → 507,
 * the rest → 500) and a message that names what is wrong and, where it can, what exists.
 */
export type StoreErrorCode =
  | "INVALID_NAME"
  | "INVALID_MODELFILE"
  | "INVALID_TEMPLATE"
  | "UNSUPPORTED"
  | "MODEL_NOT_FOUND"
  | "FILE_NOT_FOUND"
  | "CORRUPT_MODEL"
  | "DIGEST_MISMATCH"
  | "DISK_FULL"
  | "HUB_NOT_FOUND"
  | "HUB_UNAUTHORIZED"
  | "HUB_NO_GGUF"
  | "HUB_QUANT_NOT_FOUND"
  | "HUB_ERROR"
  | "IO_ERROR";

export class StoreError extends Error {
  constructor(
    readonly code: StoreErrorCode,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.name = "StoreError";
  }
}

/** Node's errno code of an fs error, if it has one. */
export function errnoCode(err: unknown): string | undefined {
  const code = (err as { code?: unknown })?.code;
  return typeof code === "string" ? code : undefined;
}

/**
 * An fs failure while writing `what`, as a StoreError: ENOSPC/EDQUOT become DISK_FULL (the
 * caller has already removed its temp file, so the store is as it was before the write).
 */
export function writeError(err: unknown, what: string): StoreError {
  if (err instanceof StoreError) return err;
  const code = errnoCode(err);
  if (code === "ENOSPC" || code === "EDQUOT") {
    return new StoreError("DISK_FULL", `no space left on device while writing ${what}; nothing was added to the store`, { cause: err });
  }
  const why = err instanceof Error ? err.message : String(err);
  return new StoreError("IO_ERROR", `could not write ${what}: ${why}`, { cause: err });
}
