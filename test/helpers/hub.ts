/**
 * A loopback model hub: a real node:http server on 127.0.0.1 that answers the Hugging Face
 * routes the hub client uses, with the hub's shapes:
 *
 *   GET /api/models/{org}/{repo}/tree/main[?recursive=true][&cursor=N]  tree entries, Link-paginated
 *   GET /api/models/{org}/{repo}?blobs=true                              model info with siblings
 *   GET /{org}/{repo}/resolve/main/{path}                                302 to /cdn/{sha256} (as the CDN redirect)
 *   GET /cdn/{sha256}                                                    the bytes, with Range (206/416)
 *
 * It counts the body bytes it serves and the requests it sees (with their headers), and
 * injects faults once each: drop the connection after N bytes, serve corrupted bytes, answer
 * 500. Also here: the real GGUF assets it serves, and a tiny synthetic GGUF writer.
 */
import { createHash } from "node:crypto";
import { createReadStream, existsSync, readdirSync, statSync } from "node:fs";
import { readFile } from "node:fs/promises";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { Readable } from "node:stream";
import path from "node:path";
import { fixturesDir, repoRoot, type Asset } from "./assets.ts";

export interface HubFileSpec {
  /** Path in the repo. */
  path: string;
  /** A file on disk, or the bytes themselves. */
  source: string | Buffer;
  /** Listed without `lfs` (a small git file, as config.json is on the hub). */
  notLfs?: boolean;
}

interface ServedFile {
  path: string;
  source: string | Buffer;
  size: number;
  sha256: string;
  notLfs: boolean;
}

export interface Faults {
  /** Drop the connection after this many body bytes of the next download of `path`. */
  dropOnce?: { path: string; afterBytes: number };
  /** Flip a byte in what is served for `path` (every time, or once). */
  corrupt?: { path: string; once?: boolean };
  /** Answer 500 once to the next request whose URL contains `match`. */
  fail500Once?: { match: string };
  /** 401 unless `Authorization: Bearer <token>`. */
  requireToken?: string;
  /** Entries per tree page (Link rel="next" paginates). */
  pageSize?: number;
}

export interface SeenRequest {
  method: string;
  url: string;
  headers: http.IncomingHttpHeaders;
}

export interface LoopbackHub {
  url: string;
  /** Body bytes served by /cdn, in total and per sha256. */
  bytesServed: () => number;
  bytesServedFor: (sha256: string) => number;
  requests: SeenRequest[];
  faults: Faults;
  addRepo(repo: string, files: HubFileSpec[]): Promise<ServedFile[]>;
  close(): Promise<void>;
}

export async function startHub(): Promise<LoopbackHub> {
  const repos = new Map<string, ServedFile[]>();
  const bySha = new Map<string, ServedFile>();
  const served = new Map<string, number>();
  const requests: SeenRequest[] = [];
  const faults: Faults = {};

  const server = http.createServer((req, res) => {
    requests.push({ method: req.method ?? "GET", url: req.url ?? "", headers: req.headers });
    const url = new URL(req.url ?? "/", "http://x");
    const send = (status: number, body: unknown, headers: Record<string, string> = {}) => {
      res.writeHead(status, { "content-type": "application/json", ...headers });
      res.end(typeof body === "string" ? body : JSON.stringify(body));
    };
    if (faults.fail500Once && req.url?.includes(faults.fail500Once.match)) {
      faults.fail500Once = undefined;
      return send(500, { error: "injected failure" });
    }
    if (faults.requireToken && req.headers.authorization !== `Bearer ${faults.requireToken}` && !url.pathname.startsWith("/cdn/")) {
      return send(401, { error: "Invalid credentials in Authorization header" });
    }
    let m: RegExpExecArray | null;
    if ((m = /^\/api\/models\/([^/]+\/[^/]+)\/tree\/main\/?$/.exec(url.pathname))) {
      const files = repos.get(m[1]);
      if (!files) return send(404, { error: "Repository not found" });
      const entries = treeEntries(files, url.searchParams.has("recursive"));
      const start = Number(url.searchParams.get("cursor") ?? 0);
      const size = faults.pageSize ?? entries.length;
      const page = entries.slice(start, start + size);
      const headers: Record<string, string> = {};
      if (start + size < entries.length) {
        headers.link = `<${url.pathname}?recursive=true&cursor=${start + size}>; rel="next"`;
      }
      return send(200, page, headers);
    }
    if ((m = /^\/api\/models\/([^/]+\/[^/]+)\/?$/.exec(url.pathname))) {
      const files = repos.get(m[1]);
      if (!files) return send(404, { error: "Repository not found" });
      return send(200, {
        id: m[1],
        modelId: m[1],
        siblings: files.map((f) => ({
          rfilename: f.path,
          size: f.size,
          blobId: gitOid(f),
          ...(f.notLfs ? {} : { lfs: { sha256: f.sha256, size: f.size, pointerSize: 135 } }),
        })),
      });
    }
    if ((m = /^\/([^/]+\/[^/]+)\/resolve\/main\/(.+)$/.exec(url.pathname))) {
      const file = repos.get(m[1])?.find((f) => f.path === decodeURIComponent(m![2]));
      if (!file) return send(404, { error: "Entry not found" });
      res.writeHead(302, { location: `/cdn/${file.sha256}?signed=1`, "x-linked-etag": `"${file.sha256}"`, "x-linked-size": String(file.size) });
      return res.end();
    }
    if ((m = /^\/cdn\/([0-9a-f]{64})$/.exec(url.pathname))) {
      const file = bySha.get(m[1]);
      if (!file) return send(404, { error: "not found" });
      return serveBytes(file, req, res);
    }
    send(404, { error: "no route" });
  });

  function serveBytes(file: ServedFile, req: http.IncomingMessage, res: http.ServerResponse) {
    let start = 0;
    let end = file.size - 1;
    const range = /^bytes=(\d+)-(\d*)$/.exec(req.headers.range ?? "");
    if (req.headers.range && !range) return res.writeHead(400).end();
    if (range) {
      start = Number(range[1]);
      if (range[2]) end = Math.min(end, Number(range[2]));
      if (start >= file.size) {
        res.writeHead(416, { "content-range": `bytes */${file.size}` });
        return res.end();
      }
      res.writeHead(206, { "content-length": String(end - start + 1), "content-range": `bytes ${start}-${end}/${file.size}`, "accept-ranges": "bytes" });
    } else {
      res.writeHead(200, { "content-length": String(file.size), "accept-ranges": "bytes" });
    }
    const drop = faults.dropOnce?.path === file.path ? faults.dropOnce : undefined;
    if (drop) faults.dropOnce = undefined;
    const corrupt = faults.corrupt?.path === file.path ? faults.corrupt : undefined;
    if (corrupt?.once) faults.corrupt = undefined;
    let sent = 0;
    let flipped = false;
    const stream = typeof file.source === "string" ? createReadStream(file.source, { start, end }) : bufferStream(file.source.subarray(start, end + 1));
    stream.on("data", (chunk: Buffer | string) => {
      let buf = Buffer.from(chunk);
      if (corrupt && !flipped) {
        buf = Buffer.from(buf);
        buf[buf.length >> 1] ^= 0xff;
        flipped = true;
      }
      if (drop && sent + buf.length >= drop.afterBytes) {
        const part = buf.subarray(0, Math.max(0, drop.afterBytes - sent));
        count(file.sha256, part.length);
        stream.destroy();
        res.write(part, () => res.socket?.destroy());
        return;
      }
      sent += buf.length;
      count(file.sha256, buf.length);
      if (!res.write(buf)) {
        stream.pause();
        res.once("drain", () => stream.resume());
      }
    });
    stream.on("end", () => res.end());
    res.on("close", () => stream.destroy());
  }

  const count = (sha: string, n: number) => served.set(sha, (served.get(sha) ?? 0) + n);

  server.listen(0, "127.0.0.1");
  await new Promise((r) => server.once("listening", r));
  const { port } = server.address() as AddressInfo;

  return {
    url: `http://127.0.0.1:${port}`,
    bytesServed: () => [...served.values()].reduce((a, b) => a + b, 0),
    bytesServedFor: (sha) => served.get(sha) ?? 0,
    requests,
    faults,
    async addRepo(repo, specs) {
      const files: ServedFile[] = [];
      for (const s of specs) {
        const bytes = typeof s.source === "string" ? await readFile(s.source) : s.source;
        const f: ServedFile = { path: s.path, source: s.source, size: bytes.length, sha256: createHash("sha256").update(bytes).digest("hex"), notLfs: !!s.notLfs };
        files.push(f);
        bySha.set(f.sha256, f);
      }
      repos.set(repo, files);
      return files;
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

/** The hub's tree entries: files (LFS ones with `lfs.oid` = sha256) and, when recursive, their folders. */
function treeEntries(files: ServedFile[], recursive: boolean) {
  const dirs = new Set<string>();
  const entries: unknown[] = [];
  for (const f of files) {
    const parts = f.path.split("/");
    if (!recursive && parts.length > 1) {
      dirs.add(parts[0]);
      continue;
    }
    for (let i = 1; i < parts.length; i++) dirs.add(parts.slice(0, i).join("/"));
    entries.push({ type: "file", oid: gitOid(f), size: f.size, path: f.path, ...(f.notLfs ? {} : { lfs: { oid: f.sha256, size: f.size, pointerSize: 135 } }) });
  }
  return [...[...dirs].map((d) => ({ type: "directory", oid: createHash("sha1").update(d).digest("hex"), size: 0, path: d })), ...entries];
}

const gitOid = (f: ServedFile) => createHash("sha1").update(f.sha256).digest("hex");

function bufferStream(buf: Buffer) {
  // 64 KiB chunks, so drops and corruption land mid-stream as they do with a file.
  const chunks: Buffer[] = [];
  for (let i = 0; i < buf.length; i += 65536) chunks.push(buf.subarray(i, i + 65536));
  return Readable.from(chunks, { objectMode: false });
}

/** The real GGUF files the hub serves: the smallest few under .cache/fixtures and .cache/models (bad-* fixtures excluded). */
export function realGgufs(count: number): Asset[] {
  const dirs = [fixturesDir, process.env.WICK_MODEL_CACHE ?? path.join(repoRoot, ".cache/models")];
  const files = dirs
    .filter((d) => existsSync(d))
    .flatMap((d) =>
      readdirSync(d)
        // Models only: the LoRA adapters there are GGUFs too, but not models.
        .filter((n) => n.endsWith(".gguf") && !n.startsWith("bad-") && !n.startsWith("lora-"))
        .map((n) => path.join(d, n)),
    )
    .map((p) => ({ p, size: statSync(p).size }))
    .sort((a, b) => a.size - b.size);
  return Array.from({ length: count }, (_, i) =>
    files[i] ? { path: files[i].p } : { missing: `a real GGUF file #${i + 1} under .cache/fixtures or .cache/models (run npm test, or npm run fixtures)` },
  );
}

/**
 * A tiny, valid GGUF v3: the given architecture and file type, a string-array key (as the
 * vocabulary is), two tensors (2×3 and 4 elements, 10 parameters) and `padding` data bytes.
 */
export function tinyGguf(opts: { architecture?: string; fileType?: number; padding?: number; salt?: string } = {}): Buffer {
  const parts: Buffer[] = [];
  const u32 = (n: number) => {
    const b = Buffer.alloc(4);
    b.writeUInt32LE(n);
    parts.push(b);
  };
  const u64 = (n: number) => {
    const b = Buffer.alloc(8);
    b.writeBigUInt64LE(BigInt(n));
    parts.push(b);
  };
  const str = (s: string) => {
    const b = Buffer.from(s, "utf8");
    u64(b.length);
    parts.push(b);
  };
  parts.push(Buffer.from("GGUF"));
  u32(3);
  u64(2); // tensors
  u64(4); // kv pairs
  str("general.architecture");
  u32(8);
  str(opts.architecture ?? "llama");
  str("general.file_type");
  u32(4);
  u32(opts.fileType ?? 15);
  str("tokenizer.ggml.tokens");
  u32(9);
  u32(8);
  u64(3);
  str("a");
  str("b");
  str(opts.salt ?? "c");
  str("tokenizer.ggml.scores");
  u32(9);
  u32(6);
  u64(3);
  parts.push(Buffer.alloc(12));
  str("w1");
  u32(2);
  u64(2);
  u64(3);
  u32(0);
  u64(0);
  str("w2");
  u32(1);
  u64(4);
  u32(0);
  u64(32);
  parts.push(Buffer.alloc(opts.padding ?? 64, 7));
  return Buffer.concat(parts);
}
