/**
 * HEAD|POST /api/blobs/:digest (Ollama): whether the store has a blob (200 or 404), and an
 * upload streamed into the store (201, or 200 when it already had it). The body is raw bytes,
 * never JSON: app.ts skips the body parser for these paths, and the bytes go to disk as they
 * arrive, under a size limit (413).
 */
import type { IncomingMessage } from "node:http";
import type Router from "@koa/router";
import type { Context } from "koa";
import { hasBlob, receiveBlob } from "../../../service/blobs.ts";
import { requireStore } from "../../../service/store.ts";
import { HttpError } from "../../errors.ts";
import type { RouteDeps } from "../common.ts";

export const BLOB_PATH_PREFIX = "/api/blobs/";

export function nativeBlobRoutes(router: Router, { models }: RouteDeps, limitBytes: number): void {
  router.head("/api/blobs/:digest", async (ctx) => {
    const digest = String(ctx.params.digest);
    if (await hasBlob(requireStore(models), digest)) {
      ctx.status = 200;
      ctx.body = "";
    } else {
      ctx.status = 404;
      ctx.body = { error: `blob ${JSON.stringify(digest)} not found` };
    }
  });

  router.post("/api/blobs/:digest", async (ctx) => {
    try {
      const body = limited(ctx, limitBytes);
      ctx.status = (await receiveBlob(requireStore(models), String(ctx.params.digest), body)) === "created" ? 201 : 200;
      ctx.body = "";
    } catch (err) {
      // Whatever the client has not sent yet is not worth reading: close the connection after the answer.
      if (!ctx.req.readableEnded) ctx.set("Connection", "close");
      throw err;
    }
  });
}

/** The request body as it arrives; past `limit` bytes (said up front or counted) a 413. */
function limited(ctx: Context, limit: number): AsyncIterable<Uint8Array> {
  const declared = Number(ctx.get("content-length") || NaN);
  if (declared > limit) throw tooLarge(limit, declared);
  return count(ctx.req, limit);
}

async function* count(req: IncomingMessage, limit: number): AsyncGenerator<Uint8Array> {
  let bytes = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    bytes += chunk.byteLength;
    if (bytes > limit) throw tooLarge(limit);
    yield chunk;
  }
}

const tooLarge = (limit: number, size?: number) => new HttpError("BODY_TOO_LARGE", `The blob${size === undefined ? "" : ` of ${size} bytes`} is larger than this server's limit of ${limit} bytes`);
