/* The host twin of qmatvec.cu: the same arithmetic (qmatvec.cuh) in the same order, lane by
 * lane and the butterfly sums as the warp does them, so its results equal the GPU's to the bit.
 * Built for the CPU by build.rs; `kernels::qmatvec` calls it on candle's CPU device and the
 * tests check it against the exact path here and the GPU against it there. */

#include <stddef.h>
#include <string.h>

#include "qmatvec.cuh"

#define LANES 32
#define MAX_VEC 8

static void quantize_q8(const float* x, wq_a32* a, int arm) {
  float max = 0.0f;
  for (int i = 0; i < 32; i++) max = fmaxf(max, fabsf(x[i]));
  const float id = wq_q8_inverse(max, arm);
  int sum = 0;
  for (int i = 0; i < 32; i++) {
    const int q = wq_q8_value(x[i], id);
    a->qs[i] = (int8_t)q;
    sum += q;
  }
  wq_q8_finish(a, max, sum);
}

static void quantize_q8k(const float* x, wq_a256* a, int arm) {
  float best = 0.0f, extreme = 0.0f;
  int at = 1 << 30;
  for (int i = 0; i < 256; i++) {
    if (wq_q8k_beats(fabsf(x[i]), i, best, at)) {
      best = fabsf(x[i]);
      at = i;
      extreme = x[i];
    }
  }
  const float iscale = best == 0.0f ? 0.0f : -127.0f / extreme;
  for (int j = 0; j < 8; j++) {
    int sum = 0;
    for (int i = 32 * j; i < 32 * j + 32; i++) {
      const int q = best == 0.0f ? 0 : wq_q8k_value(x[i], iscale, arm);
      a->qs[i] = (int8_t)q;
      sum += q;
    }
    a->sums[j] = sum;
  }
  a->d = best == 0.0f ? 0.0f : 1.0f / iscale;
}

/* One activation row of k values as `type` takes it, into `out` (k/32 wq_a32 or k/256
 * wq_a256), by the host's rules (`arm`). Returns the bytes written, 0 for a type the kernels
 * do not take. */
size_t wick_qmv_twin_quantize(int type, const float* x, int k, void* out, int arm) {
  if (!wq_block_bytes(type)) return 0;
  if (wq_k_quant(type)) {
    for (int b = 0; b < k / 256; b++) quantize_q8k(x + 256 * b, (wq_a256*)out + b, arm);
    return (size_t)(k / 256) * sizeof(wq_a256);
  }
  for (int b = 0; b < k / 32; b++) quantize_q8(x + 32 * b, (wq_a32*)out + b, arm);
  return (size_t)(k / 32) * sizeof(wq_a32);
}

/* What a warp's `x += shfl_xor(x, off)` for off = 16 … 1 leaves in lane 0. */
static float butterfly(const float* lanes) {
  float p[LANES], q[LANES];
  memcpy(p, lanes, sizeof p);
  for (int off = 16; off > 0; off >>= 1) {
    for (int l = 0; l < LANES; l++) q[l] = p[l] + p[l ^ off];
    memcpy(p, q, sizeof p);
  }
  return p[0];
}

/* y[v·ldy + r] = row r of `w` (GGUF blocks, row_bytes apart) · activation row v, for r < n,
 * v < nvec ≤ 8; `act` as `wick_qmv_twin_quantize` wrote the nvec rows one after another. */
static inline __attribute__((always_inline)) void chunk(int type, const uint8_t* w, size_t row_bytes, int n, int k,
                                                      const void* act, int nvec, float* y, size_t ldy) {
  const int bytes = wq_block_bytes(type), units = k / 32;
  for (int r = 0; r < n; r++) {
    const uint8_t* wr = w + (size_t)r * row_bytes;
    float acc[MAX_VEC][LANES], mins[MAX_VEC][LANES];
    memset(acc, 0, (size_t)nvec * sizeof acc[0]);
    memset(mins, 0, (size_t)nvec * sizeof mins[0]);
    for (int u0 = 0; u0 < units; u0 += LANES) {
      if (wq_k_quant(type)) {
        const int nblk = units / 8;
        /* Four blocks an iteration, eight lanes each; the integers add exactly in any order. */
        for (int g = 0; g < LANES / 8 && u0 + 8 * g < units; g++) {
          const int blk = (u0 + 8 * g) / 8;
          const uint8_t* b = wr + (size_t)blk * bytes;
          wq_unit q[8];
          for (int j = 0; j < 8; j++) wq_unit_load(type, b, j, &q[j]);
          for (int v = 0; v < nvec; v++) {
            const wq_a256* a = (const wq_a256*)act + (size_t)v * nblk + blk;
            int isum = 0, imin = 0;
            for (int j = 0; j < 8; j++) {
              int i, m;
              wq_unit_dot(type, &q[j], (const int32_t*)(a->qs + 32 * j), a->sums[j], &i, &m);
              isum += i;
              imin += m;
            }
            wq_fold(type, &q[0], a->d, 0.0f, isum, imin, &acc[v][8 * g], &mins[v][8 * g]);
          }
        }
      } else {
        for (int l = 0; l < LANES && u0 + l < units; l++) {
          const int u = u0 + l;
          const uint8_t* b = wr + (size_t)u * bytes;
          wq_unit q;
          wq_unit_load(type, b, 0, &q);
          for (int v = 0; v < nvec; v++) {
            const wq_a32* a = (const wq_a32*)act + (size_t)v * units + u;
            int isum, imin;
            wq_unit_dot(type, &q, (const int32_t*)a->qs, 0, &isum, &imin);
            wq_fold(type, &q, a->d, a->s, isum, imin, &acc[v][l], &mins[v][l]);
          }
        }
      }
    }
    for (int v = 0; v < nvec; v++) y[(size_t)v * ldy + r] = wq_result(type, butterfly(acc[v]), butterfly(mins[v]));
  }
}

/* y[v·ldy + r] for every activation row v < m and weight row r < n, in the kernel's chunks of
 * up to 8 rows (each row's result is the same in any chunk); ldy ≥ n lets callers split the
 * weight rows. Returns 0, or -1 for a type it does not take. */
int wick_qmv_twin(int type, const uint8_t* w, size_t row_bytes, int n, int k, const void* act, int m, float* y,
                  size_t ldy) {
  if (!wq_block_bytes(type) || m < 1 || ldy < (size_t)n) return -1;
  const size_t act_row = wq_k_quant(type) ? (size_t)(k / 256) * sizeof(wq_a256) : (size_t)(k / 32) * sizeof(wq_a32);
  for (int first = 0; first < m; first += MAX_VEC) {
    const int nvec = m - first < MAX_VEC ? m - first : MAX_VEC;
    const void* a = (const uint8_t*)act + first * act_row;
    float* out = y + (size_t)first * ldy;
    /* A call per type with the type a constant, so each inlines its own unpacking. */
    switch (type) {
#define WQ_CHUNK(t) \
  case t:           \
    chunk(t, w, row_bytes, n, k, a, nvec, out, ldy); \
    break;
      WQ_CHUNK(WQ_Q4_0) WQ_CHUNK(WQ_Q4_1) WQ_CHUNK(WQ_Q5_0) WQ_CHUNK(WQ_Q5_1) WQ_CHUNK(WQ_Q8_0)
      WQ_CHUNK(WQ_Q4_K) WQ_CHUNK(WQ_Q5_K) WQ_CHUNK(WQ_Q6_K)
#undef WQ_CHUNK
      default: return -1;
    }
  }
  return 0;
}
