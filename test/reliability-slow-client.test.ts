/**
 * Slow and stalled clients (issue #18, overload): a client that sends a streaming request and
 * never reads must not keep its sequence generating into memory until `max_tokens`. The
 * response holds a bounded buffer; once it stays full past the stall limit the request is
 * cancelled (socket closed, engine sequence cancelled, KV freed, a warning logged), while
 * another client is served meanwhile. Raw `net` clients, as a stalled browser or script is.
 */
import { connect, type Socket } from "node:net";
import { Writable } from "node:stream";
import { pino } from "pino";
import { fixture, needs } from "./helpers/assets.ts";
import { loadModel, openaiClient, startServer, waitFor, type LoadedModel, type RunningServer } from "./helpers/server.ts";
import { STREAM_BUFFER_BYTES } from "../ts/server/stream-body.ts";

const { path: tiny, serial } = needs(fixture("tiny-llama-q8_0.gguf"));

const STALL_MS = 1_500;
/** Far more than the stall lets through: a sequence that ran to the end would take tens of seconds. */
const MAX_TOKENS = 30_000;

/** JSON log lines of the server, kept in memory. */
function captureLog() {
  const lines: Record<string, unknown>[] = [];
  const sink = new Writable({
    write(chunk, _enc, cb) {
      for (const l of String(chunk).split("\n").filter(Boolean)) lines.push(JSON.parse(l));
      cb();
    },
  });
  return { log: pino({ level: "info" }, sink), lines };
}

/** Sends a raw HTTP request and never reads the answer (the socket is paused before any byte arrives). */
function stalledClient(url: string, path: string, body: unknown): { socket: Socket; closed: Promise<void>; received: () => Buffer } {
  const { hostname, port } = new URL(url);
  const socket = connect(Number(port), hostname);
  socket.pause();
  const json = JSON.stringify(body);
  socket.write(`POST ${path} HTTP/1.1\r\nHost: ${hostname}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(json)}\r\n\r\n${json}`);
  const chunks: Buffer[] = [];
  const closed = new Promise<void>((resolve) => socket.once("close", () => resolve()));
  socket.on("data", (d: Buffer) => chunks.push(d));
  socket.on("error", () => {}); // the server resets it
  return { socket, closed, received: () => Buffer.concat(chunks) };
}

/** A gauge's value on a Prometheus text page. */
function metric(text: string, name: string): number {
  const line = text.split("\n").find((l) => l.startsWith(`${name}{`) || l.startsWith(`${name} `));
  if (!line) throw new Error(`no ${name} in /metrics`);
  return Number(line.slice(line.lastIndexOf(" ") + 1));
}

async function withServer(fn: (m: LoadedModel, server: RunningServer, logs: Record<string, unknown>[]) => Promise<void>) {
  const model = await loadModel(tiny!, { contextSize: 32_768, maxSequences: 2 });
  const { log, lines } = captureLog();
  const server = await startServer({ registry: model.registry, logger: log, streams: { stallMs: STALL_MS } });
  try {
    await fn(model, server, lines);
  } finally {
    await server.close();
    await model.engine.unload();
  }
}

const STREAMS = [
  {
    api: "SSE /v1/chat/completions",
    path: "/v1/chat/completions",
    // top_logprobs makes each frame ~2 KB, so the socket's kernel buffers fill after a few hundred tokens.
    body: { model: "m", stream: true, max_tokens: MAX_TOKENS, ignore_eos: true, logprobs: true, top_logprobs: 20, messages: [{ role: "user", content: "Tell me a long story." }] },
    done: "data: [DONE]",
  },
  {
    api: "NDJSON /api/generate",
    path: "/api/generate",
    // Every chunk echoes the request's model name: a long one makes each line ~2 KB, as top_logprobs above.
    body: { model: "m".repeat(2000), prompt: "Tell me a long story.", raw: true, options: { num_predict: MAX_TOKENS } },
    done: '"done":true',
  },
];

for (const s of STREAMS) {
  serial(`${s.api}: a client that never reads is cancelled after the stall limit, its KV freed, and another client is served meanwhile`, async (t) => {
    await withServer(async ({ engine }, server, logs) => {
      const rssBefore = process.memoryUsage().rss;
      const stalled = stalledClient(server.url, s.path, s.body);
      t.true((await waitFor(() => engine.metrics().running === 1, 30_000)) >= 0, "the stalled request runs");

      // Another client, while the first is stalled: served in full.
      const reply = await openaiClient(server.url).chat.completions.create({ model: "m", max_tokens: 8, messages: [{ role: "user", content: "Hi" }] });
      t.is(reply.choices[0].finish_reason, "length");

      // Two paths may stop the stalled sequence, and either may come first: the engine's bound on
      // unread events (a fast machine fills it within the stall limit) or the stream's stall
      // timer. The timer fires whichever won, since nothing drains the full buffer, so the test
      // waits for each guarantee itself: the warning, then no sequence left running.
      const stallWarning = () => logs.find((l) => l.msg === "client stopped reading the stream: request cancelled");
      t.true((await waitFor(() => stallWarning() !== undefined, 60_000, 20)) >= 0, "the cancel is logged");
      // The server cancels the stalled sequence (a paused socket sees its close only once it reads again).
      t.true((await waitFor(() => engine.metrics().running === 0, 60_000, 20)) >= 0, "no sequence left running");
      const page = await (await fetch(`${server.url}/metrics`)).text();
      t.is(metric(page, "wick:num_requests_running"), 0);
      t.is(metric(page, "wick:kv_blocks_used"), 0, "every KV block returned");
      const rssGrowthMb = (process.memoryUsage().rss - rssBefore) / 2 ** 20;

      const warn = stallWarning();
      t.is(warn!.stallMs, STALL_MS);
      // Frames waiting in the process: the stream's buffer plus one frame and the socket's own high-water mark.
      t.true((warn!.buffered as number) <= STREAM_BUFFER_BYTES + 64 * 1024, `buffered ${warn!.buffered as number} bytes`);

      // What reached the client's kernel buffers: a prefix of the stream, never its end.
      stalled.socket.resume();
      await stalled.closed;
      const text = stalled.received().toString("utf8");
      t.true(text.startsWith("HTTP/1.1 200"), text.slice(0, 80));
      t.false(text.includes(s.done), "the stream did not run to its end");
      const frames = text.split("\n").filter((l) => l.startsWith("data: {") || l.startsWith('{"model"')).length;
      t.true(frames < MAX_TOKENS / 2, `${frames} frames reached the client`);
      t.log(
        `${s.api}: ${frames} frames (${(text.length / 1024).toFixed(0)} KiB) reached the stalled client before the cancel; ${warn!.buffered as number} bytes held in the server; RSS growth ${rssGrowthMb.toFixed(1)} MiB`,
      );

      // The server keeps serving after the cancel.
      const after = await openaiClient(server.url).chat.completions.create({ model: "m", max_tokens: 4, messages: [{ role: "user", content: "Hi" }] });
      t.true(after.usage!.completion_tokens > 0);
    });
  });
}
