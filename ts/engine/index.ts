/**
 * Typed wrapper over the native addon: the only module that touches it. Generation is an
 * async iterator; aborting the signal or leaving the loop cancels the sequence in the engine.
 */
import type * as Native from "../native/native.d.ts";
import { native, selectAddon } from "./addon.ts";
import { fromNative, isEngineCode, WickError } from "./errors.ts";

export { addonChoice, DEVICES, isDevice, selectAddon, type AddonChoice } from "./addon.ts";

export { WickError } from "./errors.ts";
export type { EngineCode } from "./errors.ts";
export type {
  EngineHealth,
  LoadOptions,
  GenerateOptions,
  ModelInfo,
  Metrics,
  GgufInfo,
  QuantShare,
  TokenLogprobs,
  FinishReason,
  Grammar,
  GrammarKind,
  LogitBias,
  ImageInput,
  ReasoningBudget,
  EmbeddingInfo,
  EmbedRequest,
  Pooling,
  LoraAdapter,
  LoraAdapterSpec,
  LoraScale,
  Speculation,
} from "../native/native.d.ts";

/** What a generation yields: the addon's token and done events (errors are thrown instead). */
/** How the KV cache may store keys and values (llama.cpp's `--cache-type-k/-v` names; the engine parses them). */
export const KV_CACHE_TYPES = ["f16", "q8_0", "q4_0"] as const;

export type EngineEvent = Exclude<Native.SequenceEvent, { type: "error" } | { type: "embedding" }>;

/** A sequence's events as `stream` yields them (errors thrown instead). */
type StreamEvent = Exclude<Native.SequenceEvent, { type: "error" }>;

/** What `Engine.embed` returns. */
export interface Embedding {
  vectors: Float32Array[];
  promptTokens: number;
  timings: Native.Timings;
}

export interface TokenizeOptions {
  /** Add BOS/EOS as llama.cpp does for this vocabulary (default true). */
  addSpecial?: boolean;
  /** Turn special-token text such as "<|im_start|>" into that token (default false). */
  parseSpecial?: boolean;
}

export class Engine {
  private constructor(
    private readonly inner: Native.Engine,
    /** The addon choice's notice, when the CUDA addon was passed over for this model. */
    private readonly notice?: string,
    /** The GGUF it was loaded from (its metadata holds what `info()` leaves out, e.g. a rerank template). */
    readonly modelPath?: string,
  ) {}

  /**
   * Loads a model on the addon `selectAddon` chose (choosing it now from `opts.device` if
   * nothing did). When the CUDA addon was installed but found no CUDA device, the model runs
   * on the CPU addon's exact path and its `deviceNotice` says why.
   */
  static async load(opts: Native.LoadOptions): Promise<Engine> {
    const choice = selectAddon({ device: opts.device, gpuLayers: opts.gpuLayers });
    const device = opts.device ?? (process.env.WICK_DEVICE || "auto");
    const passedOver = choice.notice !== undefined && opts.gpuLayers !== 0 && (device === "auto" || device.startsWith("cuda"));
    try {
      const inner = await native().Engine.load(passedOver ? { ...opts, device: "cpu" } : opts);
      return new Engine(inner, passedOver ? choice.notice : undefined, opts.modelPath);
    } catch (err) {
      throw fromNative(err);
    }
  }

  /** `device` is where the model runs (`cpu`, `cpu-candle`, `cuda:0`, `metal`); `deviceNotice` why that is not what was asked. */
  info(): Native.ModelInfo {
    const info = this.inner.info();
    return this.notice ? { ...info, deviceNotice: this.notice } : info;
  }

  tokenize(text: string, opts: TokenizeOptions = {}): number[] {
    try {
      return this.inner.tokenize(text, opts.addSpecial ?? true, opts.parseSpecial ?? false);
    } catch (err) {
      throw fromNative(err);
    }
  }

  detokenize(ids: number[], opts: { skipSpecial?: boolean } = {}): string {
    return this.inner.detokenize(ids, opts.skipSpecial ?? false);
  }

  /** Each token's bytes as it renders alone (a byte of a longer character stays that byte). */
  tokenBytes(ids: number[]): Uint8Array[] {
    return this.inner.tokenBytes(ids);
  }

  tokenId(text: string): number | null {
    return this.inner.tokenId(text);
  }

  metrics(): Native.Metrics {
    return this.inner.metrics();
  }

  /** Loads a LoRA adapter beside the loaded ones (off the JS thread); resolves to its id. A file that does not fit the model is MODEL_LOAD_FAILED. */
  async loadAdapter(spec: Native.LoraAdapterSpec): Promise<number> {
    try {
      return await this.inner.loadAdapter(spec);
    } catch (err) {
      throw fromNative(err);
    }
  }

  /** Unloads the adapter named `name` (running sequences finish with it). */
  unloadAdapter(name: string): void {
    try {
      this.inner.unloadAdapter(name);
    } catch (err) {
      throw fromNative(err);
    }
  }

  /** The loaded LoRA adapters, by id. */
  adapters(): Native.LoraAdapter[] {
    try {
      return this.inner.adapters();
    } catch (err) {
      throw fromNative(err);
    }
  }

  /** Sets the scales requests that name no adapters get (llama-server's `POST /lora-adapters`); an unknown id or a non-finite scale is INVALID_REQUEST. */
  setAdapterScales(scales: Native.LoraScale[]): void {
    try {
      this.inner.setAdapterScales(scales);
    } catch (err) {
      throw fromNative(err);
    }
  }

  /**
   * `{ ok: false, reason }` once the engine's scheduler thread died (its requests, and every
   * later one, fail with ENGINE_DEAD: unload it and load the model again) or after `unload()`.
   */
  health(): Native.EngineHealth {
    try {
      return this.inner.health();
    } catch (err) {
      throw fromNative(err);
    }
  }

  /**
   * Holds the scheduler between steps until `resume()`: requests submitted meanwhile queue
   * and then start together, in submission order, in one deterministic schedule.
   */
  pause(): void {
    try {
      this.inner.pause();
    } catch (err) {
      throw fromNative(err);
    }
  }

  resume(): void {
    try {
      this.inner.resume();
    } catch (err) {
      throw fromNative(err);
    }
  }

  /**
   * Submits a request and streams its events. Validation errors throw before the first
   * event; engine errors mid-stream throw from the iterator.
   */
  generate(opts: Native.GenerateOptions, signal?: AbortSignal): AsyncGenerator<EngineEvent> {
    let seq: Native.Sequence;
    try {
      seq = this.inner.submit(opts);
    } catch (err) {
      throw fromNative(err);
    }
    // A generation's sequence never yields an embedding event.
    return stream(seq, signal) as AsyncGenerator<EngineEvent>;
  }

  /**
   * Embeds one input (token ids): one pooled vector, one per token (`pooling: "none"`), or
   * the classifier's scores (`"rank"`). Runs in the scheduler's steps beside generation.
   */
  async embed(req: Native.EmbedRequest, signal?: AbortSignal): Promise<Embedding> {
    let seq: Native.Sequence;
    try {
      seq = this.inner.embed(req);
    } catch (err) {
      throw fromNative(err);
    }
    let vectors: Float32Array[] = [];
    for await (const ev of stream(seq, signal)) {
      if (ev.type === "embedding") vectors = ev.vectors;
      else if (ev.type === "done") return { vectors, promptTokens: ev.usage.promptTokens, timings: ev.timings };
    }
    throw new WickError("CANCELLED", "the embedding request was cancelled");
  }

  async unload(): Promise<void> {
    try {
      await this.inner.unload();
    } catch (err) {
      throw fromNative(err);
    }
  }
}

async function* stream(seq: Native.Sequence, signal?: AbortSignal): AsyncGenerator<StreamEvent> {
  const cancel = () => seq.cancel();
  if (signal?.aborted) cancel();
  signal?.addEventListener("abort", cancel, { once: true });
  try {
    for (;;) {
      const batch = await seq.next();
      if (batch === null) return;
      for (const ev of batch) {
        if (ev.type === "error") throw new WickError(isEngineCode(ev.code) ? ev.code : "INTERNAL", ev.message);
        yield ev;
        if (ev.type === "done") return;
      }
    }
  } finally {
    signal?.removeEventListener("abort", cancel);
    seq.cancel(); // no-op once done; frees the sequence if the consumer left early
  }
}

/**
 * Reads a GGUF file's header without loading weights (off the JS thread). Metadata arrays
 * longer than `maxArrayLen` come back empty, as Ollama's non-verbose `model_info` has them.
 */
export async function inspectModel(path: string, opts: { maxArrayLen?: number } = {}): Promise<Native.GgufInfo> {
  try {
    return await native().inspectModel(path, opts);
  } catch (err) {
    throw fromNative(err);
  }
}

/**
 * The widest CPU kernels the engine runs: "avx512vnni", "avx2" or "scalar". Prebuilt binaries
 * target baseline x86-64 and choose at run time; `WICK_ISA=scalar|avx2` caps the choice.
 */
export function cpuIsa(): string {
  return native().cpuIsa();
}

/** The GPU backends the running addon was built with (`cuda`, `metal`); empty on the CPU addon. */
export function gpuBackends(): string[] {
  return native().gpuBackends();
}
