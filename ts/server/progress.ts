/**
 * Progress of a long store operation (/api/create, /api/pull) in Ollama's shapes: NDJSON
 * `{status, digest?, total?, completed?}` lines ending `{"status":"success"}`, or with
 * `"stream": false` one `{"status":"success"}` when it is done.
 *
 * The stream is committed (status 200 sent) only at the first line that means real work
 * started — a download or a copy, not "pulling manifest" — so a failure found before then (a
 * repo without GGUF files, an unknown quant, a missing FROM) is an ordinary error response with
 * its own status. A failure after that arrives in-band as `{"error":"…"}`, as in Ollama.
 */
import type { Context } from "koa";
import type { Logger } from "pino";
import type { Progress, Run } from "../service/store.ts";
import { NDJSON, sendStream } from "./stream.ts";

/** Lines that come before anything can fail slowly: they do not commit the stream. */
const PREAMBLE = new Set(["pulling manifest", "gathering model components"]);

export async function sendProgress(ctx: Context, run: Run, stream: boolean, log: Logger): Promise<void> {
  if (!stream) {
    await run(() => {});
    ctx.body = { status: "success" };
    return;
  }
  const lines: Progress[] = [];
  let wake: () => void = () => {};
  let finished = false;
  let failure: { err: unknown } | undefined;
  const committed = new Promise<void>((resolve) => {
    const emit = (p: Progress) => {
      lines.push(p);
      if (!PREAMBLE.has(p.status)) resolve();
      wake();
    };
    run(emit).then(
      () => {
        finished = true;
        resolve();
        wake();
      },
      (err: unknown) => {
        failure = { err };
        finished = true;
        resolve();
        wake();
      },
    );
  });
  await committed;
  // Failed before any real work: answer with the error's own status (the error middleware).
  if (failure && !lines.some((l) => !PREAMBLE.has(l.status))) throw failure.err;

  async function* drain(): AsyncGenerator<Progress> {
    for (;;) {
      while (lines.length) yield lines.shift()!;
      if (finished) {
        if (failure) throw failure.err;
        return;
      }
      await new Promise<void>((resolve) => (wake = resolve));
    }
  }
  sendStream(ctx, drain(), NDJSON, log);
}
