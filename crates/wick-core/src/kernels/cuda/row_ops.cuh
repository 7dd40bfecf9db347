/* The device path's row operations in ggml's CPU arithmetic: RMSNorm (the residual add before
 * it folded in), SwiGLU, and the heads' norm-and-RoPE. Shared by the CUDA kernels (row_ops.cu)
 * and their host twin (row_ops_twin.c, which candle's CPU device runs), so the two agree to the
 * bit.
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

/* ggml's scalar `rotate_pairs` as compiled (kernels/cpu/elementwise.rs `scalar_pair`): the x1
 * products rounded, the x0 ones fused. */
WR_FN float wr_rope_first(float x0, float x1, float c, float s) { return fmaf(x0, c, -(x1 * s)); }
WR_FN float wr_rope_second(float x0, float x1, float c, float s) { return fmaf(x0, s, x1 * c); }

#endif
