/**
 * Just enough of a GGUF header (v2/v3) for the store: architecture, file type and parameter
 * count, which fill the manifest's config blob (/api/tags `details`) without the native
 * addon. Reads sequentially through a 1 MiB window; metadata arrays (the vocabulary) are
 * skipped, never kept.
 */
import { promises as fsp } from "node:fs";
import { StoreError } from "./errors.ts";

export interface GgufHeader {
  version: number;
  architecture: string;
  /** llama.cpp's file type name (Q4_K_M, F16, …), "unknown" when absent. */
  fileType: string;
  parameterCount: number;
  /** What the file holds (general.type): "model", or "adapter" (LoRA) and "projector"/"mmproj" (vision). */
  kind: string;
}

/**
 * llama.cpp's `llama_ftype` values → names (general.file_type). A second copy of the table the
 * engine owns (`file_type_name` in crates/wick-core/src/gguf/info.rs, what `wick show` and
 * `inspectModel` print) on purpose: the store reads headers without the native addon (pull,
 * create and list work, and are tested, where no addon is built or loadable), so it cannot ask
 * the binding. Change both together.
 */
const FILE_TYPES: Record<number, string> = {
  0: "F32",
  1: "F16",
  2: "Q4_0",
  3: "Q4_1",
  7: "Q8_0",
  8: "Q5_0",
  9: "Q5_1",
  10: "Q2_K",
  11: "Q3_K_S",
  12: "Q3_K_M",
  13: "Q3_K_L",
  14: "Q4_K_S",
  15: "Q4_K_M",
  16: "Q5_K_S",
  17: "Q5_K_M",
  18: "Q6_K",
  19: "IQ2_XXS",
  20: "IQ2_XS",
  21: "Q2_K_S",
  22: "IQ3_XS",
  23: "IQ3_XXS",
  24: "IQ1_S",
  25: "IQ4_NL",
  26: "IQ3_S",
  27: "IQ3_M",
  28: "IQ2_S",
  29: "IQ2_M",
  30: "IQ4_XS",
  31: "IQ1_M",
  32: "BF16",
  36: "TQ1_0",
  37: "TQ2_0",
  38: "MXFP4",
};

/** Byte sizes of the scalar metadata types (8 = string, 9 = array are variable). */
const SCALAR_SIZE: Record<number, number> = { 0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8 };

class Reader {
  private buf = Buffer.alloc(1 << 20);
  private pos = 0;
  private end = 0;
  private fileOffset = 0; // file offset of buf[end]

  constructor(
    private readonly fh: fsp.FileHandle,
    private readonly file: string,
  ) {}

  private async need(n: number): Promise<void> {
    if (this.end - this.pos >= n) return;
    if (n > this.buf.length) {
      const bigger = Buffer.alloc(n);
      this.buf.copy(bigger, 0, this.pos, this.end);
      this.buf = bigger;
    } else {
      this.buf.copy(this.buf, 0, this.pos, this.end);
    }
    this.end -= this.pos;
    this.pos = 0;
    while (this.end < n) {
      const { bytesRead } = await this.fh.read(this.buf, this.end, this.buf.length - this.end, this.fileOffset);
      if (bytesRead === 0) throw new StoreError("CORRUPT_MODEL", `${this.file} is truncated: its GGUF header ends early`);
      this.end += bytesRead;
      this.fileOffset += bytesRead;
    }
  }

  async skip(n: number): Promise<void> {
    const inBuf = Math.min(n, this.end - this.pos);
    this.pos += inBuf;
    if (n > inBuf) {
      this.fileOffset += n - inBuf;
      this.pos = this.end = 0;
    }
  }

  async u32(): Promise<number> {
    await this.need(4);
    const v = this.buf.readUInt32LE(this.pos);
    this.pos += 4;
    return v;
  }

  async u64(): Promise<number> {
    await this.need(8);
    const v = this.buf.readBigUInt64LE(this.pos);
    this.pos += 8;
    if (v > BigInt(Number.MAX_SAFE_INTEGER)) throw new StoreError("CORRUPT_MODEL", `${this.file} has an impossible length in its GGUF header`);
    return Number(v);
  }

  async str(): Promise<string> {
    const len = await this.u64();
    if (len > 64 << 20) throw new StoreError("CORRUPT_MODEL", `${this.file} has a ${len}-byte string in its GGUF header`);
    await this.need(len);
    const s = this.buf.toString("utf8", this.pos, this.pos + len);
    this.pos += len;
    return s;
  }

  /** Reads a scalar of `type` as a number or string; arrays are skipped (undefined). */
  async value(type: number): Promise<number | string | undefined> {
    if (type === 8) return this.str();
    if (type === 9) {
      const itemType = await this.u32();
      const count = await this.u64();
      if (itemType === 8 || itemType === 9) for (let i = 0; i < count; i++) await this.value(itemType);
      else if (SCALAR_SIZE[itemType]) await this.skip(count * SCALAR_SIZE[itemType]);
      else throw new StoreError("CORRUPT_MODEL", `${this.file} has an unknown GGUF metadata type ${itemType}`);
      return undefined;
    }
    const size = SCALAR_SIZE[type];
    if (!size) throw new StoreError("CORRUPT_MODEL", `${this.file} has an unknown GGUF metadata type ${type}`);
    if (type === 4) return this.u32();
    await this.skip(size);
    return undefined;
  }
}

/** Reads `file`'s GGUF header; throws CORRUPT_MODEL naming the file when it is not a GGUF. */
export async function readGgufHeader(file: string): Promise<GgufHeader> {
  const fh = await fsp.open(file, "r");
  try {
    const r = new Reader(fh, file);
    const magic = await r.u32();
    if (magic !== 0x46554747) throw new StoreError("CORRUPT_MODEL", `${file} is not a GGUF file (it does not start with "GGUF")`);
    const version = await r.u32();
    if (version < 2 || version > 3) throw new StoreError("CORRUPT_MODEL", `${file} is GGUF version ${version}; versions 2 and 3 are supported`);
    const tensorCount = await r.u64();
    const kvCount = await r.u64();
    let architecture = "unknown";
    let fileType = "unknown";
    let kind = "model";
    for (let i = 0; i < kvCount; i++) {
      const key = await r.str();
      const type = await r.u32();
      const v = await r.value(type);
      if (key === "general.architecture" && typeof v === "string") architecture = v;
      if (key === "general.file_type" && typeof v === "number") fileType = FILE_TYPES[v] ?? `type ${v}`;
      if (key === "general.type" && typeof v === "string") kind = v;
    }
    let parameterCount = 0;
    for (let i = 0; i < tensorCount; i++) {
      await r.str();
      const dims = await r.u32();
      let n = 1;
      for (let d = 0; d < dims; d++) n *= await r.u64();
      parameterCount += n;
      await r.skip(12); // ggml type (u32) + data offset (u64)
    }
    // A vision tower file is a projector whatever general.type says (older mmproj files have none).
    if (architecture === "clip" && kind === "model") kind = "projector";
    return { version, architecture, fileType, parameterCount, kind };
  } finally {
    await fh.close();
  }
}

/** Ollama's format.HumanNumber: 134515008 → "135M", 1190000000 → "1.19B". */
export function humanCount(n: number): string {
  for (const [scale, unit] of [
    [1e12, "T"],
    [1e9, "B"],
    [1e6, "M"],
    [1e3, "K"],
  ] as const) {
    if (n >= scale) {
      const x = n / scale;
      return `${x.toFixed(x >= 100 ? 0 : x >= 10 ? 1 : 2)}${unit}`;
    }
  }
  return String(n);
}
