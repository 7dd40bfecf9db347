// The device path's RMSNorm (with the residual add before it folded in), SwiGLU, GeGLU and the
// heads' norm-and-RoPE, in ggml's CPU arithmetic (row_ops.cuh says why and how the sums are
// ordered). Built with --fmad=false: the plain products and sums stay as written, as in the host
// twin (row_ops_twin.c).

#include "row_ops.cuh"

// A block per row of n: h = x (+ add), written to `sum_out` when there is an add; y = h·scale·w.
// x, add, sum_out, y: [rows, n]; w: [n]. Block: WR_NORM_THREADS threads.
extern "C" __global__ void __launch_bounds__(WR_NORM_THREADS)
    wick_rms_norm(const float* __restrict__ x, const float* __restrict__ add, const float* __restrict__ w,
                  float* __restrict__ sum_out, float* __restrict__ y, int n, float eps) {
  const long long at = (long long)blockIdx.x * n;
  const int t = threadIdx.x, lane = t % 32, warp = t / 32;
  double part = 0.0;
  for (int i = t; i < n; i += WR_NORM_THREADS) {
    const float h = add ? x[at + i] + add[at + i] : x[at + i];
    if (add) sum_out[at + i] = h;
    part += (double)(h * h);
  }
  for (int off = 16; off > 0; off /= 2) part += __shfl_xor_sync(0xffffffffu, part, off);
  __shared__ double warps[WR_WARPS];
  if (lane == 0) warps[warp] = part;
  __syncthreads();
  double sum = lane < WR_WARPS ? warps[lane] : 0.0;
  for (int off = 16; off > 0; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  const float scale = wr_norm_scale(sum, n, eps);
  for (int i = t; i < n; i += WR_NORM_THREADS) {
    const float h = add ? x[at + i] + add[at + i] : x[at + i];
    y[at + i] = h * scale * w[i];
  }
}

// silu(g)·u over rows of n, an element a thread: g and u rows `g_stride` / `u_stride` apart
// (the halves of a stacked gate|up product are read in place); y: [rows, n].
extern "C" __global__ void __launch_bounds__(WR_GLU_THREADS)
    wick_swiglu(const float* __restrict__ g, const float* __restrict__ u, float* __restrict__ y, long long total,
                int n, long long g_stride, long long u_stride) {
  const long long e = (long long)blockIdx.x * WR_GLU_THREADS + threadIdx.x;
  if (e >= total) return;
  const long long r = e / n, i = e % n;
  y[e] = wr_silu_mul(g[r * g_stride + i], u[r * u_stride + i]);
}

// gelu(g)·u by ggml's f16 table (`table`: the 65536 f16 values) over rows of n, as wick_swiglu.
extern "C" __global__ void __launch_bounds__(WR_GLU_THREADS)
    wick_geglu(const float* __restrict__ g, const float* __restrict__ u, const unsigned short* __restrict__ table,
               float* __restrict__ y, long long total, int n, long long g_stride, long long u_stride) {
  const long long e = (long long)blockIdx.x * WR_GLU_THREADS + threadIdx.x;
  if (e >= total) return;
  const long long r = e / n, i = e % n;
  y[e] = wr_geglu(g[r * g_stride + i], u[r * u_stride + i], table);
}

// A warp per row of hd (a token's head): its RMSNorm by w when there is one (Q/K norms), then
// RoPE by the token's cos/sin rows (hd/2 each) in ggml's scalar `rotate_pairs` rounding. Lane l
// takes the values l, l+32, … for the sum of squares (f64, then the butterfly) and the pairs
// l, l+32, … for the rotation. x, y: [rows, hd], rows = tokens · heads.
extern "C" __global__ void __launch_bounds__(WR_ROPE_THREADS)
    wick_norm_rope(const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ cos,
                   const float* __restrict__ sin, float* __restrict__ y, int rows, int heads, int hd, float eps,
                   int interleaved) {
  const int row = blockIdx.x * (WR_ROPE_THREADS / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= rows) return;
  const float* xr = x + (long long)row * hd;
  float* yr = y + (long long)row * hd;
  float scale = 1.0f;
  if (w) {
    double part = 0.0;
    for (int i = lane; i < hd; i += 32) part += (double)(xr[i] * xr[i]);
    for (int off = 16; off > 0; off /= 2) part += __shfl_xor_sync(0xffffffffu, part, off);
    scale = wr_norm_scale(part, hd, eps);
  }
  const int half = hd / 2;
  const float* c = cos + (long long)(row / heads) * half;
  const float* s = sin + (long long)(row / heads) * half;
  for (int i = lane; i < half; i += 32) wr_norm_rope_pair(xr, w, scale, c[i], s[i], i, half, interleaved, yr);
}
