/**
 * An image reference → its bytes: a `data:` URI (base64 or percent-encoded), or an http(s)
 * URL fetched with a deadline, a byte cap, an image content type, a bounded number of
 * redirects and — with `allowPrivate: false` (`--no-private-image-urls`) — no loopback,
 * private, link-local or otherwise non-public target. The address check runs on what DNS
 * returns, inside the connection's own lookup, so a name cannot resolve to a public address
 * for the check and a private one for the connection. Every other scheme (`file:`, `ftp:`…)
 * is refused.
 */
import dns from "node:dns";
import http from "node:http";
import https from "node:https";
import net from "node:net";
import { RequestError } from "../errors.ts";

export interface ImageFetchOptions {
  /** Whole fetch, redirects included. */
  timeoutMs: number;
  /** Largest image in bytes (after base64 decoding for data URIs). */
  maxBytes: number;
  maxRedirects: number;
  /** Allow loopback / private / link-local targets (default true; false = `--no-private-image-urls`). */
  allowPrivate: boolean;
}

export const DEFAULT_FETCH: ImageFetchOptions = { timeoutMs: 10_000, maxBytes: 20 * 1024 * 1024, maxRedirects: 3, allowPrivate: true };

const fail = (message: string, param: string, detail: string) => new RequestError("INVALID_REQUEST", message, param, detail);

export async function imageBytes(ref: string, opts: ImageFetchOptions, param: string): Promise<Buffer> {
  const scheme = /^([a-zA-Z][a-zA-Z0-9+.-]*):/.exec(ref)?.[1]?.toLowerCase();
  if (scheme === "data") return dataUri(ref, opts, param);
  if (scheme === "http" || scheme === "https") return fetchUrl(ref, opts, param);
  throw fail(`Images must be given as http(s) URLs or data URIs${scheme ? `; '${scheme}:' URLs are not allowed` : ""}.`, param, "invalid_image_url");
}

function dataUri(ref: string, opts: ImageFetchOptions, param: string): Buffer {
  const comma = ref.indexOf(",");
  if (comma < 0) throw fail("The data URI has no ',' before its data.", param, "invalid_image_url");
  const head = ref.slice(5, comma);
  const body = ref.slice(comma + 1);
  // Base64 grows by 4/3: refuse before decoding what is certainly too large.
  if (body.length > (opts.maxBytes * 4) / 3 + 4) throw tooBig(opts, param);
  const bytes = /;base64$/i.test(head) ? Buffer.from(body, "base64") : Buffer.from(decodeURIComponent(body), "latin1");
  if (bytes.length > opts.maxBytes) throw tooBig(opts, param);
  if (bytes.length === 0) throw fail("The data URI holds no image data.", param, "invalid_image");
  return bytes;
}

const tooBig = (opts: ImageFetchOptions, param: string) => fail(`The image is larger than ${opts.maxBytes} bytes.`, param, "image_too_large");

/** Whether an address is not a public unicast one (loopback, private, link-local, CGNAT, multicast, unspecified…). */
export function isPrivateAddress(ip: string): boolean {
  if (net.isIPv4(ip)) {
    const [a, b] = ip.split(".").map(Number) as [number, number];
    return (
      a === 0 ||
      a === 10 ||
      a === 127 ||
      a >= 224 ||
      (a === 169 && b === 254) ||
      (a === 172 && b >= 16 && b <= 31) ||
      (a === 192 && b === 168) ||
      (a === 100 && b >= 64 && b <= 127) ||
      (a === 198 && (b === 18 || b === 19))
    );
  }
  const v6 = ip.toLowerCase();
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/.exec(v6);
  if (mapped) return isPrivateAddress(mapped[1]);
  return v6 === "::" || v6 === "::1" || /^f[cd]/.test(v6) || /^fe[89ab]/.test(v6) || v6.startsWith("ff");
}

type LookupCb = (err: NodeJS.ErrnoException | null, address: string | dns.LookupAddress[], family?: number) => void;

/** dns.lookup, refusing non-public answers unless they are allowed. */
function guardedLookup(allowPrivate: boolean) {
  return (hostname: string, options: dns.LookupOptions, cb: LookupCb) => {
    dns.lookup(hostname, { ...options, all: true }, (err, addrs) => {
      if (err) return cb(err, "");
      const bad = addrs.find((a) => isPrivateAddress(a.address));
      if (bad && !allowPrivate) {
        const e = Object.assign(new Error(`${hostname} resolves to a non-public address (${bad.address})`), { code: "EPRIVATE" });
        return cb(e, "");
      }
      if (options.all) return cb(null, addrs);
      return cb(null, addrs[0].address, addrs[0].family);
    });
  };
}

async function fetchUrl(ref: string, opts: ImageFetchOptions, param: string): Promise<Buffer> {
  const deadline = Date.now() + opts.timeoutMs;
  let url = ref;
  for (let hop = 0; ; hop++) {
    const res = await get(url, opts, deadline, param);
    if (res.redirect) {
      if (hop >= opts.maxRedirects) throw fail(`The image URL redirects more than ${opts.maxRedirects} times.`, param, "image_fetch_failed");
      url = new URL(res.redirect, url).toString();
      if (!/^https?:/i.test(url)) throw fail("The image URL redirects to a scheme other than http(s).", param, "invalid_image_url");
      continue;
    }
    return res.body!;
  }
}

interface Got {
  redirect?: string;
  body?: Buffer;
}

function get(url: string, opts: ImageFetchOptions, deadline: number, param: string): Promise<Got> {
  const u = new URL(url);
  const host = u.hostname.replace(/^\[|\]$/g, "");
  if (net.isIP(host) && !opts.allowPrivate && isPrivateAddress(host)) {
    return Promise.reject(fail(`Image URLs may not point at a non-public address (${host}).`, param, "image_url_not_allowed"));
  }
  const lib = u.protocol === "https:" ? https : http;
  return new Promise<Got>((resolve, reject) => {
    const left = deadline - Date.now();
    if (left <= 0) return reject(timeout(opts, param));
    const req = lib.get(u, { lookup: guardedLookup(opts.allowPrivate), headers: { accept: "image/*" } }, (res) => {
      const status = res.statusCode ?? 0;
      if (status >= 300 && status < 400 && res.headers.location) {
        res.resume();
        return resolve({ redirect: res.headers.location });
      }
      if (status < 200 || status >= 300) {
        res.resume();
        return reject(fail(`Fetching the image failed: HTTP ${status}.`, param, "image_fetch_failed"));
      }
      const type = (res.headers["content-type"] ?? "").split(";")[0].trim().toLowerCase();
      if (!type.startsWith("image/") && type !== "application/octet-stream") {
        res.resume();
        return reject(fail(`The image URL answered with content type '${type || "none"}', not an image.`, param, "invalid_image"));
      }
      const declared = Number(res.headers["content-length"] ?? NaN);
      if (declared > opts.maxBytes) {
        res.destroy();
        return reject(tooBig(opts, param));
      }
      const parts: Buffer[] = [];
      let n = 0;
      res.on("data", (c: Buffer) => {
        n += c.length;
        if (n > opts.maxBytes) {
          res.destroy();
          reject(tooBig(opts, param));
        } else parts.push(c);
      });
      res.on("end", () => resolve({ body: Buffer.concat(parts) }));
      res.on("error", (e) => reject(fail(`Fetching the image failed: ${e.message}.`, param, "image_fetch_failed")));
    });
    const timer = setTimeout(() => {
      req.destroy();
      reject(timeout(opts, param));
    }, left);
    req.on("close", () => clearTimeout(timer));
    req.on("error", (e: NodeJS.ErrnoException) => {
      clearTimeout(timer);
      if (e.code === "EPRIVATE") reject(fail(`Image URLs may not point at non-public addresses: ${e.message}.`, param, "image_url_not_allowed"));
      else reject(fail(`Fetching the image failed: ${e.message}.`, param, "image_fetch_failed"));
    });
  });
}

const timeout = (opts: ImageFetchOptions, param: string) => fail(`Fetching the image took longer than ${opts.timeoutMs} ms.`, param, "image_fetch_timeout");
