/** Pieces the OpenAI routes share: response ids, timestamps, the fixed part of every chunk. */
import { randomBytes } from "node:crypto";

/** `chatcmpl-…` / `cmpl-…`, as OpenAI and vLLM name them. */
export function responseId(prefix: "chatcmpl" | "cmpl"): string {
  return `${prefix}-${randomBytes(12).toString("hex")}`;
}

export function unixNow(): number {
  return Math.floor(Date.now() / 1000);
}

/** The fixed part of every response and chunk of one request. */
export interface ResponseMeta {
  id: string;
  created: number;
  model: string;
}
