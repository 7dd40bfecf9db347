/**
 * Errors that are the request's fault (or ask for what this server does not do:
 * NOT_IMPLEMENTED), found by the service before or while it talks to the engine. They carry
 * the request field they blame (`param`, OpenAI's path syntax such as `messages[1].content`)
 * so every API can say which field was wrong. The store's own errors (StoreError, re-exported
 * here for the error table) carry codes of their own.
 */
export { StoreError, type StoreErrorCode } from "../store/index.ts";

export type RequestErrorCode = "INVALID_REQUEST" | "MODEL_NOT_FOUND" | "CONTEXT_LENGTH_EXCEEDED" | "NOT_IMPLEMENTED";

export class RequestError extends Error {
  constructor(
    readonly code: RequestErrorCode,
    message: string,
    readonly param: string | null = null,
    /** A finer machine code for the body, e.g. "invalid_type"; the error table gives the default. */
    readonly detail: string | null = null,
  ) {
    super(message);
    this.name = "RequestError";
  }
}
