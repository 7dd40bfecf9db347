/** Pieces the OpenAI routes share: ids, finish reasons, and what a route needs from the app. */
import { randomBytes } from "node:crypto";
import type { Logger } from "pino";
import type { DoneEvent } from "../../../service/generation.ts";
import type { ModelRegistry } from "../../../service/registry.ts";

export interface RouteDeps {
  registry: ModelRegistry;
  log: Logger;
}

/** `chatcmpl-…` / `cmpl-…`, as OpenAI and vLLM name them. */
export function responseId(prefix: "chatcmpl" | "cmpl"): string {
  return `${prefix}-${randomBytes(12).toString("hex")}`;
}

export function unixNow(): number {
  return Math.floor(Date.now() / 1000);
}

/** "cancelled" only happens when the client left, so no client ever reads it; say "stop". */
export function finishReason(r: DoneEvent["finishReason"]): "stop" | "length" {
  return r === "length" ? "length" : "stop";
}

/** The fixed part of every response and chunk of one request. */
export interface ResponseMeta {
  id: string;
  created: number;
  model: string;
}
