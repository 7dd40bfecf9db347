/**
 * Test images made here: a deterministic colour pattern (the same as crates/wick-core/tests/
 * vision.rs makes), written as PNG with node's zlib (filter 0, 8-bit RGB), so tests need no
 * image files and llama.cpp's decoder and sharp read the very same pixels; and a few broken
 * files for the bad-input tables.
 */
import { deflateSync } from "node:zlib";

export function pattern(w: number, h: number, seed: number): Buffer {
  const out = Buffer.alloc(w * h * 3);
  let i = 0;
  for (let y = 0; y < h; y++) {
    for (let x = 0; x < w; x++) {
      out[i++] = (x * 7 + y * 3 + seed * 40) % 256;
      out[i++] = (Math.floor((x * y) / 7) + seed) % 256;
      out[i++] = (((255 + y - 2 * x) % 256) + 256) % 256;
    }
  }
  return out;
}

const CRC_TABLE = Array.from({ length: 256 }, (_, n) => {
  let c = n;
  for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
  return c >>> 0;
});

function crc32(buf: Buffer): number {
  let c = 0xffffffff;
  for (const b of buf) c = CRC_TABLE[(c ^ b) & 0xff] ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}

function chunk(type: string, data: Buffer): Buffer {
  const len = Buffer.alloc(4);
  len.writeUInt32BE(data.length);
  const body = Buffer.concat([Buffer.from(type, "latin1"), data]);
  const crc = Buffer.alloc(4);
  crc.writeUInt32BE(crc32(body));
  return Buffer.concat([len, body, crc]);
}

/** An 8-bit RGB PNG of `rgb` (w·h·3 bytes); `idat` replaces the pixel data (broken files). */
export function png(w: number, h: number, rgb: Buffer, idat?: Buffer): Buffer {
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(w, 0);
  ihdr.writeUInt32BE(h, 4);
  ihdr.set([8, 2, 0, 0, 0], 8);
  let data = idat;
  if (!data) {
    const rows = [];
    for (let y = 0; y < h; y++) rows.push(Buffer.from([0]), rgb.subarray(y * w * 3, (y + 1) * w * 3));
    data = deflateSync(Buffer.concat(rows));
  }
  return Buffer.concat([Buffer.from([137, 80, 78, 71, 13, 10, 26, 10]), chunk("IHDR", ihdr), chunk("IDAT", data), chunk("IEND", Buffer.alloc(0))]);
}

export interface TestImage {
  width: number;
  height: number;
  rgb: Buffer;
  png: Buffer;
  dataUri: string;
}

export function testImage(width: number, height: number, seed: number): TestImage {
  const rgb = pattern(width, height, seed);
  const file = png(width, height, rgb);
  return { width, height, rgb, png: file, dataUri: `data:image/png;base64,${file.toString("base64")}` };
}

/** A PNG whose header says 10000×10000 (100 megapixels) and whose data is a few bytes. */
export function hugePngHeader(): Buffer {
  return png(10000, 10000, Buffer.alloc(0), deflateSync(Buffer.alloc(16)));
}
