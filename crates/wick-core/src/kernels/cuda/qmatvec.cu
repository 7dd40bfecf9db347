// Wick's quantized matrix-vector product on the GPU (the arithmetic and why: qmatvec.cuh):
// the activation rows rounded to q8 blocks as the exact CPU path rounds them, then each weight
// row against them, WQ_MAX_VEC rows at a time.
//
// Launches: `wick_qmv_quantize_q8` / `_q8k` grid (blocks per row, rows), 32 threads (`arm`: the
// host's rounding rules, qmatvec.cuh);
// `wick_qmv_<type>` grid (ceil(n / 4) · chunks), block (32, 4): a warp per weight row and chunk
// of up to WQ_MAX_VEC activation rows. A block's chunk varies fastest, so the blocks that read
// one group of weight rows run together and the later chunks find those rows in L2.

#include "qmatvec.cuh"

#define WQ_MAX_VEC 8
#define WQ_FULL 0xffffffffu

__device__ __forceinline__ float wq_butterfly(float x) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) x += __shfl_xor_sync(WQ_FULL, x, off);
  return x;
}

// q8_0 / q8_1: a warp per 32-value block, a value per lane.
extern "C" __global__ void wick_qmv_quantize_q8(const float* __restrict__ x, wq_a32* __restrict__ out, int k,
                                                 int nblk, int arm) {
  const int lane = threadIdx.x, blk = blockIdx.x, v = blockIdx.y;
  const float val = x[(long long)v * k + blk * 32 + lane];
  float max = fabsf(val);
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) max = fmaxf(max, __shfl_xor_sync(WQ_FULL, max, off));
  const int q = wq_q8_value(val, wq_q8_inverse(max, arm));
  int sum = q;
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(WQ_FULL, sum, off);
  wq_a32* a = out + (long long)v * nblk + blk;
  a->qs[lane] = (int8_t)q;
  if (lane == 0) wq_q8_finish(a, max, sum);
}

// q8_K: a warp per 256-value block, eight consecutive values per lane.
extern "C" __global__ void wick_qmv_quantize_q8k(const float* __restrict__ x, wq_a256* __restrict__ out, int k,
                                                  int nblk, int arm) {
  const int lane = threadIdx.x, blk = blockIdx.x, v = blockIdx.y;
  const float* xb = x + (long long)v * k + blk * 256 + 8 * lane;
  float vals[8], best = 0.0f, extreme = 0.0f;
  int at = 1 << 30;
#pragma unroll
  for (int i = 0; i < 8; i++) {
    vals[i] = xb[i];
    if (wq_q8k_beats(fabsf(vals[i]), 8 * lane + i, best, at)) {
      best = fabsf(vals[i]);
      at = 8 * lane + i;
      extreme = vals[i];
    }
  }
  // The largest magnitude, the first of equals: a strict order, so every lane ends on the same.
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    const float ob = __shfl_xor_sync(WQ_FULL, best, off), oe = __shfl_xor_sync(WQ_FULL, extreme, off);
    const int oat = __shfl_xor_sync(WQ_FULL, at, off);
    if (wq_q8k_beats(ob, oat, best, at)) {
      best = ob;
      at = oat;
      extreme = oe;
    }
  }
  wq_a256* a = out + (long long)v * nblk + blk;
  const float iscale = best == 0.0f ? 0.0f : -127.0f / extreme;
  int sum = 0;
#pragma unroll
  for (int i = 0; i < 8; i++) {
    const int q = best == 0.0f ? 0 : wq_q8k_value(vals[i], iscale, arm);
    a->qs[8 * lane + i] = (int8_t)q;
    sum += q;
  }
  // Lanes 4j..4j+3 hold sub-block j.
  sum += __shfl_xor_sync(WQ_FULL, sum, 1);
  sum += __shfl_xor_sync(WQ_FULL, sum, 2);
  if ((lane & 3) == 0) a->sums[lane >> 2] = sum;
  if (lane == 0) a->d = best == 0.0f ? 0.0f : 1.0f / iscale;
}

template <int TYPE>
__device__ __forceinline__ void qmv(const uint8_t* __restrict__ w, const void* __restrict__ act,
                                    float* __restrict__ dst, int n, int units, long long row_bytes, int m) {
  const int chunks = (m + WQ_MAX_VEC - 1) / WQ_MAX_VEC, chunk = blockIdx.x % chunks;
  const int lane = threadIdx.x, row = (blockIdx.x / chunks) * blockDim.y + threadIdx.y;
  if (row >= n) return;  // the whole warp: one row a warp
  const int first = chunk * WQ_MAX_VEC, nvec = min(WQ_MAX_VEC, m - first);
  const long long act_row = wq_k_quant(TYPE) ? (long long)(units >> 3) * sizeof(wq_a256)
                                             : (long long)units * sizeof(wq_a32);
  act = (const uint8_t*)act + first * act_row;
  dst += (long long)first * n;
  const uint8_t* wr = w + (long long)row * row_bytes;
  const int bytes = wq_block_bytes(TYPE);
  float acc[WQ_MAX_VEC], mins[WQ_MAX_VEC];
#pragma unroll
  for (int v = 0; v < WQ_MAX_VEC; v++) acc[v] = mins[v] = 0.0f;
  for (int u0 = 0; u0 < units; u0 += 32) {
    const int u = u0 + lane;
    const bool live = u < units;
    if (wq_k_quant(TYPE)) {
      const int j = u & 7, nblk = units >> 3;
      const uint8_t* b = wr + (long long)(u >> 3) * bytes;
      wq_unit q;
      if (live) wq_unit_load(TYPE, b, j, &q);
#pragma unroll
      for (int v = 0; v < WQ_MAX_VEC; v++) {
        if (v >= nvec) break;
        const wq_a256* a = (const wq_a256*)act + (long long)v * nblk + (u >> 3);
        int isum = 0, imin = 0;
        if (live) wq_unit_dot(TYPE, &q, (const int32_t*)(a->qs + 32 * j), a->sums[j], &isum, &imin);
        // The block's eight sub-blocks sit in lanes 8g..8g+7: exact integer sums.
#pragma unroll
        for (int off = 1; off < 8; off <<= 1) {
          isum += __shfl_xor_sync(WQ_FULL, isum, off);
          imin += __shfl_xor_sync(WQ_FULL, imin, off);
        }
        if (live && j == 0) wq_fold(TYPE, &q, a->d, 0.0f, isum, imin, &acc[v], &mins[v]);
      }
    } else if (live) {
      const uint8_t* b = wr + (long long)u * bytes;
      wq_unit q;
      wq_unit_load(TYPE, b, 0, &q);
#pragma unroll
      for (int v = 0; v < WQ_MAX_VEC; v++) {
        if (v >= nvec) break;
        const wq_a32* a = (const wq_a32*)act + (long long)v * units + u;
        int isum, imin;
        wq_unit_dot(TYPE, &q, (const int32_t*)a->qs, 0, &isum, &imin);
        wq_fold(TYPE, &q, a->d, a->s, isum, imin, &acc[v], &mins[v]);
      }
    }
  }
#pragma unroll
  for (int v = 0; v < WQ_MAX_VEC; v++) {
    if (v >= nvec) break;
    const float sum = wq_butterfly(acc[v]), sum_mins = wq_butterfly(mins[v]);
    if (lane == 0) dst[(long long)v * n + row] = wq_result(TYPE, sum, sum_mins);
  }
}

// w: the weight's GGUF blocks, `row_bytes` a row; act: `m` rows of activation blocks
// (wq_a32 or wq_a256 by type); dst: [m, n] f32; units: k / 32.
#define WQ_KERNEL(name, type)                                                                            \
  extern "C" __global__ void name(const uint8_t* __restrict__ w, const void* __restrict__ act,          \
                                  float* __restrict__ dst, int n, int units, long long row_bytes, int m) { \
    qmv<type>(w, act, dst, n, units, row_bytes, m);                                                     \
  }

WQ_KERNEL(wick_qmv_q4_0, WQ_Q4_0)
WQ_KERNEL(wick_qmv_q4_1, WQ_Q4_1)
WQ_KERNEL(wick_qmv_q5_0, WQ_Q5_0)
WQ_KERNEL(wick_qmv_q5_1, WQ_Q5_1)
WQ_KERNEL(wick_qmv_q8_0, WQ_Q8_0)
WQ_KERNEL(wick_qmv_q4_k, WQ_Q4_K)
WQ_KERNEL(wick_qmv_q5_k, WQ_Q5_K)
WQ_KERNEL(wick_qmv_q6_k, WQ_Q6_K)
