/**
 * The server's HTTP API as the page uses it: same origin, the API key (if any) from
 * localStorage as a Bearer token, errors as the API's own message (OpenAI `{error:{message}}`,
 * Ollama `{error:"…"}`), SSE and NDJSON streams read frame by frame.
 */

const KEY_ITEM = "wick.apiKey";

export class ApiError extends Error {
  constructor(
    message: string,
    readonly status: number,
  ) {
    super(message);
  }
  /** 401: no key, or a wrong one. */
  get unauthorized(): boolean {
    return this.status === 401;
  }
}

export const apiKey = {
  get: (): string => localStorage.getItem(KEY_ITEM) ?? "",
  set: (k: string): void => (k ? localStorage.setItem(KEY_ITEM, k) : localStorage.removeItem(KEY_ITEM)),
};

function headers(json: boolean): Record<string, string> {
  const h: Record<string, string> = {};
  if (json) h["content-type"] = "application/json";
  const key = apiKey.get();
  if (key) h.authorization = `Bearer ${key}`;
  return h;
}

/** The message of an error body, whichever API shape it has. */
export function errorMessage(body: unknown): string | null {
  if (!body || typeof body !== "object") return null;
  const e = (body as { error?: unknown }).error;
  if (typeof e === "string") return e;
  if (e && typeof e === "object" && typeof (e as { message?: unknown }).message === "string") return (e as { message: string }).message;
  return null;
}

async function failure(res: Response): Promise<ApiError> {
  const text = await res.text().catch(() => "");
  let msg: string | null = null;
  try {
    msg = errorMessage(JSON.parse(text));
  } catch {
    msg = text.trim() || null;
  }
  if (res.status === 401) {
    const key = apiKey.get();
    msg = key ? `Wrong API key: the server refused it (${msg ?? "401"}).` : `This server needs an API key (${msg ?? "401"}).`;
  }
  return new ApiError(msg ?? `${res.status} ${res.statusText}`, res.status);
}

export async function request(method: string, path: string, body?: unknown, signal?: AbortSignal): Promise<Response> {
  let res: Response;
  try {
    res = await fetch(path, { method, headers: headers(body !== undefined), body: body === undefined ? undefined : JSON.stringify(body), signal });
  } catch (err) {
    if ((err as Error).name === "AbortError") throw err;
    throw new ApiError(`Cannot reach the server: ${(err as Error).message}`, 0);
  }
  if (!res.ok) throw await failure(res);
  return res;
}

export async function getJson<T>(path: string): Promise<T> {
  return (await (await request("GET", path)).json()) as T;
}

/** Yields each line of a streamed body (NDJSON, or SSE's `data:` lines). */
async function* lines(res: Response): AsyncGenerator<string> {
  const reader = res.body!.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += value;
    let nl: number;
    while ((nl = buf.indexOf("\n")) >= 0) {
      const line = buf.slice(0, nl).replace(/\r$/, "");
      buf = buf.slice(nl + 1);
      if (line) yield line;
    }
  }
  if (buf.trim()) yield buf;
}

/** The JSON payload of each SSE `data:` frame until `[DONE]`; an in-band error frame throws. */
export async function* sse(res: Response): AsyncGenerator<Record<string, unknown>> {
  for await (const line of lines(res)) {
    if (!line.startsWith("data:")) continue;
    const data = line.slice(5).trim();
    if (data === "[DONE]") return;
    const frame = JSON.parse(data) as Record<string, unknown>;
    const err = errorMessage(frame);
    if (err) throw new ApiError(err, 200);
    yield frame;
  }
}

/** Each NDJSON object of an Ollama stream; an in-band `{"error"}` line throws. */
export async function* ndjson(res: Response): AsyncGenerator<Record<string, unknown>> {
  for await (const line of lines(res)) {
    const obj = JSON.parse(line) as Record<string, unknown>;
    const err = errorMessage(obj);
    if (err) throw new ApiError(err, 200);
    yield obj;
  }
}

export interface TagModel {
  name: string;
  size: number;
  details?: { family?: string; parameter_size?: string; quantization_level?: string };
}
