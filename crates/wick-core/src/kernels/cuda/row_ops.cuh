/* The device path's row operations in ggml's CPU arithmetic: RMSNorm (the residual add before
 * it folded in), SwiGLU, GeGLU, and the heads' norm-and-RoPE. Shared by the CUDA kernels
 * (row_ops.cu) and their host twin (row_ops_twin.c, which candle's CPU device runs), so the two
 * agree to the bit.
 *
 * Why not candle's: candle-nn's norm sums squares in f32 in its block's order and its SiLU
 * takes the device's expf; the exact path (kernels/cpu/elementwise.rs, expf.rs) sums in f64
 * and takes ggml's own expf, and candle's RoPE rounds its products where ggml fuses some. A
 * one-ulp difference before a quantized product moves a q8 rounding there
 * (tests/device_path.rs), so the GPU's norms, gates and rotations follow the CPU's.
 *
 * The norm's sum of squares: each of WR_NORM_THREADS threads adds its strided share of the row
 * in f64, in index order; the lanes' sums are added in a butterfly (xor 16, 8, 4, 2, 1), the
 * warps' sums in a second butterfly over lanes holding them (zeros past the warps). ggml adds
 * in index order; both sums are f64 of f32 squares, so the f32 mean equals ggml's unless the
 * two f64 sums straddle an f32 rounding boundary (about n·2⁻²⁹ of rows). A head's norm (hd
 * values, a warp per row) takes the first butterfly alone. */

#ifndef WICK_ROW_OPS_CUH
#define WICK_ROW_OPS_CUH

#ifdef __CUDACC__
#define WR_FN static __host__ __device__ __forceinline__
WR_FN float wr_float(unsigned int u) { return __uint_as_float(u); }
WR_FN unsigned int wr_bits(float f) { return __float_as_uint(f); }
#else
#include <math.h>
#include <string.h>
#define WR_FN static inline __attribute__((always_inline))
WR_FN float wr_float(unsigned int u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
WR_FN unsigned int wr_bits(float f) {
  unsigned int u;
  memcpy(&u, &f, 4);
  return u;
}
#endif

/* Threads of a norm's block (a row each block): the shares and the two butterflies follow it. */
#define WR_NORM_THREADS 128
#define WR_WARPS (WR_NORM_THREADS / 32)

/* Threads of a SwiGLU block (an element each; no sums, so any split gives the same bits). */
#define WR_GLU_THREADS 256

/* Threads of a norm-and-RoPE block: a warp per head's row. */
#define WR_ROPE_THREADS 128

/* ggml's `ggml_v_expf`, one lane of its AVX2 / NEON variant (the two are the same operations;
 * kernels/cpu/expf.rs `ggml_expf`), op for op with explicit fma. */
WR_FN float wr_expf(float x) {
  const float r = wr_float(0x4B400000u); /* 0x1.8p23 */
  const float z = fmaf(x, wr_float(0x3FB8AA3Bu), r);
  const float n = z - r;
  const float b = fmaf(-n, wr_float(0x35BFBE8Eu), fmaf(-n, wr_float(0x3F317200u), x));
  const float u = b * b;
  const float p = fmaf(wr_float(0x3C072010u), b, wr_float(0x3D2B9F17u));
  const float q = fmaf(wr_float(0x3E2AAF33u), b, wr_float(0x3EFFFEDBu));
  const float j = fmaf(fmaf(p, u, q), u, wr_float(0x3F7FFFF6u) * b);
  const unsigned int e = wr_bits(z) << 23;
  const float k = wr_float(e + wr_bits(1.0f));
  if (fabsf(n) <= 126.0f) return fmaf(k, j, k);
  const unsigned int g = n <= 0.0f ? 0x82000000u : 0u;
  const float s1 = wr_float(g + 0x7F000000u);
  const float s2 = wr_float(e - g);
  if (fabsf(n) > 192.0f) return s1 * s1;
  return fmaf(s2, j, s2) * s1;
}

/* ggml `swiglu`'s element: silu(g)·u with silu(x) = x / (1 + expf(0 - x)). */
WR_FN float wr_silu_mul(float g, float u) { return (g / (1.0f + wr_expf(0.0f - g))) * u; }

/* ggml `rms_norm`'s scale from the f64 sum of squares of a row of n: 1/sqrtf(mean + ε), the
 * mean rounded to f32 first. */
WR_FN float wr_norm_scale(double sum, int n, float eps) {
  const float mean = (float)(sum / (double)n);
  return 1.0f / sqrtf(mean + eps);
}

/* f32 → f16 bits rounding to nearest even (the half crate's `f16::from_f32`, CUDA's
 * `__float2half_rn`), in integer steps so host and device agree without intrinsics. */
WR_FN unsigned int wr_f16_bits(float f) {
  const unsigned int x = wr_bits(f), sign = (x >> 16) & 0x8000u, exp = (x >> 23) & 0xffu;
  unsigned int man = x & 0x7fffffu;
  if (exp == 0xffu) return sign | 0x7c00u | (man ? 0x200u | (man >> 13) : 0u);
  const int e = (int)exp - 112; /* the f16 exponent field */
  if (e >= 31) return sign | 0x7c00u;
  if (e <= 0) {
    if (e < -10) return sign;
    man |= 0x800000u;
    const int shift = 14 - e;
    unsigned int h = man >> shift;
    const unsigned int rem = man & ((1u << shift) - 1u), halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (h & 1u))) h++;
    return sign | h;
  }
  unsigned int h = sign | ((unsigned int)e << 10) | (man >> 13);
  const unsigned int rem = man & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++; /* a carry rounds into the exponent */
  return h;
}

/* f16 bits → f32, exactly. */
WR_FN float wr_f16_value(unsigned int h) {
  const unsigned int sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  if (exp == 0u) {
    const float v = (float)man * wr_float(0x33800000u); /* man · 2⁻²⁴ */
    return sign ? -v : v;
  }
  if (exp == 31u) return wr_float(sign | 0x7f800000u | (man << 13));
  return wr_float(sign | ((exp + 112u) << 23) | (man << 13));
}

/* Gemma's GeGLU element as ggml's CPU backend makes it (`ggml_gelu`'s f16 table): 0 at or below
 * −10, x·u at or above 10, else the table's value at the f16 of x, times u. */
WR_FN float wr_geglu(float g, float u, const unsigned short* table) {
  if (g <= -10.0f) return 0.0f;
  if (g >= 10.0f) return g * u;
  return wr_f16_value(table[wr_f16_bits(g)]) * u;
}

/* ggml's scalar `rotate_pairs` as compiled (kernels/cpu/elementwise.rs `scalar_pair`): the x1
 * products rounded, the x0 ones fused. */
WR_FN float wr_rope_first(float x0, float x1, float c, float s) { return fmaf(x0, c, -(x1 * s)); }
WR_FN float wr_rope_second(float x0, float x1, float c, float s) { return fmaf(x0, s, x1 * c); }

/* Pair i of a head's row xr (hd = 2·half values) into yr: normed by `scale`·w when there is a w,
 * then rotated by the token's c, s. Pairs are (i, i + half), or (2i, 2i + 1) when interleaved. */
WR_FN void wr_norm_rope_pair(const float* xr, const float* w, float scale, float c, float s, int i, int half,
                             int interleaved, float* yr) {
  const int i0 = interleaved ? 2 * i : i, i1 = interleaved ? 2 * i + 1 : i + half;
  float x0 = xr[i0], x1 = xr[i1];
  if (w) {
    x0 = x0 * scale * w[i0];
    x1 = x1 * scale * w[i1];
  }
  yr[i0] = wr_rope_first(x0, x1, c, s);
  yr[i1] = wr_rope_second(x0, x1, c, s);
}

#endif
