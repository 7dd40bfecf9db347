/**
 * `keep_alive` as Ollama reads it: a Go duration string ("10m", "1h30m", "300ms", "1.5h"), a
 * number of seconds (JSON number, or a string of digits as OLLAMA_KEEP_ALIVE allows), a
 * negative value = keep the model loaded forever, 0 = unload as soon as it is idle.
 * Values are milliseconds here; forever is `Infinity`.
 */
import { RequestError } from "./errors.ts";

/** Ollama's default: five minutes after the last request. */
export const DEFAULT_KEEP_ALIVE_MS = 5 * 60_000;

const UNIT_MS: Record<string, number> = { ns: 1e-6, us: 1e-3, µs: 1e-3, μs: 1e-3, ms: 1, s: 1000, m: 60_000, h: 3_600_000 };

/** Go's time.ParseDuration, in ms; undefined when `s` is not a duration. */
export function parseDuration(s: string): number | undefined {
  const m = /^([+-]?)((?:(?:\d+\.?\d*|\.\d+)(?:ns|us|µs|μs|ms|s|m|h))+)$/.exec(s.trim());
  if (!m) return s.trim() === "0" ? 0 : undefined;
  let total = 0;
  for (const [, n, unit] of m[2].matchAll(/(\d+\.?\d*|\.\d+)(ns|us|µs|μs|ms|s|m|h)/g)) total += Number(n) * UNIT_MS[unit];
  return m[1] === "-" ? -total : total;
}

/** A keep_alive value → ms (Infinity = forever); throws `what` naming the field when it is not one. */
export function keepAliveMs(value: string | number, what = "keep_alive"): number {
  let ms: number | undefined;
  if (typeof value === "number") ms = Number.isFinite(value) ? value * 1000 : undefined;
  else if (/^\s*-?\d+\s*$/.test(value)) ms = Number(value) * 1000;
  else ms = parseDuration(value);
  if (ms === undefined) {
    throw new RequestError(
      "INVALID_REQUEST",
      `Invalid ${what} ${JSON.stringify(value)}: expected a duration such as "5m", "1h30m" or "300ms", a number of seconds, a negative value (keep loaded) or 0 (unload).`,
      what,
      "invalid_value",
    );
  }
  return ms < 0 ? Infinity : ms;
}

/** The server's default: WICK_KEEP_ALIVE, else OLLAMA_KEEP_ALIVE, else five minutes. */
export function defaultKeepAliveMs(env: NodeJS.ProcessEnv = process.env): number {
  for (const name of ["WICK_KEEP_ALIVE", "OLLAMA_KEEP_ALIVE"]) {
    const raw = env[name];
    if (raw !== undefined && raw.trim() !== "") return keepAliveMs(raw, name);
  }
  return DEFAULT_KEEP_ALIVE_MS;
}
