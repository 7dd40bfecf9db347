/**
 * The server's address, one place for `wick serve` (where to listen) and the client commands
 * (where to connect): `--host` / `--port` over WICK_HOST over 127.0.0.1:11434, as Ollama's
 * OLLAMA_HOST.
 */
import { CliError } from "./errors.ts";
import { hostPort } from "./values.ts";

/** Where `wick serve` listens, and the client commands look, when neither flags nor WICK_HOST say. */
export const DEFAULT_LISTEN_HOST = "127.0.0.1";
export const DEFAULT_PORT = 11434;

/** What WICK_HOST gives (either part may be missing); a malformed value is a CliError naming it. */
export function envHostPort(env: NodeJS.ProcessEnv = process.env): { host?: string; port?: number } {
  const raw = env.WICK_HOST;
  if (!raw) return {};
  try {
    return hostPort(raw);
  } catch (err) {
    throw new CliError(`WICK_HOST=${raw}: ${(err as Error).message}`);
  }
}

/** The address to use: a flag first, then WICK_HOST, then the default (127.0.0.1:11434). */
export function resolveAddress(flags: { host?: string; port?: number } = {}, env: NodeJS.ProcessEnv = process.env): { host: string; port: number } {
  const fromEnv = envHostPort(env);
  return { host: flags.host ?? fromEnv.host ?? DEFAULT_LISTEN_HOST, port: flags.port ?? fromEnv.port ?? DEFAULT_PORT };
}

/** `host:port`, an IPv6 host in brackets (as WICK_HOST and URLs write it). */
export function formatHostPort(host: string, port: number): string {
  return `${host.includes(":") ? `[${host}]` : host}:${port}`;
}
