/**
 * Image bytes → RGB8 pixels with `sharp` (libvips): JPEG, PNG, WebP, GIF (first frame) and
 * whatever else it reads, EXIF orientation applied, alpha dropped and grey expanded to RGB
 * (what llama.cpp's stb_image loader hands its preprocessing). The size is read from the
 * header first: an image over `maxPixels` is refused before any pixel is decoded, and libvips
 * gets the same cap, so no image can make the server run out of memory. A file that is not an
 * image, or is truncated, is a 400.
 */
import { RequestError } from "../errors.ts";

export interface DecodedImage {
  width: number;
  height: number;
  /** width·height·3 bytes, row-major. */
  rgb: Buffer;
}

export type ImageDecoder = (bytes: Buffer, maxPixels: number, param: string) => Promise<DecodedImage>;

/** The parts of sharp's API used here (sharp is loaded when the first image arrives). */
export interface SharpImage {
  metadata(): Promise<{ width?: number; height?: number; orientation?: number }>;
  jpeg(opts?: Record<string, unknown>): SharpImage;
  png(opts?: Record<string, unknown>): SharpImage;
  withMetadata(opts?: Record<string, unknown>): SharpImage;
  toBuffer(): Promise<Buffer>;
  rotate(): SharpImage;
  removeAlpha(): SharpImage;
  toColourspace(space: string): SharpImage;
  raw(): SharpImage;
  toBuffer(opts: { resolveWithObject: true }): Promise<{ data: Buffer; info: { width: number; height: number; channels: number } }>;
}
export type Sharp = (input: Buffer, opts: Record<string, unknown>) => SharpImage;

let sharpModule: Promise<Sharp> | undefined;

/** sharp itself, or a NOT_IMPLEMENTED error saying it is not installed. */
export function loadSharp(): Promise<Sharp> {
  // A computed specifier: the type check does not need sharp installed.
  const name = "sharp";
  sharpModule ??= import(name).then((m: { default: Sharp }) => m.default);
  return sharpModule.catch(() => {
    sharpModule = undefined;
    throw new RequestError("NOT_IMPLEMENTED", "Image input needs the `sharp` package (npm install sharp), which is not installed.", null, "image_decoder_missing");
  });
}

const invalid = (param: string, why: string) => new RequestError("INVALID_REQUEST", `The image could not be decoded: ${why}.`, param, "invalid_image");

export const sharpDecoder: ImageDecoder = async (bytes, maxPixels, param) => {
  const sharp = await loadSharp();
  const open = (limit: number | false) => sharp(bytes, { limitInputPixels: limit, failOn: "warning", pages: 1, page: 0 });
  let meta;
  try {
    // The header only: the size is checked here, with a clear error, before libvips' own cap.
    meta = await open(false).metadata();
  } catch (err) {
    throw invalid(param, (err as Error).message);
  }
  const { width = 0, height = 0 } = meta;
  if (width <= 0 || height <= 0) throw invalid(param, "it has no size");
  if (width * height > maxPixels) {
    throw new RequestError("INVALID_REQUEST", `The image has ${width}×${height} pixels, more than the ${maxPixels} allowed.`, param, "image_too_large");
  }
  try {
    const { data, info } = await open(maxPixels).rotate().removeAlpha().toColourspace("srgb").raw().toBuffer({ resolveWithObject: true });
    if (info.channels !== 3) throw new Error(`${info.channels} channels after conversion`);
    return { width: info.width, height: info.height, rgb: data };
  } catch (err) {
    throw invalid(param, (err as Error).message);
  }
};
