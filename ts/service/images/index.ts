/**
 * The image pipeline of the control plane: references (URLs, data URIs, Ollama's bare base64)
 * → bytes (`fetch.ts`) → RGB8 pixels (`decode.ts`), all of one request's images at once. The
 * model's own preprocessing (LFM2-VL's smart resize, 512-px tiles and thumbnail, normalisation,
 * exactly as llama.cpp does it) runs in the engine on these pixels, which cross into it as
 * they are (one copy into the engine's memory).
 */
import { DEFAULT_FETCH, imageBytes, type ImageFetchOptions } from "./fetch.ts";
import { sharpDecoder, type DecodedImage, type ImageDecoder } from "./decode.ts";

export { isPrivateAddress, type ImageFetchOptions } from "./fetch.ts";
export { loadSharp, type DecodedImage, type ImageDecoder } from "./decode.ts";

export interface ImageOptions extends ImageFetchOptions {
  /** Largest decoded image (width × height); larger ones are refused before decoding. */
  maxPixels: number;
  /** Bytes → pixels; default sharp. */
  decode?: ImageDecoder;
}

export const DEFAULT_IMAGE_OPTIONS: ImageOptions = { ...DEFAULT_FETCH, maxPixels: 50_000_000 };

/** An image a request refers to, and the request field to blame for it. */
export interface ImageRef {
  url: string;
  param: string;
}

export async function loadImages(refs: ImageRef[], opts: ImageOptions = DEFAULT_IMAGE_OPTIONS): Promise<DecodedImage[]> {
  const decode = opts.decode ?? sharpDecoder;
  return Promise.all(refs.map(async (r) => decode(await imageBytes(r.url, opts, r.param), opts.maxPixels, r.param)));
}

/** Ollama sends images as bare base64: a data URI for the same bytes. */
export function base64Ref(b64: string): string {
  return `data:;base64,${b64}`;
}
