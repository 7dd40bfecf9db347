/**
 * Connection limits (issue #18): a client that trickles its headers or its body one byte a
 * second (slowloris) has its socket closed within --timeout while another client is served,
 * and connections beyond --max-connections are answered 503 with Retry-After, in the API's
 * own error shape, and closed. The server is the one `wick serve` builds (createHttpServer).
 */
import test from "ava";
import type { AddressInfo } from "node:net";
import { connect, type Socket } from "node:net";
import type { Server } from "node:http";
import { createApp } from "../ts/server/app.ts";
import { createHttpServer, type ServerLimits } from "../ts/server/limits.ts";

async function listen(limits: Partial<ServerLimits>): Promise<{ server: Server; port: number; url: string; close: () => Promise<void> }> {
  const server = createHttpServer(createApp({}), limits);
  server.listen(0, "127.0.0.1");
  await new Promise((r) => server.once("listening", r));
  const { port } = server.address() as AddressInfo;
  return {
    server,
    port,
    url: `http://127.0.0.1:${port}`,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

interface RawClient {
  socket: Socket;
  /** Resolves with the ms from connect to close, and what the server sent. */
  closed: Promise<{ ms: number; text: string }>;
  text: () => string;
}

function rawClient(port: number): RawClient {
  const start = performance.now();
  const socket = connect(port, "127.0.0.1");
  let text = "";
  socket.setEncoding("utf8").on("data", (d: string) => (text += d));
  socket.on("error", () => {});
  const closed = new Promise<{ ms: number; text: string }>((resolve) => socket.once("close", () => resolve({ ms: performance.now() - start, text })));
  return { socket, closed, text: () => text };
}

/** Writes `data` one byte a second until the socket closes. */
function trickle(socket: Socket, data: string): void {
  let i = 0;
  const timer = setInterval(() => {
    if (socket.destroyed || i >= data.length) return clearInterval(timer);
    socket.write(data[i++]);
  }, 1_000);
  socket.once("close", () => clearInterval(timer));
}

const TIMEOUT_MS = 2_000;
/** Node checks request timeouts on a timer (a quarter of the timeout here, at most 1 s), and the machine is shared: slack. */
const BOUND_MS = TIMEOUT_MS + 3_000;

test("slowloris: headers trickled one byte a second are cut off within --timeout while another client is served", async (t) => {
  const s = await listen({ requestTimeoutMs: TIMEOUT_MS });
  try {
    const slow = rawClient(s.port);
    trickle(slow.socket, "GET /health HTTP/1.1\r\nHost: localhost\r\nX-Padding: " + "a".repeat(100) + "\r\n\r\n");
    // Meanwhile another client gets its answer at once.
    const res = await fetch(`${s.url}/health`);
    t.is(res.status, 200);
    const { ms, text } = await slow.closed;
    t.true(ms < BOUND_MS, `closed after ${Math.round(ms)} ms`);
    t.true(ms >= TIMEOUT_MS - 100, `not before the timeout (${Math.round(ms)} ms)`);
    t.regex(text, /^HTTP\/1\.1 408/, "Node answers 408 Request Timeout");
    t.log(`slow headers: closed after ${Math.round(ms)} ms (timeout ${TIMEOUT_MS} ms)`);
  } finally {
    await s.close();
  }
});

test("a connection that never sends a byte is closed within --timeout", async (t) => {
  const s = await listen({ requestTimeoutMs: TIMEOUT_MS });
  try {
    const { ms } = await rawClient(s.port).closed;
    t.true(ms < BOUND_MS, `closed after ${Math.round(ms)} ms`);
  } finally {
    await s.close();
  }
});

test("slow body: a body trickled one byte a second is cut off within --timeout", async (t) => {
  const s = await listen({ requestTimeoutMs: TIMEOUT_MS });
  try {
    const slow = rawClient(s.port);
    const body = JSON.stringify({ model: "m", messages: [{ role: "user", content: "x".repeat(200) }] });
    slow.socket.write(`POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n`);
    trickle(slow.socket, body);
    const { ms } = await slow.closed;
    t.true(ms < BOUND_MS, `closed after ${Math.round(ms)} ms`);
    t.log(`slow body: closed after ${Math.round(ms)} ms (timeout ${TIMEOUT_MS} ms)`);
  } finally {
    await s.close();
  }
});

test("--max-connections: a connection beyond the cap is answered 503 with Retry-After in the API's shape and closed; room frees when one closes", async (t) => {
  const s = await listen({ maxConnections: 2 });
  try {
    const held = [rawClient(s.port), rawClient(s.port)];
    await Promise.all(held.map((c) => new Promise((r) => c.socket.once("connect", r))));
    // Each held connection is served as usual.
    held[0].socket.write("GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
    await waitUntil(() => held[0].text().includes("\r\n\r\n"));
    t.regex(held[0].text(), /^HTTP\/1\.1 200/);

    const openai = await fetch(`${s.url}/v1/models`);
    t.is(openai.status, 503);
    t.is(openai.headers.get("retry-after"), "1");
    t.is(openai.headers.get("connection"), "close");
    const body = (await openai.json()) as { error: { code: string; type: string; message: string } };
    t.is(body.error.code, "too_many_connections");
    t.is(body.error.type, "server_error");

    const ollama = await fetch(`${s.url}/api/tags`);
    t.is(ollama.status, 503);
    t.deepEqual(Object.keys((await ollama.json()) as object), ["error"], "Ollama's {error} shape under /api");

    held[1].socket.destroy();
    await held[1].closed;
    // The server sees the close when its event loop gets to it: poll rather than sleep a fixed time.
    let after = await fetch(`${s.url}/v1/models`);
    for (let i = 0; i < 100 && after.status !== 200; i++) {
      await new Promise((r) => setTimeout(r, 50));
      after = await fetch(`${s.url}/v1/models`);
    }
    t.is(after.status, 200, "a slot freed by a closed connection is used again");
    held[0].socket.destroy();
  } finally {
    await s.close();
  }
});

async function waitUntil(check: () => boolean, ms = 5_000): Promise<void> {
  const end = Date.now() + ms;
  while (!check() && Date.now() < end) await new Promise((r) => setTimeout(r, 10));
}
