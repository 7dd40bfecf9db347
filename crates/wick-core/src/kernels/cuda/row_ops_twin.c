/* The host twin of row_ops.cu: the same arithmetic (row_ops.cuh) in the same order, each
 * thread's share and both butterflies as the block does them, so its results equal the GPU's
 * to the bit. Built for the CPU by build.rs; `kernels::row_ops` calls it on candle's CPU device. */

#include <stddef.h>

#include "row_ops.cuh"

/* The butterfly the warp's shuffles make of 32 lanes' values: lane 0's result (every lane's). */
static double butterfly(double v[32]) {
  for (int off = 16; off > 0; off /= 2) {
    double next[32];
    for (int l = 0; l < 32; l++) next[l] = v[l] + v[l ^ off];
    for (int l = 0; l < 32; l++) v[l] = next[l];
  }
  return v[0];
}

/* `wick_rms_norm` over `rows` rows of n (add and sum_out may be NULL, together). */
void wick_rms_norm_twin(const float* x, const float* add, const float* w, float* sum_out, float* y, size_t rows,
                        int n, float eps) {
  for (size_t r = 0; r < rows; r++) {
    const float* xr = x + r * n;
    const float* ar = add ? add + r * n : NULL;
    double warps[32] = {0};
    for (int wp = 0; wp < WR_WARPS; wp++) {
      double lanes[32];
      for (int l = 0; l < 32; l++) {
        double part = 0.0;
        for (int i = wp * 32 + l; i < n; i += WR_NORM_THREADS) {
          const float h = ar ? xr[i] + ar[i] : xr[i];
          if (ar) sum_out[r * n + i] = h;
          part += (double)(h * h);
        }
        lanes[l] = part;
      }
      warps[wp] = butterfly(lanes);
    }
    const float scale = wr_norm_scale(butterfly(warps), n, eps);
    for (int i = 0; i < n; i++) {
      const float h = ar ? xr[i] + ar[i] : xr[i];
      y[r * n + i] = h * scale * w[i];
    }
  }
}

/* `wick_swiglu` over `rows` rows of n. */
void wick_swiglu_twin(const float* g, const float* u, float* y, size_t rows, int n, size_t g_stride,
                      size_t u_stride) {
  for (size_t r = 0; r < rows; r++)
    for (int i = 0; i < n; i++) y[r * n + i] = wr_silu_mul(g[r * g_stride + i], u[r * u_stride + i]);
}

/* `wick_norm_rope` over `rows` rows of hd (w may be NULL: RoPE alone). */
void wick_norm_rope_twin(const float* x, const float* w, const float* cos, const float* sin, float* y, size_t rows,
                         int heads, int hd, float eps, int interleaved) {
  const int half = hd / 2;
  for (size_t r = 0; r < rows; r++) {
    const float* xr = x + r * hd;
    float* yr = y + r * hd;
    float scale = 1.0f;
    if (w) {
      double lanes[32];
      for (int l = 0; l < 32; l++) {
        double part = 0.0;
        for (int i = l; i < hd; i += 32) part += (double)(xr[i] * xr[i]);
        lanes[l] = part;
      }
      scale = wr_norm_scale(butterfly(lanes), hd, eps);
    }
    const float* c = cos + (r / heads) * half;
    const float* s = sin + (r / heads) * half;
    for (int i = 0; i < half; i++) wr_norm_rope_pair(xr, w, scale, c[i], s[i], i, half, interleaved, yr);
  }
}

/* `wick_geglu` over `rows` rows of n. */
void wick_geglu_twin(const float* g, const float* u, const unsigned short* table, float* y, size_t rows, int n,
                     size_t g_stride, size_t u_stride) {
  for (size_t r = 0; r < rows; r++)
    for (int i = 0; i < n; i++) y[r * n + i] = wr_geglu(g[r * g_stride + i], u[r * u_stride + i], table);
}
