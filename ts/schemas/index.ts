/** Request-body schemas: the one source of truth for what the HTTP API accepts. */
export * from "./sampling.ts";
export * from "./chat.ts";
export * from "./completions.ts";
export * from "./show.ts";
