// Wick's quantized matrix product for many activation rows (a prompt's) on int8 tensor cores,
// with the results of qmatvec.cu to the bit, so a row gets the same bits whichever kernel its
// product took (the arithmetic and why: qmatvec.cuh).
//
// Each 32-value unit's integer dots are exact however they are summed, so the tensor cores
// take them: a block decodes one unit of WQ_GEMM_ROWS weight rows and WQ_GEMM_VECS activation
// rows to int8 tiles in shared memory, and each warp's wmma products give its 16×16 outputs'
// two half-unit dots (values 0..16 and 16..32, which Q6_K scales apart). The float sums must
// then be the matrix-vector kernel's: there lane l folds units l, l+32, … and the warp adds its
// 32 lanes in a butterfly (xor 16, 8, 4, 2, 1). Here the units are taken lane by lane, each
// lane's sum is a leaf, and the leaves are added in the butterfly's tree: lane 0 ends with
// ((x₀ + x₁₆) + (x₈ + x₂₄)) + …, the pairwise sum of the leaves in bit-reversed lane order.
//
// Launch: grid (ceil(n / WQ_GEMM_ROWS) · ceil(m / WQ_GEMM_VECS)), activation tiles fastest (a
// group of weight rows is read while L2 holds it), WQ_GEMM_THREADS threads; `act` as
// wick_qmv_quantize_q8/_q8k wrote it.

#include <mma.h>

#include "qmatvec.cuh"

#define WQ_GEMM_ROWS 64
#define WQ_GEMM_VECS 16
#define WQ_GEMM_THREADS 128
// Outputs a thread folds: its weight row t/2 against activation rows 8·(t%2) … +8.
#define WQ_GEMM_OUT 8

// One unit step's tiles. The int8 halves apart, so every wmma tile starts 256-bit aligned.
struct wq_tiles {
  int8_t wlo[WQ_GEMM_ROWS][16], whi[WQ_GEMM_ROWS][16];
  int8_t alo[WQ_GEMM_VECS][16], ahi[WQ_GEMM_VECS][16];
  int clo[WQ_GEMM_ROWS][WQ_GEMM_VECS], chi[WQ_GEMM_ROWS][WQ_GEMM_VECS];
  float wd[WQ_GEMM_ROWS], wdmin[WQ_GEMM_ROWS];
  int wsc[WQ_GEMM_ROWS][2], wmn[WQ_GEMM_ROWS];
  float ad[WQ_GEMM_VECS], as[WQ_GEMM_VECS];
  int asum[WQ_GEMM_VECS];
};

// What every step of one block reads.
struct wq_gemm {
  const uint8_t* w;
  const uint8_t* act;
  long long row_bytes, act_row;
  int n, units, row0, vec0, nvec;
  wq_tiles* s;
};

// Unit u (sub-block u % 8 of block u / 8 for the K-quants) of the block's weight and activation
// rows into the tiles, then each warp's 16 weight rows against the 16 activation rows.
template <int TYPE>
__device__ __forceinline__ void wq_gemm_step(const wq_gemm& g, int u) {
  wq_tiles& s = *g.s;
  const int t = threadIdx.x;
  __syncthreads();  // the last step's folds have read the tiles
  if (t < WQ_GEMM_ROWS) {
    const int row = g.row0 + t;
    wq_unit q;
    if (row < g.n) {
      const uint8_t* b = g.w + row * g.row_bytes +
                         (long long)(wq_k_quant(TYPE) ? u >> 3 : u) * wq_block_bytes(TYPE);
      wq_unit_load(TYPE, b, wq_k_quant(TYPE) ? u & 7 : 0, &q);
    } else {
      for (int w = 0; w < 8; w++) q.q[w] = 0;
      q.sc[0] = q.sc[1] = q.mn = 0;
      q.d = q.dmin = 0.0f;
    }
    for (int w = 0; w < 4; w++) {
      ((int32_t*)s.wlo[t])[w] = q.q[w];
      ((int32_t*)s.whi[t])[w] = q.q[4 + w];
    }
    s.wd[t] = q.d;
    s.wdmin[t] = q.dmin;
    s.wsc[t][0] = q.sc[0];
    s.wsc[t][1] = q.sc[1];
    s.wmn[t] = q.mn;
  } else if (t < WQ_GEMM_ROWS + 4 * WQ_GEMM_VECS) {
    // Four threads an activation row, two words each.
    const int j = (t - WQ_GEMM_ROWS) >> 2, part = (t - WQ_GEMM_ROWS) & 3;
    int32_t* half = (int32_t*)(part < 2 ? s.alo[j] : s.ahi[j]) + 2 * (part & 1);
    if (j < g.nvec) {
      const uint8_t* row = g.act + (long long)(g.vec0 + j) * g.act_row;
      const int32_t* qs;
      if (wq_k_quant(TYPE)) {
        const wq_a256* a = (const wq_a256*)row + (u >> 3);
        qs = (const int32_t*)(a->qs + 32 * (u & 7));
        if (part == 0) {
          s.ad[j] = a->d;
          s.as[j] = 0.0f;
          s.asum[j] = a->sums[u & 7];
        }
      } else {
        const wq_a32* a = (const wq_a32*)row + u;
        qs = (const int32_t*)a->qs;
        if (part == 0) {
          s.ad[j] = a->d;
          s.as[j] = a->s;
          s.asum[j] = 0;
        }
      }
      half[0] = qs[2 * part];
      half[1] = qs[2 * part + 1];
    } else {
      half[0] = half[1] = 0;
      if (part == 0) {
        s.ad[j] = s.as[j] = 0.0f;
        s.asum[j] = 0;
      }
    }
  }
  __syncthreads();
  {
    using namespace nvcuda::wmma;
    const int r = 16 * (t / 32);
    fragment<matrix_a, 16, 16, 16, signed char, row_major> fa;
    fragment<matrix_b, 16, 16, 16, signed char, col_major> fb;
    fragment<accumulator, 16, 16, 16, int> fc;
    fill_fragment(fc, 0);
    load_matrix_sync(fa, (const signed char*)s.wlo[r], 16);
    load_matrix_sync(fb, (const signed char*)s.alo[0], 16);
    mma_sync(fc, fa, fb, fc);
    store_matrix_sync(s.clo[r], fc, WQ_GEMM_VECS, mem_row_major);
    fill_fragment(fc, 0);
    load_matrix_sync(fa, (const signed char*)s.whi[r], 16);
    load_matrix_sync(fb, (const signed char*)s.ahi[0], 16);
    mma_sync(fc, fa, fb, fc);
    store_matrix_sync(s.chi[r], fc, WQ_GEMM_VECS, mem_row_major);
  }
  // A thread folds rows of its own warp's tiles (row t / 2): the warp's stores, seen.
  __syncwarp();
}

// This thread's outputs' integer sums of the step just taken (into isum/imin, added).
template <int TYPE>
__device__ __forceinline__ void wq_gemm_sums(const wq_tiles& s, wq_unit* q, int* isum, int* imin) {
  const int i = threadIdx.x >> 1, j0 = WQ_GEMM_OUT * (threadIdx.x & 1);
  q->sc[0] = s.wsc[i][0];
  q->sc[1] = s.wsc[i][1];
  q->mn = s.wmn[i];
  q->d = s.wd[i];
  q->dmin = s.wdmin[i];
#pragma unroll
  for (int e = 0; e < WQ_GEMM_OUT; e++) {
    int is, im;
    wq_unit_sums(TYPE, q, s.clo[i][j0 + e], s.chi[i][j0 + e], s.asum[j0 + e], &is, &im);
    isum[e] += is;
    imin[e] += im;
  }
}

// Lane `lane`'s sums of the matrix-vector kernel for this thread's outputs: the units (blocks,
// for the K-quants) it would take, folded in its order.
template <int TYPE>
__device__ __noinline__ void wq_gemm_leaf(const wq_gemm& g, int lane, float* acc, float* mins) {
  const wq_tiles& s = *g.s;
  const int j0 = WQ_GEMM_OUT * (threadIdx.x & 1);
#pragma unroll
  for (int e = 0; e < WQ_GEMM_OUT; e++) acc[e] = mins[e] = 0.0f;
  if (wq_k_quant(TYPE)) {
    // Lane 8g folds blocks g, g + 4, …; the other lanes hold zeros, as in the warp.
    if (lane & 7) return;
    for (int blk = lane >> 3; blk < g.units >> 3; blk += 4) {
      int isum[WQ_GEMM_OUT] = {0}, imin[WQ_GEMM_OUT] = {0};
      wq_unit q;
      for (int j = 0; j < 8; j++) {
        wq_gemm_step<TYPE>(g, 8 * blk + j);
        wq_gemm_sums<TYPE>(s, &q, isum, imin);
      }
#pragma unroll
      for (int e = 0; e < WQ_GEMM_OUT; e++) wq_fold(TYPE, &q, s.ad[j0 + e], 0.0f, isum[e], imin[e], &acc[e], &mins[e]);
    }
  } else {
    for (int u = lane; u < g.units; u += 32) {
      int isum[WQ_GEMM_OUT] = {0}, imin[WQ_GEMM_OUT] = {0};
      wq_unit q;
      wq_gemm_step<TYPE>(g, u);
      wq_gemm_sums<TYPE>(s, &q, isum, imin);
#pragma unroll
      for (int e = 0; e < WQ_GEMM_OUT; e++)
        wq_fold(TYPE, &q, s.ad[j0 + e], s.as[j0 + e], isum[e], imin[e], &acc[e], &mins[e]);
    }
  }
}

// 5-bit reversal: the leaf order in which a binary counter adds the butterfly's tree.
__device__ __forceinline__ int wq_rev5(int i) {
  return ((i & 1) << 4) | ((i & 2) << 2) | (i & 4) | ((i & 8) >> 2) | ((i & 16) >> 4);
}

// The butterfly's sum of the 2^LEVEL leaves from leaf `first` (in bit-reversed lane order).
template <int TYPE, int LEVEL>
struct wq_tree {
  __device__ __forceinline__ static void sum(const wq_gemm& g, int first, float* acc, float* mins) {
    float a2[WQ_GEMM_OUT], m2[WQ_GEMM_OUT];
    wq_tree<TYPE, LEVEL - 1>::sum(g, first, acc, mins);
    wq_tree<TYPE, LEVEL - 1>::sum(g, first + (1 << (LEVEL - 1)), a2, m2);
#pragma unroll
    for (int e = 0; e < WQ_GEMM_OUT; e++) {
      acc[e] += a2[e];
      mins[e] += m2[e];
    }
  }
};

template <int TYPE>
struct wq_tree<TYPE, 0> {
  __device__ __forceinline__ static void sum(const wq_gemm& g, int first, float* acc, float* mins) {
    wq_gemm_leaf<TYPE>(g, wq_rev5(first), acc, mins);
  }
};

template <int TYPE>
__device__ __forceinline__ void qgemm(const uint8_t* w, const void* act, float* dst, int n, int units,
                                      long long row_bytes, int m) {
  __shared__ __align__(32) wq_tiles tiles;
  const int vtiles = (m + WQ_GEMM_VECS - 1) / WQ_GEMM_VECS;
  wq_gemm g;
  g.w = w;
  g.act = (const uint8_t*)act;
  g.row_bytes = row_bytes;
  g.act_row = wq_k_quant(TYPE) ? (long long)(units >> 3) * sizeof(wq_a256) : (long long)units * sizeof(wq_a32);
  g.n = n;
  g.units = units;
  g.row0 = (blockIdx.x / vtiles) * WQ_GEMM_ROWS;
  g.vec0 = (blockIdx.x % vtiles) * WQ_GEMM_VECS;
  g.nvec = min(WQ_GEMM_VECS, m - g.vec0);
  g.s = &tiles;
  float acc[WQ_GEMM_OUT], mins[WQ_GEMM_OUT];
  wq_tree<TYPE, 5>::sum(g, 0, acc, mins);
  const int row = g.row0 + (threadIdx.x >> 1), j0 = WQ_GEMM_OUT * (threadIdx.x & 1);
  if (row >= n) return;
#pragma unroll
  for (int e = 0; e < WQ_GEMM_OUT; e++)
    if (j0 + e < g.nvec) dst[(long long)(g.vec0 + j0 + e) * n + row] = wq_result(TYPE, acc[e], mins[e]);
}

#define WQ_GEMM_KERNEL(name, type)                                                                       \
  extern "C" __global__ void __launch_bounds__(WQ_GEMM_THREADS)                                         \
      name(const uint8_t* __restrict__ w, const void* __restrict__ act, float* __restrict__ dst, int n, \
           int units, long long row_bytes, int m) {                                                     \
    qgemm<type>(w, act, dst, n, units, row_bytes, m);                                                   \
  }

WQ_GEMM_KERNEL(wick_qgemm_q4_0, WQ_Q4_0)
WQ_GEMM_KERNEL(wick_qgemm_q4_1, WQ_Q4_1)
WQ_GEMM_KERNEL(wick_qgemm_q5_0, WQ_Q5_0)
WQ_GEMM_KERNEL(wick_qgemm_q5_1, WQ_Q5_1)
WQ_GEMM_KERNEL(wick_qgemm_q8_0, WQ_Q8_0)
WQ_GEMM_KERNEL(wick_qgemm_q4_k, WQ_Q4_K)
WQ_GEMM_KERNEL(wick_qgemm_q5_k, WQ_Q5_K)
WQ_GEMM_KERNEL(wick_qgemm_q6_k, WQ_Q6_K)
