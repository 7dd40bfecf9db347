//! Matmuls of f32 activations by f32 or f16 weights as ggml's `mul_mat` computes them (the
//! vision tower's weights are kept unrepacked, so llama.cpp takes these kernels):
//! llamafile's tinyBLAS for several rows when the inner size splits into 16-lane chunks, else
//! `ggml_vec_dot_f32`. The summation orders are `float_dots`'; here is only how the work is
//! cut (each output is the same sum however it is cut).

use std::borrow::Cow;

use super::feats::with_avx2_codegen;
use super::float_dots::{dot_single_f32, dot_tiled_sl, dot_tiled_sl4};
use crate::runtime::pool::{self, SyncPtr};

/// `[m, k]` rows of `x` times `[n, k]` rows of `w` → `[m, n]`, as ggml's `mul_mat` for two
/// f32 operands: tinyBLAS when `m ≥ 2` and `k % 16 == 0`, else `ggml_vec_dot_f32`.
pub fn matmul_f32(x: &[f32], m: usize, w: &[f32], n: usize, k: usize) -> Vec<f32> {
    if m >= 2 && k.is_multiple_of(16) {
        return tiled_matmul(x, m, n, k, &|j0, j1| Cow::Borrowed(&w[j0 * k..j1 * k]));
    }
    let mut y = vec![0f32; m * n];
    let yp = SyncPtr(y.as_mut_ptr());
    pool::run(m, &|r| {
        with_avx2_codegen(
            #[inline(always)]
            || {
                let xr = &x[r * k..(r + 1) * k];
                for j in 0..n {
                    let wr = &w[j * k..(j + 1) * k];
                    let v = dot_single_f32(k, |i| wr[i], |i| xr[i]);
                    // SAFETY: `y` holds m·n values, r < m and j < n; task r alone writes row r.
                    unsafe { *yp.get().add(r * n + j) = v };
                }
            },
        )
    });
    y
}

/// Output columns per task of `tiled_matmul`.
const COLS: usize = 16;

/// `y[r][j] = dot_tiled_sl(w_j, x_r)` for every row r of `x` (`[m, k]`) and column j < n,
/// with `w_cols(j0, j1)` giving columns j0..j1's weights as f32 rows: tasks over blocks of
/// `COLS` columns, blocks of 64 activation rows kept in cache while every column meets them,
/// four rows per FMA chain. Each output is tinyBLAS's sum for it, however the work is cut.
pub(crate) fn tiled_matmul<'w>(
    x: &[f32],
    m: usize,
    n: usize,
    k: usize,
    w_cols: &(dyn Fn(usize, usize) -> Cow<'w, [f32]> + Sync),
) -> Vec<f32> {
    let mut y = vec![0f32; m * n];
    let yp = SyncPtr(y.as_mut_ptr());
    pool::run(n.div_ceil(COLS), &|t| {
        let (j0, j1) = (t * COLS, ((t + 1) * COLS).min(n));
        let wf = w_cols(j0, j1);
        with_avx2_codegen(
            #[inline(always)]
            || {
                for r0 in (0..m).step_by(64) {
                    let rows = 64.min(m - r0);
                    let xs = &x[r0 * k..(r0 + rows) * k];
                    for (jj, wr) in wf.chunks_exact(k).enumerate() {
                        // SAFETY: `y` holds m·n values, r0 + r < m and j0 + jj < j1 ≤ n; task
                        // t alone writes columns j0..j1.
                        tiled_rows(wr, xs, k, rows, |r, v| unsafe {
                            *yp.get().add((r0 + r) * n + j0 + jj) = v
                        });
                    }
                }
            },
        )
    });
    y
}

/// `[m, k]` rows of `x` times an F16 weight (`[n, k]`, little-endian f16 bytes) → `[m, n]`, as
/// ggml's `mul_mat` for several rows: the activations rounded to f16, then tinyBLAS (16 lanes
/// over chunks of 16 of the f16 values as f32). Callers use it when `m ≥ 2`, `k % 16 == 0`
/// and `n % 4 == 0` (else ggml takes other kernels: `matmul::matmul` has them). Each weight
/// row is widened once per task (or read from its bytes, see above).
pub fn matmul_f16w(x: &[f32], m: usize, w: &[u8], n: usize, k: usize) -> Vec<f32> {
    // With AVX-512 the GGUF F16 path's fused 4 × 4 tiles: the same sums, several times faster.
    #[cfg(target_arch = "x86_64")]
    if super::feats::has_avx512() && m >= 2 && k.is_multiple_of(16) && n.is_multiple_of(4) {
        return super::f16_matmul::prompt_rows(x, m, w, n, k);
    }
    let x16: Vec<f32> = super::float_dots::round_to_f16(x);
    let widen = |j0: usize, j1: usize| {
        let mut v = vec![0f32; (j1 - j0) * k];
        super::float_dots::widen_f16_bytes(&w[j0 * k * 2..j1 * k * 2], &mut v);
        Cow::Owned(v)
    };
    tiled_matmul(&x16, m, n, k, &widen)
}

/// `dot_tiled_sl` of `w` against each of `rows` (`k`-long rows of `xs`), into `put(r, value)`,
/// four rows at a time.
#[inline(always)]
fn tiled_rows(w: &[f32], xs: &[f32], k: usize, rows: usize, mut put: impl FnMut(usize, f32)) {
    let mut r = 0;
    while r + 4 <= rows {
        let x = |i: usize| &xs[(r + i) * k..(r + i + 1) * k];
        let v = dot_tiled_sl4(w, [x(0), x(1), x(2), x(3)]);
        for (i, v) in v.into_iter().enumerate() {
            put(r + i, v);
        }
        r += 4;
    }
    for r in r..rows {
        put(r, dot_tiled_sl(w, &xs[r * k..(r + 1) * k]));
    }
}
