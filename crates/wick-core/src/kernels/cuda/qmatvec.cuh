/* Wick's quantized matrix-vector product: the arithmetic, shared by the CUDA kernels
 * (qmatvec.cu) and their host twin (qmatvec_twin.c, compiled for the CPU so the test suite runs
 * this very code without a GPU, and candle's CPU device can run the GPU's arithmetic).
 *
 * Why not candle's MMVQ: it rounds the activations as llama.cpp's CUDA backend does (q8_1
 * blocks of 32 for every weight type, each block's sum of the unrounded values as f16), where
 * the exact CPU path rounds them as ggml's CPU backend does (q8_0 for Q4_0/Q5_0/Q8_0, q8_1 with
 * `d·Σq` for Q4_1/Q5_1, q8_K blocks of 256 with an f32 scale for the K-quants). That is an
 * error of the size of the activation rounding itself between the GPU and the CPU
 * (benches/RESULTS.md, the H200 section). Here the activations are rounded as the exact
 * path's x86 build rounds them (kernels/cpu/q8.rs), bit for bit, every block's integer dot is
 * exact, and only the order of the float sums over blocks differs from the CPU's.
 *
 * Work split (the twin mirrors it step for step, so GPU and twin agree to the bit): one warp
 * per weight row; lane l takes the 32-value units l, l+32, … of the row. A unit is a whole
 * block of the 32-value types, a sub-block of the K-quants; the eight lanes holding one K-quant
 * block add their integers (exact), and the first of them folds the block into its float sums.
 * Each lane folds with fmaf (no contraction left to the compiler); the 32 lanes' sums are then
 * added in a butterfly (xor 16, 8, 4, 2, 1). */

#ifndef WICK_QMATVEC_CUH
#define WICK_QMATVEC_CUH

#ifdef __CUDACC__
#define WQ_FN static __host__ __device__ __forceinline__
#else
#include <math.h>
#define WQ_FN static inline
#endif
#include <stdint.h>

/* ggml's type ids of the weights these kernels take. */
enum { WQ_Q4_0 = 2, WQ_Q4_1 = 3, WQ_Q5_0 = 6, WQ_Q5_1 = 7, WQ_Q8_0 = 8, WQ_Q4_K = 12, WQ_Q5_K = 13, WQ_Q6_K = 14 };

/* A q8_0 / q8_1 activation block: d rounded to f16 (held as f32), q8_1's sum term `d·Σq`
 * rounded to f16, the 32 quants. */
typedef struct {
  float d;
  float s;
  int8_t qs[32];
} wq_a32;

/* A q8_K activation block: the f32 scale, each 32-value sub-block's integer sum, the quants. */
typedef struct {
  float d;
  int32_t sums[8];
  int8_t qs[256];
} wq_a256;

/* Weight block bytes and the activation block each type is multiplied with. */
WQ_FN int wq_block_bytes(int type) {
  switch (type) {
    case WQ_Q4_0: return 18;
    case WQ_Q4_1: return 20;
    case WQ_Q5_0: return 22;
    case WQ_Q5_1: return 24;
    case WQ_Q8_0: return 34;
    case WQ_Q4_K: return 144;
    case WQ_Q5_K: return 176;
    case WQ_Q6_K: return 210;
    default: return 0;
  }
}

WQ_FN int wq_k_quant(int type) { return type == WQ_Q4_K || type == WQ_Q5_K || type == WQ_Q6_K; }

/* q8_1 (the sum term) for the types with mins, q8_0 for the others. */
WQ_FN int wq_with_sum(int type) { return type == WQ_Q4_1 || type == WQ_Q5_1; }

WQ_FN uint32_t wq_bits(float f) {
  union { float f; uint32_t u; } c;
  c.f = f;
  return c.u;
}

WQ_FN float wq_float(uint32_t u) {
  union { float f; uint32_t u; } c;
  c.u = u;
  return c.f;
}

/* IEEE half to float, exactly (subnormals, infinities, NaN). */
WQ_FN float wq_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  if (exp == 0x1f) return wq_float(sign | 0x7f800000u | (man << 13));
  if (exp == 0) {
    /* ±0 and subnormals: man · 2⁻²⁴, exact in f32. */
    float v = (float)man * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  return wq_float(sign | ((exp + 112) << 23) | (man << 13));
}

/* Float to IEEE half, rounding to nearest even (as `half::f16::from_f32`). */
WQ_FN uint16_t wq_f32_to_f16(float f) {
  uint32_t x = wq_bits(f), sign = (x >> 16) & 0x8000, exp = (x >> 23) & 0xff, man = x & 0x7fffff;
  if (exp == 0xff) return (uint16_t)(sign | 0x7c00 | (man ? 0x200 | (man >> 13) : 0));
  int e = (int)exp - 127 + 15;
  if (e >= 0x1f) return (uint16_t)(sign | 0x7c00);
  if (e <= 0) {
    /* Subnormal half (or zero): the implicit bit shifted down, rounded to nearest even. */
    if (e < -10) return (uint16_t)sign;
    uint32_t m = man | 0x800000, shift = (uint32_t)(14 - e);
    uint32_t half = 1u << (shift - 1), rest = m & ((1u << shift) - 1), q = m >> shift;
    if (rest > half || (rest == half && (q & 1))) q++;
    return (uint16_t)(sign | q);
  }
  uint32_t q = ((uint32_t)e << 10) | (man >> 13), rest = man & 0x1fff;
  /* A carry out of the mantissa steps the exponent, up to infinity: still the right half. */
  if (rest > 0x1000 || (rest == 0x1000 && (q & 1))) q++;
  return (uint16_t)(sign | q);
}

WQ_FN float wq_f16_round(float f) { return wq_f16_to_f32(wq_f32_to_f16(f)); }

WQ_FN float wq_f16_at(const uint8_t* p) { return wq_f16_to_f32((uint16_t)(p[0] | (p[1] << 8))); }

WQ_FN uint32_t wq_u32_at(const uint8_t* p) {
  return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

/* ---- Activations, as kernels/cpu/q8.rs rounds them on x86 ---- */

/* A q8_0 block's multiplier from its largest magnitude: 127/max (ggml's AVX2 quantizer). */
WQ_FN float wq_q8_inverse(float max) { return max != 0.0f ? 127.0f / max : 0.0f; }

/* One q8_0 value: v·id rounded half to even. */
WQ_FN int wq_q8_value(float v, float id) { return (int)rintf(v * id); }

/* A q8_0/q8_1 block's d and sum term from its max and integer sum. */
WQ_FN void wq_q8_finish(wq_a32* a, float max, int sum) {
  float d = max / 127.0f;
  a->d = wq_f16_round(d);
  a->s = wq_f16_round(d * (float)sum);
}

/* One q8_K value: iscale·v rounded half to even, at most 127. */
WQ_FN int wq_q8k_value(float v, float iscale) {
  int q = (int)rintf(iscale * v);
  return q < 127 ? q : 127;
}

/* Whether a q8_K candidate (magnitude, position) beats the one held: larger, or as large and
 * earlier (the scalar quantizer keeps the first of equal magnitudes). */
WQ_FN int wq_q8k_beats(float amax, int at, float best, int best_at) {
  return amax > best || (amax == best && amax > 0.0f && at < best_at);
}

/* ---- Weights: one 32-value unit's integer dot with its activations ---- */

/* ggml's `get_scale_min_k4`: sub-block j's 6-bit scale and min. */
WQ_FN void wq_scale_min(const uint8_t* sc, int j, int* s, int* m) {
  if (j < 4) {
    *s = sc[j] & 63;
    *m = sc[j + 4] & 63;
  } else {
    *s = (sc[j + 4] & 0x0f) | ((sc[j - 4] >> 6) << 4);
    *m = (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4);
  }
}

/* Unit j of the block at `b` against 32 activation quants `y`: the integer Σ w·y (scaled by
 * the sub-block's scale for the K-quants) into *isum, and for Q4_K/Q5_K the sub-block's
 * min times the activations' sum `ysum` into *imin. */
WQ_FN void wq_unit(int type, const uint8_t* b, int j, const int8_t* y, int ysum, int* isum, int* imin) {
  int s = 0;
  *imin = 0;
  switch (type) {
    case WQ_Q4_0:
      for (int i = 0; i < 16; i++) {
        s += ((b[2 + i] & 0x0f) - 8) * y[i];
        s += ((b[2 + i] >> 4) - 8) * y[i + 16];
      }
      break;
    case WQ_Q4_1:
      for (int i = 0; i < 16; i++) {
        s += (b[4 + i] & 0x0f) * y[i];
        s += (b[4 + i] >> 4) * y[i + 16];
      }
      break;
    case WQ_Q5_0: {
      uint32_t qh = wq_u32_at(b + 2);
      for (int i = 0; i < 16; i++) {
        s += (((b[6 + i] & 0x0f) | (((qh >> i) & 1) << 4)) - 16) * y[i];
        s += (((b[6 + i] >> 4) | (((qh >> (i + 16)) & 1) << 4)) - 16) * y[i + 16];
      }
      break;
    }
    case WQ_Q5_1: {
      uint32_t qh = wq_u32_at(b + 4);
      for (int i = 0; i < 16; i++) {
        s += ((b[8 + i] & 0x0f) | (((qh >> i) & 1) << 4)) * y[i];
        s += ((b[8 + i] >> 4) | (((qh >> (i + 16)) & 1) << 4)) * y[i + 16];
      }
      break;
    }
    case WQ_Q8_0:
      for (int i = 0; i < 32; i++) s += (int8_t)b[2 + i] * y[i];
      break;
    case WQ_Q4_K: {
      const uint8_t* q = b + 16 + 32 * (j / 2);
      int shift = (j & 1) * 4, sc, mn;
      for (int i = 0; i < 32; i++) s += ((q[i] >> shift) & 0x0f) * y[i];
      wq_scale_min(b + 4, j, &sc, &mn);
      s *= sc;
      *imin = mn * ysum;
      break;
    }
    case WQ_Q5_K: {
      const uint8_t* q = b + 48 + 32 * (j / 2);
      const uint8_t* qh = b + 16;
      int shift = (j & 1) * 4, sc, mn;
      for (int i = 0; i < 32; i++) s += (((q[i] >> shift) & 0x0f) | (((qh[i] >> j) & 1) << 4)) * y[i];
      wq_scale_min(b + 4, j, &sc, &mn);
      s *= sc;
      *imin = mn * ysum;
      break;
    }
    case WQ_Q6_K: {
      /* Values 32j..32j+32: half n, quarter g of it; scales 2j and 2j+1 (16 values each). */
      int n = j / 4, g = j % 4, part[2] = {0, 0};
      const uint8_t* ql = b + 64 * n + 32 * (g & 1);
      const uint8_t* qh = b + 128 + 32 * n;
      for (int i = 0; i < 32; i++) {
        int lo = g < 2 ? (ql[i] & 0x0f) : (ql[i] >> 4);
        int hi = (qh[i] >> (2 * g)) & 3;
        part[i / 16] += ((lo | (hi << 4)) - 32) * y[i];
      }
      s = (int8_t)b[192 + 2 * j] * part[0] + (int8_t)b[192 + 2 * j + 1] * part[1];
      break;
    }
    default:
      break;
  }
  *isum = s;
}

/* The weight block's scale (and min, for the types with one) as f32. */
WQ_FN void wq_block_scales(int type, const uint8_t* b, float* d, float* dmin) {
  *dmin = 0.0f;
  switch (type) {
    case WQ_Q4_1:
    case WQ_Q5_1:
    case WQ_Q4_K:
    case WQ_Q5_K:
      *d = wq_f16_at(b);
      *dmin = wq_f16_at(b + 2);
      break;
    case WQ_Q6_K:
      *d = wq_f16_at(b + 208);
      break;
    default:
      *d = wq_f16_at(b);
      break;
  }
}

/* A block's fold into a lane's two sums: acc += isum·(dw·dy); the mins: Q4_1/Q5_1
 * mins += mw·s (added at the end), Q4_K/Q5_K mins += imin·(dmin·dy) (subtracted). */
WQ_FN void wq_fold(int type, const uint8_t* b, float yd, float ys, int isum, int imin, float* acc, float* mins) {
  float dw, mw;
  wq_block_scales(type, b, &dw, &mw);
  *acc = fmaf((float)isum, dw * yd, *acc);
  if (type == WQ_Q4_1 || type == WQ_Q5_1) {
    *mins = fmaf(mw, ys, *mins);
  } else if (type == WQ_Q4_K || type == WQ_Q5_K) {
    *mins = fmaf((float)imin, mw * yd, *mins);
  }
}

/* A row's result from its two butterfly-summed sums. */
WQ_FN float wq_result(int type, float acc, float mins) {
  return (type == WQ_Q4_K || type == WQ_Q5_K) ? acc - mins : acc + mins;
}

#endif
