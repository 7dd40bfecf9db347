// Attention of query rows straight from the paged f16 KV cache (`cache::device_kv`), each row as
// a one-token decode computes it: a step's decoding sequences, or a prompt's rows (each its
// causal length, all reading its sequence's one row of slots). One launch per layer instead of
// the composed path's gather, casts, transposes, two matmuls, mask and softmax (about fourteen
// launches and three copies of every key and value read). It rounds as ggml's CPU backend with flash attention off: the query
// rounded to f16, scores q·k in f32 times the scale, softmax with ggml's expf (max subtracted),
// each probability rounded to f16, then Σ p·v in f32. Built with --fmad=false, and its order
// of sums fixed by the block's shape, so the host twin (attention_twin.c, which candle's CPU
// device runs) gives the same bits.
//
// Grid: (query row, KV head); a block takes the KV head's `group` query heads together, so each
// key and value row is read once for all of them.
// scratch: [B, n_head, t_pad] f32, the scores, then their exponentials.

#include <stdint.h>

#include "row_ops.cuh"

// The launch's dynamic shared memory (tests/emulated_gpu gives its own).
#ifndef WICK_DYNAMIC_SHARED
#define WICK_DYNAMIC_SHARED(T, name) extern __shared__ T name[]
#endif

// f16 value → f16-rounded f32.
static __device__ __forceinline__ float wa_f16_round(float x) { return wr_f16_value(wr_f16_bits(x)); }

extern "C" __global__ void wick_decode_attention_f16(
    const float* __restrict__ q,             // [B, n_head, hd]
    const uint16_t* __restrict__ kc,         // [n_slots, n_kv, hd] f16 bits
    const uint16_t* __restrict__ vc,         // [n_slots, n_kv, hd] f16 bits
    const uint32_t* __restrict__ reads,      // a sequence's slot of each position, a row per sequence
    const uint32_t* __restrict__ lens,       // [B]: positions query row b attends to
    float* __restrict__ scratch,             // [B, n_head, t_pad]
    float* __restrict__ out,                 // [B, n_head, hd]
    int n_kv, int group, int hd, int t_pad, int reads_stride, int window, float scale) {
  const int b = blockIdx.x, kvh = blockIdx.y;
  const int n_head = n_kv * group;
  const int len = (int)lens[b];
  // A sliding window sees the last `window` positions only (0: no window).
  const int from = (window > 0 && len > window) ? len - window : 0;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, n_warps = blockDim.x / 32;

  WICK_DYNAMIC_SHARED(float, sh);
  float* qh = sh;                         // [group, hd]
  float* red = qh + group * hd;           // [n_warps, group]
  float* maxes = red + n_warps * group;   // [group]
  float* sums = maxes + group;            // [group]

  const float* qb = q + ((size_t)b * n_head + (size_t)kvh * group) * hd;
  for (int i = threadIdx.x; i < group * hd; i += blockDim.x) {
    qh[i] = wa_f16_round(qb[i]);
  }
  for (int i = threadIdx.x; i < n_warps * group; i += blockDim.x) {
    red[i] = -INFINITY;
  }
  __syncthreads();

  // Query row b's slots: row b of `reads` (reads_stride t_pad: decodes), or the one row every
  // row shares (reads_stride 0: a prompt's rows).
  const uint32_t* slots = reads + (size_t)b * reads_stride;
  float* sc = scratch + ((size_t)b * n_head + (size_t)kvh * group) * t_pad;  // head g: sc + g·t_pad

  // Scores: a warp per position, its lanes across head_dim, summed in a butterfly.
  for (int p = from + warp; p < len; p += n_warps) {
    const uint16_t* k = kc + ((size_t)slots[p] * n_kv + kvh) * hd;
    for (int g = 0; g < group; ++g) {
      float s = 0.f;
      for (int d = lane; d < hd; d += 32) {
        s += qh[g * hd + d] * wr_f16_value(k[d]);
      }
      for (int o = 16; o > 0; o >>= 1) {
        s += __shfl_xor_sync(0xffffffffu, s, o);
      }
      s *= scale;
      if (lane == 0) {
        sc[(size_t)g * t_pad + p] = s;
        red[warp * group + g] = fmaxf(red[warp * group + g], s);
      }
    }
  }
  __syncthreads();
  if (threadIdx.x < group) {
    float m = -INFINITY;
    for (int w = 0; w < n_warps; ++w) {
      m = fmaxf(m, red[w * group + threadIdx.x]);
    }
    maxes[threadIdx.x] = m;
  }
  __syncthreads();

  // Exponentials and their sum, per head: each thread's share in order, the warp's butterfly,
  // then the warps' sums in order.
  for (int g = 0; g < group; ++g) {
    float part = 0.f;
    for (int p = from + threadIdx.x; p < len; p += blockDim.x) {
      const float e = wr_expf(sc[(size_t)g * t_pad + p] - maxes[g]);
      sc[(size_t)g * t_pad + p] = e;
      part += e;
    }
    for (int o = 16; o > 0; o >>= 1) {
      part += __shfl_xor_sync(0xffffffffu, part, o);
    }
    if (lane == 0) {
      red[warp] = part;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      float s = 0.f;
      for (int w = 0; w < n_warps; ++w) {
        s += red[w];
      }
      sums[g] = s;
    }
    __syncthreads();
  }

  // Σ p·v: a thread per (head, dimension), consecutive threads on consecutive dimensions.
  float* ob = out + ((size_t)b * n_head + (size_t)kvh * group) * hd;
  for (int i = threadIdx.x; i < group * hd; i += blockDim.x) {
    const int g = i / hd, d = i % hd;
    const float sum = sums[g];
    const float* e = sc + (size_t)g * t_pad;
    float acc = 0.f;
    for (int p = from; p < len; ++p) {
      const float pr = wa_f16_round(e[p] / sum);
      acc += pr * wr_f16_value(vc[((size_t)slots[p] * n_kv + kvh) * hd + d]);
    }
    ob[i] = acc;
  }
}
