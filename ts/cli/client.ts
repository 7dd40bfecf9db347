/**
 * The HTTP client of the client commands (run, pull, list, …): the server's address from
 * WICK_HOST, JSON and NDJSON requests, and the server's `{"error": "…"}` answers turned into
 * one-line errors (ApiError keeps the status: 404 is "no such model").
 */
import { formatHostPort, resolveAddress } from "./address.ts";
import { ApiError, CliError } from "./errors.ts";

export interface Target {
  /** Where the server listens (WICK_HOST), as typed: `0.0.0.0` stays. */
  host: string;
  port: number;
  /** Where a client connects: a wildcard host becomes loopback. */
  url: string;
}

/** The server WICK_HOST names (default 127.0.0.1:11434). */
export function target(env: NodeJS.ProcessEnv = process.env): Target {
  const { host, port } = resolveAddress({}, env);
  const connect = host === "0.0.0.0" ? "127.0.0.1" : host === "::" ? "::1" : host;
  return { host, port, url: `http://${formatHostPort(connect, port)}` };
}

export class WickClient {
  constructor(
    readonly url: string,
    /** Sent as a Bearer token (WICK_API_KEY), for a server started with --api-key. */
    private readonly apiKey?: string,
  ) {}

  private async send(method: string, route: string, body?: unknown, signal?: AbortSignal): Promise<Response> {
    let res: Response;
    try {
      res = await fetch(`${this.url}${route}`, {
        method,
        headers: { ...(body === undefined ? {} : { "content-type": "application/json" }), ...(this.apiKey ? { authorization: `Bearer ${this.apiKey}` } : {}) },
        body: body === undefined ? undefined : JSON.stringify(body),
        signal,
      });
    } catch (err) {
      if ((err as Error).name === "AbortError") throw err;
      throw new CliError(`cannot reach the Wick server at ${this.url}: ${causeOf(err)}`);
    }
    if (!res.ok) throw new ApiError(await errorMessage(res), res.status);
    return res;
  }

  /** A request answered with JSON (or nothing). */
  async json<T = unknown>(method: string, route: string, body?: unknown): Promise<T> {
    const res = await this.send(method, route, body);
    const text = await res.text();
    return (text ? JSON.parse(text) : undefined) as T;
  }

  /** A streamed NDJSON answer, object by object; an in-band `{"error"}` line throws. */
  async *stream<T = Record<string, unknown>>(route: string, body: unknown, signal?: AbortSignal): AsyncGenerator<T> {
    const res = await this.send("POST", route, body, signal);
    const decoder = new TextDecoder();
    let buf = "";
    try {
      for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
        buf += decoder.decode(chunk, { stream: true });
        let nl: number;
        while ((nl = buf.indexOf("\n")) >= 0) {
          const line = buf.slice(0, nl).trim();
          buf = buf.slice(nl + 1);
          if (line) yield parseLine<T>(line);
        }
      }
    } catch (err) {
      if ((err as Error).name === "AbortError" || err instanceof CliError) throw err;
      throw new CliError(`lost the connection to the Wick server at ${this.url}: ${causeOf(err)}`);
    }
    if (buf.trim()) yield parseLine<T>(buf.trim());
  }
}

function parseLine<T>(line: string): T {
  const obj = JSON.parse(line) as T & { error?: unknown };
  if (typeof obj.error === "string") throw new CliError(obj.error);
  return obj;
}

async function errorMessage(res: Response): Promise<string> {
  const text = await res.text().catch(() => "");
  try {
    const body = JSON.parse(text) as { error?: unknown };
    const e = body.error;
    if (typeof e === "string") return e;
    if (e && typeof e === "object" && typeof (e as { message?: unknown }).message === "string") return (e as { message: string }).message;
  } catch {
    // not JSON
  }
  return `HTTP ${res.status}${text.trim() ? `: ${text.trim().split("\n")[0]}` : ""}`;
}

/** The low-level reason of a failed fetch (`ECONNREFUSED`, `other side closed`, …). */
export function causeOf(err: unknown): string {
  const cause = (err as { cause?: { code?: string; message?: string } }).cause;
  return cause?.code ?? cause?.message ?? (err as Error).message;
}
