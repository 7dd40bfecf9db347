/**
 * `wick convert` through the addon: a Hugging Face model directory becomes a GGUF on a thread
 * of the addon's own. Progress is polled (a snapshot after each tensor); aborting the signal
 * cancels the conversion, and the partial output is removed.
 */
import type * as Native from "../native/native.d.ts";
import { native } from "./addon.ts";
import { fromNative } from "./errors.ts";

export type { ConvertOptions, ConvertProgress, ConvertReport } from "../native/native.d.ts";

/**
 * The output types the converter writes (llama.cpp's --outtype spellings), as the addon's
 * `convertOutTypes()` lists them (test/convert.test.ts checks the two agree).
 */
export const CONVERT_OUT_TYPES = ["f32", "f16", "bf16", "q8_0", "q4_0", "q4_k_m", "q5_k_m", "q6_k"] as const;

/** The addon's own list of output types. */
export const nativeOutTypes = (): string[] => native().convertOutTypes();

export interface ConvertRun {
  /** Called with the latest progress every `progressMs` (default 100) while converting. */
  onProgress?: (p: Native.ConvertProgress) => void;
  progressMs?: number;
  signal?: AbortSignal;
}

export async function convertModel(opts: Native.ConvertOptions, run: ConvertRun = {}): Promise<Native.ConvertReport> {
  let conversion: Native.Conversion;
  try {
    conversion = native().startConversion(opts);
  } catch (err) {
    throw fromNative(err);
  }
  const cancel = () => conversion.cancel();
  run.signal?.addEventListener("abort", cancel, { once: true });
  if (run.signal?.aborted) cancel();
  const timer = run.onProgress ? setInterval(() => run.onProgress!(conversion.progress()), run.progressMs ?? 100) : undefined;
  try {
    const report = await conversion.done();
    run.onProgress?.(conversion.progress());
    return report;
  } catch (err) {
    throw fromNative(err);
  } finally {
    if (timer) clearInterval(timer);
    run.signal?.removeEventListener("abort", cancel);
  }
}
