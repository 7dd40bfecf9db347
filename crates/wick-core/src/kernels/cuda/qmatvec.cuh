/* Wick's quantized matrix-vector product: the arithmetic, shared by the CUDA kernels
 * (qmatvec.cu) and their host twin (qmatvec_twin.c, compiled for the CPU so the test suite runs
 * this very code without a GPU, and candle's CPU device can run the GPU's arithmetic).
 *
 * Why not candle's MMVQ: it rounds the activations as llama.cpp's CUDA backend does (q8_1
 * blocks of 32 for every weight type, each block's sum of the unrounded values as f16), where
 * the exact CPU path rounds them as ggml's CPU backend does (q8_0 for Q4_0/Q5_0/Q8_0, q8_1 with
 * `d·Σq` for Q4_1/Q5_1, q8_K blocks of 256 with an f32 scale for the K-quants). That is an
 * error of the size of the activation rounding itself between the GPU and the CPU
 * (benches/RESULTS.md, the H200 section). Here the activations are rounded as the host's exact
 * path rounds them (kernels/cpu/q8.rs, its x86 or aarch64 rules), bit for bit, every block's
 * integer dot is exact, and only the order of the float sums over blocks differs from the CPU's.
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
#define WQ_FN static inline __attribute__((always_inline))
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

/* Weight block bytes (0: a type these kernels do not take). */
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

/* Whether the type's mins take q8_1's sum term (Q4_1, Q5_1; the K-quants' take q8_K's sums). */
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

/* ---- Activations, as kernels/cpu/q8.rs rounds them ----
 * `arm`: the host's exact path is an aarch64 build, which rounds as ggml's NEON code does
 * (q8_0 scaled by 1/d; q8_K rounding the exact product iscale·v, one fma); else as its x86
 * code does (q8_0 scaled by 127/max; q8_K rounding the f32 product). */

/* A q8_0 block's multiplier from its largest magnitude. */
WQ_FN float wq_q8_inverse(float max, int arm) {
  if (arm) {
    const float d = max / 127.0f;
    return d != 0.0f ? 1.0f / d : 0.0f;
  }
  return max != 0.0f ? 127.0f / max : 0.0f;
}

/* One q8_0 value: v·id rounded half to even. */
WQ_FN int wq_q8_value(float v, float id) { return (int)rintf(v * id); }

/* A q8_0/q8_1 block's d and sum term from its max and integer sum. */
WQ_FN void wq_q8_finish(wq_a32* a, float max, int sum) {
  float d = max / 127.0f;
  a->d = wq_f16_round(d);
  a->s = wq_f16_round(d * (float)sum);
}

/* One q8_K value: iscale·v rounded half to even, at most 127. */
WQ_FN int wq_q8k_value(float v, float iscale, int arm) {
  /* arm: ggml's `nearest_int` (add 1.5·2²³, keep the low mantissa bits) fused into one fma. */
  int q = arm ? (int)(wq_bits(fmaf(iscale, v, 12582912.0f)) & 0x007fffff) - 0x00400000 : (int)rintf(iscale * v);
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

/* A unit's 32 weight values as signed bytes, four to a word (little-endian: value i in byte
 * i % 4 of word i / 4), with its integer scales: sc[0] for the K-quants' 32 values (Q6_K: sc[0]
 * the first 16, sc[1] the last 16), mn the sub-block's min (Q4_K, Q5_K). Decoded once per unit,
 * then dotted with every activation row. */
typedef struct {
  int32_t q[8];
  int sc[2];
  int mn;
  float d, dmin; /* the block's scale and min (wq_block_scales) */
} wq_unit;

/* Σ of the byte products of words [from, to) of a and b (exact in any order: __dp4a on the GPU,
 * a byte loop the host compiler vectorizes). */
WQ_FN int wq_dot_words(const int32_t* a, const int32_t* b, int from, int to) {
  int c = 0;
#ifdef __CUDA_ARCH__
  for (int w = from; w < to; w++) c = __dp4a(a[w], b[w], c);
#else
  const int8_t *x = (const int8_t*)a, *y = (const int8_t*)b;
  for (int i = 4 * from; i < 4 * to; i++) c += x[i] * y[i];
#endif
  return c;
}

/* Four bytes at an even address, little-endian (every block field read so is at an even
 * offset of a block of even size): two 16-bit loads on the GPU. */
WQ_FN uint32_t wq_word_at(const uint8_t* p) {
#ifdef __CUDA_ARCH__
  const uint16_t* h = (const uint16_t*)p;
  return (uint32_t)h[0] | ((uint32_t)h[1] << 16);
#else
  return wq_u32_at(p);
#endif
}

/* Each byte of `v` (all below 128) minus the byte `c` repeats, as signed bytes: no borrow
 * crosses a byte, since each byte is first lifted by 128. */
WQ_FN uint32_t wq_sub_bytes(uint32_t v, uint32_t c) { return ((v | 0x80808080u) - c) ^ 0x80808080u; }

/* Bits 0..3 of `bits` to bit 4 of bytes 0..3. */
WQ_FN uint32_t wq_spread4(uint32_t bits) {
  return ((bits & 1u) << 4) | ((bits & 2u) << 11) | ((bits & 4u) << 18) | ((bits & 8u) << 25);
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

/* Unit j of the block at `b` (a whole block of the 32-value types, sub-block j of a K-quant). */
WQ_FN void wq_unit_load(int type, const uint8_t* b, int j, wq_unit* u) {
  uint32_t* q = (uint32_t*)u->q;
  u->sc[0] = u->sc[1] = u->mn = 0;
  wq_block_scales(type, b, &u->d, &u->dmin);
  switch (type) {
    case WQ_Q4_0:
    case WQ_Q4_1: {
      /* Low nibbles: values 0..16, high: 16..32; Q4_0 less 8. */
      const uint8_t* qs = b + (type == WQ_Q4_0 ? 2 : 4);
      for (int w = 0; w < 4; w++) {
        uint32_t x = wq_word_at(qs + 4 * w), lo = x & 0x0f0f0f0fu, hi = (x >> 4) & 0x0f0f0f0fu;
        q[w] = type == WQ_Q4_0 ? wq_sub_bytes(lo, 0x08080808u) : lo;
        q[4 + w] = type == WQ_Q4_0 ? wq_sub_bytes(hi, 0x08080808u) : hi;
      }
      break;
    }
    case WQ_Q5_0:
    case WQ_Q5_1: {
      /* As Q4_x with bit i of qh on top of value i; Q5_0 less 16. */
      const uint32_t qh = wq_word_at(b + (type == WQ_Q5_0 ? 2 : 4));
      const uint8_t* qs = b + (type == WQ_Q5_0 ? 6 : 8);
      for (int w = 0; w < 4; w++) {
        uint32_t x = wq_word_at(qs + 4 * w);
        uint32_t lo = (x & 0x0f0f0f0fu) | wq_spread4(qh >> (4 * w));
        uint32_t hi = ((x >> 4) & 0x0f0f0f0fu) | wq_spread4(qh >> (16 + 4 * w));
        q[w] = type == WQ_Q5_0 ? wq_sub_bytes(lo, 0x10101010u) : lo;
        q[4 + w] = type == WQ_Q5_0 ? wq_sub_bytes(hi, 0x10101010u) : hi;
      }
      break;
    }
    case WQ_Q8_0:
      for (int w = 0; w < 8; w++) q[w] = wq_word_at(b + 2 + 4 * w);
      break;
    case WQ_Q4_K:
    case WQ_Q5_K: {
      /* Sub-block j: the low (j even) or high nibbles of the pair's 32 bytes; Q5_K adds bit j
       * of qh[i] as bit 4. */
      const uint8_t* qs = b + (type == WQ_Q4_K ? 16 : 48) + 32 * (j / 2);
      for (int w = 0; w < 8; w++) {
        uint32_t v = (wq_word_at(qs + 4 * w) >> ((j & 1) * 4)) & 0x0f0f0f0fu;
        if (type == WQ_Q5_K) v |= ((wq_word_at(b + 16 + 4 * w) >> j) & 0x01010101u) << 4;
        q[w] = v;
      }
      wq_scale_min(b + 4, j, &u->sc[0], &u->mn);
      break;
    }
    case WQ_Q6_K: {
      /* Values 32j..32j+32: half n, quarter g of it; 6 bits less 32. */
      const int n = j / 4, g = j % 4;
      for (int w = 0; w < 8; w++) {
        uint32_t x = wq_word_at(b + 64 * n + 32 * (g & 1) + 4 * w);
        uint32_t lo = (g < 2 ? x : x >> 4) & 0x0f0f0f0fu;
        uint32_t hi = (wq_word_at(b + 128 + 32 * n + 4 * w) >> (2 * g)) & 0x03030303u;
        q[w] = wq_sub_bytes(lo | (hi << 4), 0x20202020u);
      }
      u->sc[0] = (int8_t)b[192 + 2 * j];
      u->sc[1] = (int8_t)b[192 + 2 * j + 1];
      break;
    }
    default:
      for (int w = 0; w < 8; w++) q[w] = 0;
      break;
  }
}

/* A unit's integer sums from its two half dots with 32 activation quants (values 0..16 and
 * 16..32, however they were summed): the integer Σ w·y into *isum (times the K-quants' scales)
 * and, for Q4_K/Q5_K, the min times the activations' sum `ysum` into *imin. */
WQ_FN void wq_unit_sums(int type, const wq_unit* u, int lo, int hi, int ysum, int* isum, int* imin) {
  if (type == WQ_Q6_K) {
    *isum = u->sc[0] * lo + u->sc[1] * hi;
  } else if (wq_k_quant(type)) {
    *isum = u->sc[0] * (lo + hi);
  } else {
    *isum = lo + hi;
  }
  *imin = u->mn * ysum;
}

/* The same against the quants `y` themselves (four to a word). */
WQ_FN void wq_unit_dot(int type, const wq_unit* u, const int32_t* y, int ysum, int* isum, int* imin) {
  wq_unit_sums(type, u, wq_dot_words(u->q, y, 0, 4), wq_dot_words(u->q, y, 4, 8), ysum, isum, imin);
}

/* A block's fold into a lane's two sums (`u`: any of its units): acc += isum·(dw·dy); the mins: Q4_1/Q5_1
 * mins += mw·s (added at the end), Q4_K/Q5_K mins += imin·(dmin·dy) (subtracted). */
WQ_FN void wq_fold(int type, const wq_unit* u, float yd, float ys, int isum, int imin, float* acc, float* mins) {
  *acc = fmaf((float)isum, u->d * yd, *acc);
  if (wq_with_sum(type)) {
    *mins = fmaf(u->dmin, ys, *mins);
  } else if (type == WQ_Q4_K || type == WQ_Q5_K) {
    *mins = fmaf((float)imin, u->dmin * yd, *mins);
  }
}

/* A row's result from its two butterfly-summed sums. */
WQ_FN float wq_result(int type, float acc, float mins) {
  return (type == WQ_Q4_K || type == WQ_Q5_K) ? acc - mins : acc + mins;
}

#endif
