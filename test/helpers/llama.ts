/**
 * llama.cpp as the reference: the prebuilt CPU build inside the node-llama-cpp npm package
 * (never built or downloaded here), with flash attention off. With it on, llama.cpp
 * accumulates V in f16 and greedy choices at near-ties can differ from Wick's kernels.
 */
import { getLlama, LlamaLogLevel, type Llama, type LlamaContextOptions, type LlamaContextSequence, type LlamaModel, type Token } from "node-llama-cpp";

export function referenceLlama(): Promise<Llama> {
  return getLlama({ gpu: false, build: "never", usePrebuiltBinaries: true, skipDownload: true, logLevel: LlamaLogLevel.error });
}

/** `ids` with BOS in front when the vocabulary asks for it and it is not there yet (as llama.cpp's own tokenize does). */
export function withBos(model: LlamaModel, ids: Token[]): Token[] {
  const bos = model.tokens.bos;
  return model.tokens.shouldPrependBosToken && bos != null && ids[0] !== bos ? [bos, ...ids] : ids;
}

/**
 * Runs `body` on the one sequence of a fresh context. One thread unless asked: ggml's workers
 * spin-wait, which starves everything else on a small machine. `extra`: more context options
 * (an f32 KV cache, …).
 */
export async function inContext<T>(model: LlamaModel, contextSize: number, body: (seq: LlamaContextSequence) => Promise<T>, threads = 1, extra: Partial<LlamaContextOptions> = {}): Promise<T> {
  const ctx = await model.createContext({ contextSize, sequences: 1, threads, flashAttention: false, ...extra });
  try {
    return await body(ctx.getSequence());
  } finally {
    await ctx.dispose();
  }
}

/** llama.cpp's first `n` greedy tokens after `promptTokens` (end tokens included, as with ignore_eos). */
export function llamaGreedy(model: LlamaModel, promptTokens: Token[], n: number, contextSize = 512, threads = 1, extra: Partial<LlamaContextOptions> = {}): Promise<number[]> {
  return inContext(
    model,
    contextSize,
    async (seq) => {
      const out: number[] = [];
      for await (const tok of seq.evaluate(promptTokens, { temperature: 0 })) {
        out.push(tok);
        if (out.length >= n) break;
      }
      return out;
    },
    threads,
    extra,
  );
}
