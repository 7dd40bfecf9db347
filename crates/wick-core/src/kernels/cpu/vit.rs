//! The vision encoder's CPU ops, rounding as llama.cpp's CPU backend rounds the ops of
//! `clip.cpp`'s graph (AVX-512 build, flash attention off):
//! - `layer_norm`: `ggml_norm` (sum in f64, centred squares in 16-lane reductions summed in
//!   f64, `1/sqrtf(var+ε)`), then `ggml_mul` and `ggml_add`;
//! - `gelu`: `ggml_gelu`'s table of f16 values indexed by the f16-rounded input;
//! - `matmul_f32`: f32 weights: llamafile's tinyBLAS for several rows when the inner size
//!   splits into 16-lane chunks, else `ggml_vec_dot_f32`;
//! - `attention`: bidirectional, per head `K·Q` (`ggml_vec_dot_f32`: the views are not
//!   contiguous, so tinyBLAS is skipped), `soft_max_ext` in f32 (ggml's vector `expf`, sums in
//!   f64), then `V·P` through tinyBLAS (or `ggml_vec_dot_f32` when positions % 16 ≠ 0);
//! - `resize_antialias`: `ggml_interpolate(BILINEAR | ANTIALIAS)` (the position embedding);
//! - `patch_embed`: `ggml_conv_2d` as an F16 im2col and a tinyBLAS f16 matmul (an F32 kernel
//!   is converted to f16, ggml's dot type for the F16 im2col).
//!
//! Scalar statements that GCC contracts into FMAs in llama.cpp's build are `mul_add` here
//! (the interpolation's `val += pixel * weight`; not `ggml_vec_dot_f32`'s tail, which stays
//! a multiply and an add). With these orders the embeddings equal llama.cpp's bit for bit
//! (`tests/vision.rs`).

use half::f16;

use super::blocks::reduce16;
use super::expf::{exp_variant, ggml_expf, simd_width};
use super::feats::fast;
use super::float_dots::{dot_head64, dot_tiled};
use crate::runtime::pool::{self, SyncPtr};

/// `ggml_vec_dot_f32` (AVX-512): 4 accumulators of 16 lanes over steps of 64, folded
/// (a0+a2)+(a1+a3), the 16-lane tree sum, then the tail (n % 64) added in f32 (not fused).
#[inline(always)]
pub fn dot_single_f32(n: usize, x: impl Fn(usize) -> f32, y: impl Fn(usize) -> f32) -> f32 {
    let mut sum = dot_head64(n, &x, &y);
    for i in n & !63..n {
        sum += x(i) * y(i);
    }
    sum
}

/// `[m, k]` rows of `x` times `[n, k]` rows of `w` → `[m, n]`, as ggml's `mul_mat` for two
/// f32 operands: tinyBLAS when `m ≥ 2` and `k % 16 == 0`, else `ggml_vec_dot_f32`.
pub fn matmul_f32(x: &[f32], m: usize, w: &[f32], n: usize, k: usize) -> Vec<f32> {
    if m >= 2 && k.is_multiple_of(16) {
        return tiled_matmul(x, m, n, k, &|j0, j1| std::borrow::Cow::Borrowed(&w[j0 * k..j1 * k]));
    }
    let mut y = vec![0f32; m * n];
    let yp = SyncPtr(y.as_mut_ptr());
    let tiled = m >= 2 && k.is_multiple_of(16);
    pool::run(m, &|r| {
        fast(
            #[inline(always)]
            || {
                let xr = &x[r * k..(r + 1) * k];
                for j in 0..n {
                    let wr = &w[j * k..(j + 1) * k];
                    let v = if tiled {
                        dot_tiled(k, |i| wr[i], |i| xr[i])
                    } else {
                        dot_single_f32(k, |i| wr[i], |i| xr[i])
                    };
                    // Safety: task r alone writes row r.
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
fn tiled_matmul<'w>(
    x: &[f32],
    m: usize,
    n: usize,
    k: usize,
    w_cols: &(dyn Fn(usize, usize) -> std::borrow::Cow<'w, [f32]> + Sync),
) -> Vec<f32> {
    let mut y = vec![0f32; m * n];
    let yp = SyncPtr(y.as_mut_ptr());
    pool::run(n.div_ceil(COLS), &|t| {
        let (j0, j1) = (t * COLS, ((t + 1) * COLS).min(n));
        let wf = w_cols(j0, j1);
        fast(
            #[inline(always)]
            || {
                for r0 in (0..m).step_by(64) {
                    let rows = 64.min(m - r0);
                    let xs = &x[r0 * k..(r0 + rows) * k];
                    for (jj, wr) in wf.chunks_exact(k).enumerate() {
                        // Safety: task t alone writes columns j0..j1.
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
/// row is widened once per task.
pub fn matmul_f16w(x: &[f32], m: usize, w: &[u8], n: usize, k: usize) -> Vec<f32> {
    let x16: Vec<f32> = x.iter().map(|&v| f16::from_f32(v).to_f32()).collect();
    let widen = |j0: usize, j1: usize| {
        let v: Vec<f32> = w[j0 * k * 2..j1 * k * 2]
            .chunks_exact(2)
            .map(|b| f16::from_le_bytes([b[0], b[1]]).to_f32())
            .collect();
        std::borrow::Cow::Owned(v)
    };
    tiled_matmul(&x16, m, n, k, &widen)
}

/// `ggml_norm` over rows of `w.len()` values, then `· w + b`.
pub fn layer_norm(x: &[f32], w: &[f32], b: &[f32], eps: f32) -> Vec<f32> {
    let n = w.len();
    let mut y = vec![0f32; x.len()];
    let yp = SyncPtr(y.as_mut_ptr());
    let lanes = if simd_width(exp_variant()) == 16 { 16 } else { 8 };
    pool::run(x.len() / n, &|r| {
        let xr = &x[r * n..(r + 1) * n];
        // Safety: task r alone writes row r.
        let yr = unsafe { std::slice::from_raw_parts_mut(yp.get().add(r * n), n) };
        let sum: f64 = xr.iter().map(|&v| v as f64).sum();
        let mean = sum as f32 / n as f32;
        let mut var = 0f64;
        let mut i = 0;
        while i + lanes <= n {
            let mut sq = [0f32; 16];
            for l in 0..lanes {
                let v = xr[i + l] - mean;
                yr[i + l] = v;
                sq[l] = v * v;
            }
            var += if lanes == 16 { reduce16(&sq) } else { super::blocks::hsum8(sq[..8].try_into().unwrap()) }
                as f64;
            i += lanes;
        }
        for j in i..n {
            let v = xr[j] - mean;
            yr[j] = v;
            var += (v * v) as f64;
        }
        let var = (var / n as f64) as f32;
        let scale = 1.0f32 / (var + eps).sqrt();
        for j in 0..n {
            yr[j] = yr[j] * scale * w[j] + b[j];
        }
    });
    y
}

fn gelu_table() -> &'static [u16] {
    static T: std::sync::OnceLock<Vec<u16>> = std::sync::OnceLock::new();
    T.get_or_init(|| {
        const A: f32 = 0.044715;
        const S: f32 = 0.797_884_6;
        (0..=u16::MAX)
            .map(|bits| {
                let x = f16::from_bits(bits).to_f32();
                let inner = S * x * (A * x).mul_add(x, 1.0);
                f16::from_f32(0.5 * x * (1.0 + inner.tanh())).to_bits()
            })
            .collect()
    })
}

/// `ggml_gelu` (tanh form) in place: 0 below −10, x above 10, else the f16 table; spread over
/// the pool.
pub fn gelu(x: &mut [f32]) {
    let t = gelu_table();
    const PIECE: usize = 4096;
    let xp = SyncPtr(x.as_mut_ptr());
    let n = x.len();
    pool::run(n.div_ceil(PIECE), &|p| {
        fast(
            #[inline(always)]
            || {
                let (a, b) = (p * PIECE, ((p + 1) * PIECE).min(n));
                // Safety: task p alone touches elements a..b.
                let part = unsafe { std::slice::from_raw_parts_mut(xp.get().add(a), b - a) };
                for v in part.iter_mut() {
                    *v = if *v <= -10.0 {
                        0.0
                    } else if *v >= 10.0 {
                        *v
                    } else {
                        f16::from_bits(t[f16::from_f32(*v).to_bits() as usize]).to_f32()
                    };
                }
            },
        )
    });
}

/// `ggml_soft_max_ext(·, no mask, scale)` on one row, in place.
#[inline(always)]
fn softmax_row(w: &mut [f32], scale: f32) {
    let var = exp_variant();
    let lanes = simd_width(var);
    for v in w.iter_mut() {
        *v *= scale;
    }
    let max = w.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0f64;
    let whole = if lanes > 1 { w.len() / lanes * lanes } else { 0 };
    #[cfg(target_arch = "x86_64")]
    if var == super::expf::ExpVariant::Avx512 {
        // Safety: the Avx512 variant is only detected with AVX-512 F and DQ.
        sum = unsafe { exp_chunks16(&mut w[..whole], max) };
    }
    #[cfg(target_arch = "x86_64")]
    let whole_done = var == super::expf::ExpVariant::Avx512;
    #[cfg(not(target_arch = "x86_64"))]
    let whole_done = false;
    for c in w[..if whole_done { 0 } else { whole }].chunks_mut(lanes) {
        let mut l = [0f32; 16];
        for (e, s) in c.iter_mut().zip(l.iter_mut()) {
            *e = ggml_expf(*e - max, var);
            *s = *e;
        }
        sum +=
            if lanes == 16 { reduce16(&l) } else { super::blocks::hsum8(l[..8].try_into().unwrap()) } as f64;
    }
    for e in w[whole..].iter_mut() {
        *e = (*e - max).exp();
        sum += *e as f64;
    }
    let inv = (1.0 / sum) as f32;
    for e in w.iter_mut() {
        *e *= inv;
    }
}

/// `dot_single_f32` on two slices of one length (bounds known: the lanes vectorize).
#[inline(always)]
fn dot_single_sl(x: &[f32], y: &[f32]) -> f32 {
    let np = x.len() & !63;
    let mut acc = [[0f32; 16]; 4];
    for (xc, yc) in x[..np].chunks_exact(64).zip(y[..np].chunks_exact(64)) {
        for (j, a) in acc.iter_mut().enumerate() {
            for l in 0..16 {
                a[l] = xc[16 * j + l].mul_add(yc[16 * j + l], a[l]);
            }
        }
    }
    let mut folded = [0f32; 16];
    for l in 0..16 {
        folded[l] = (acc[0][l] + acc[2][l]) + (acc[1][l] + acc[3][l]);
    }
    let mut sum = reduce16(&folded);
    for (a, b) in x[np..].iter().zip(&y[np..]) {
        sum += a * b;
    }
    sum
}

/// `dot_tiled` on two slices of one length, a multiple of 16.
#[inline(always)]
fn dot_tiled_sl(x: &[f32], y: &[f32]) -> f32 {
    let mut acc = [0f32; 16];
    for (xc, yc) in x.chunks_exact(16).zip(y.chunks_exact(16)) {
        for l in 0..16 {
            acc[l] = xc[l].mul_add(yc[l], acc[l]);
        }
    }
    reduce16(&acc)
}

/// `dot_tiled_sl(w, x[t])` for four `x` rows at once (independent accumulators, so the
/// FMAs overlap); each result is computed exactly as alone.
#[inline(always)]
fn dot_tiled_sl4(w: &[f32], x: [&[f32]; 4]) -> [f32; 4] {
    let mut acc = [[0f32; 16]; 4];
    let k = w.len() / 16 * 16;
    for c in (0..k).step_by(16) {
        let wc: &[f32; 16] = w[c..c + 16].try_into().unwrap_or(&[0.0; 16]);
        for (a, xr) in acc.iter_mut().zip(&x) {
            let xc: &[f32; 16] = xr[c..c + 16].try_into().unwrap_or(&[0.0; 16]);
            for l in 0..16 {
                a[l] = wc[l].mul_add(xc[l], a[l]);
            }
        }
    }
    acc.map(|a| reduce16(&a))
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

/// `reduce16` of 16 accumulators for 16 outputs at once (`f[lane][output]`): the same
/// additions per output, done lane-parallel over the outputs.
#[inline(always)]
fn reduce16_x16(f: &[[f32; 16]; 16]) -> [f32; 16] {
    let mut t = [[0f32; 16]; 8];
    for i in 0..8 {
        for o in 0..16 {
            t[i][o] = f[i + 8][o] + f[i][o];
        }
    }
    let mut out = [0f32; 16];
    for o in 0..16 {
        let h = [t[4][o] + t[0][o], t[5][o] + t[1][o], t[6][o] + t[2][o], t[7][o] + t[3][o]];
        out[o] = (h[0] + h[2]) + (h[1] + h[3]);
    }
    out
}

/// 16 dots `Σ x_o[e]·y[e]` at once, output o's values at `x(e)[o]`, in `ggml_vec_dot_f32`'s
/// order (`tiled = false`) or tinyBLAS's (`tiled`, len % 16 == 0): the same operations per
/// output as `dot_single_sl` / `dot_tiled_sl`, lane-parallel over the outputs.
#[inline(always)]
fn dots16<'a>(
    len: usize,
    tiled: bool,
    x: impl Fn(usize) -> &'a [f32; 16],
    y: impl Fn(usize) -> f32,
) -> [f32; 16] {
    if tiled {
        let mut acc = [[0f32; 16]; 16];
        for base in (0..len).step_by(16) {
            for (l, a) in acc.iter_mut().enumerate() {
                let (xe, ye) = (x(base + l), y(base + l));
                for o in 0..16 {
                    a[o] = xe[o].mul_add(ye, a[o]);
                }
            }
        }
        return reduce16_x16(&acc);
    }
    let np = len & !63;
    let mut acc = [[[0f32; 16]; 16]; 4];
    for base in (0..np).step_by(64) {
        for (j, aj) in acc.iter_mut().enumerate() {
            for (l, a) in aj.iter_mut().enumerate() {
                let e = base + 16 * j + l;
                let (xe, ye) = (x(e), y(e));
                for o in 0..16 {
                    a[o] = xe[o].mul_add(ye, a[o]);
                }
            }
        }
    }
    let mut folded = [[0f32; 16]; 16];
    for l in 0..16 {
        for o in 0..16 {
            folded[l][o] = (acc[0][l][o] + acc[2][l][o]) + (acc[1][l][o] + acc[3][l][o]);
        }
    }
    let mut sum = reduce16_x16(&folded);
    for e in np..len {
        let (xe, ye) = (x(e), y(e));
        for o in 0..16 {
            sum[o] += xe[o] * ye;
        }
    }
    sum
}

/// `e = expf(w − max)` in place over whole 16-lane chunks with ggml's AVX-512 `expf`, each
/// chunk's tree sum added in f64; returns the sum.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512dq")]
unsafe fn exp_chunks16(w: &mut [f32], max: f32) -> f64 {
    use std::arch::x86_64::*;
    let m = _mm512_set1_ps(max);
    let mut sum = 0f64;
    for c in w.chunks_exact_mut(16) {
        let e = super::expf::expf16(_mm512_sub_ps(_mm512_loadu_ps(c.as_ptr()), m));
        _mm512_storeu_ps(c.as_mut_ptr(), e);
        let l: &[f32; 16] = (&*c).try_into().unwrap_or(&[0.0; 16]);
        sum += reduce16(l) as f64;
    }
    sum
}

/// `dots16` with AVX-512 registers for its two hot shapes: a K·Q block (`len` in 64..128,
/// one 64-step then the tail) and a tiled V·P block. `None` for other shapes.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn dots16_avx512(len: usize, tiled: bool, x: &[f32], y: &[f32]) -> Option<[f32; 16]> {
    use std::arch::x86_64::*;
    let xv = |e: usize| _mm512_loadu_ps(x.as_ptr().add(e * 16));
    let yv = |e: usize| _mm512_set1_ps(y[e]);
    let mut f = [_mm512_setzero_ps(); 16];
    if tiled {
        for base in (0..len).step_by(16) {
            for (l, a) in f.iter_mut().enumerate() {
                *a = _mm512_fmadd_ps(xv(base + l), yv(base + l), *a);
            }
        }
    } else if (64..128).contains(&len) {
        // One 64-step from zero: each accumulator is one rounded product, folded (a0+a2)+(a1+a3).
        for (l, a) in f.iter_mut().enumerate() {
            let p = |e: usize| _mm512_mul_ps(xv(e), yv(e));
            *a = _mm512_add_ps(_mm512_add_ps(p(l), p(32 + l)), _mm512_add_ps(p(16 + l), p(48 + l)));
        }
    } else {
        return None;
    }
    let mut t = [_mm512_setzero_ps(); 8];
    for i in 0..8 {
        t[i] = _mm512_add_ps(f[i + 8], f[i]);
    }
    let h = [0, 1, 2, 3].map(|k| _mm512_add_ps(t[k + 4], t[k]));
    let mut sum = _mm512_add_ps(_mm512_add_ps(h[0], h[2]), _mm512_add_ps(h[1], h[3]));
    if !tiled {
        for e in 64..len {
            sum = _mm512_add_ps(sum, _mm512_mul_ps(xv(e), yv(e)));
        }
    }
    let mut out = [0f32; 16];
    _mm512_storeu_ps(out.as_mut_ptr(), sum);
    Some(out)
}

/// `dots16` over contiguous blocks: `x` holds `len` rows of 16 (output-interleaved) values.
#[inline(always)]
fn dots16_blocks(len: usize, tiled: bool, x: &[f32], y: &[f32]) -> [f32; 16] {
    #[cfg(target_arch = "x86_64")]
    if super::feats::has_avx512() {
        // Safety: AVX-512 F checked; `x` has len·16 values and `y` len.
        if let Some(o) = unsafe { dots16_avx512(len, tiled, x, y) } {
            return o;
        }
    }
    dots16(len, tiled, |e| x[e * 16..e * 16 + 16].try_into().unwrap_or(&[0.0; 16]), |e| y[e])
}

/// Queries per attention task: a head's K and V rows are read once for this many queries.
const QUERY_BLOCK: usize = 16;

/// Bidirectional multi-head attention: `q`, `k`, `v` are `[n, heads·hd]`; returns the same.
/// Each output is computed in ggml's order whatever the blocking (see the module doc): K·Q
/// sixteen keys at a time, V·P sixteen channels at a time, lane-parallel over those outputs.
pub fn attention(q: &[f32], k: &[f32], v: &[f32], n: usize, heads: usize, scale: f32) -> Vec<f32> {
    let d = q.len() / n;
    let hd = d / heads;
    let mut out = vec![0f32; n * d];
    let op = SyncPtr(out.as_mut_ptr());
    // V transposed (row (h, c) holds V[·, h·hd + c] over positions) for channels past the
    // last block of 16.
    let transpose = |m: &[f32]| {
        let mut t = vec![0f32; d * n];
        for j in 0..n {
            for c in 0..d {
                t[c * n + j] = m[j * d + c];
            }
        }
        t
    };
    let vt = transpose(v);
    let tiled = n.is_multiple_of(16);
    let n16 = n / 16 * 16;
    // Blocks of 16 outputs' operands, contiguous: K as [head][key block][e][16 keys], V as
    // [head][channel block][position][16 channels] (strided rows would alias in the L1).
    let (nb, ncb) = (n16 / 16, hd / 16);
    let mut kb = vec![0f32; heads * nb * hd * 16];
    for h in 0..heads {
        for jb in 0..nb {
            for e in 0..hd {
                for o in 0..16 {
                    kb[((h * nb + jb) * hd + e) * 16 + o] = k[(jb * 16 + o) * d + h * hd + e];
                }
            }
        }
    }
    let mut vb = vec![0f32; heads * ncb * n * 16];
    for h in 0..heads {
        for cb in 0..ncb {
            for j in 0..n {
                let at = ((h * ncb + cb) * n + j) * 16;
                vb[at..at + 16].copy_from_slice(&v[j * d + h * hd + cb * 16..j * d + h * hd + cb * 16 + 16]);
            }
        }
    }
    let blocks = n.div_ceil(QUERY_BLOCK);
    pool::run(heads * blocks, &|t| {
        fast(
            #[inline(always)]
            || {
                let (h, i0) = (t / blocks, (t % blocks) * QUERY_BLOCK);
                let rows = QUERY_BLOCK.min(n - i0);
                let (lo, hi) = (h * hd, (h + 1) * hd);
                let mut p = vec![0f32; rows * n];
                for r in 0..rows {
                    let i = i0 + r;
                    let qi = &q[i * d + lo..i * d + hi];
                    let pr = &mut p[r * n..(r + 1) * n];
                    for j0 in (0..n16).step_by(16) {
                        let blk = &kb[(h * nb + j0 / 16) * hd * 16..(h * nb + j0 / 16 + 1) * hd * 16];
                        pr[j0..j0 + 16].copy_from_slice(&dots16_blocks(hd, false, blk, qi));
                    }
                    for j in n16..n {
                        pr[j] = dot_single_sl(&k[j * d + lo..j * d + hi], qi);
                    }
                }
                for pr in p.chunks_exact_mut(n) {
                    softmax_row(pr, scale);
                }
                for (r, pr) in p.chunks_exact(n).enumerate() {
                    let row = (i0 + r) * d;
                    let mut c = 0;
                    while c + 16 <= hd {
                        let at = lo + c;
                        let blk = &vb[(h * ncb + c / 16) * n * 16..(h * ncb + c / 16 + 1) * n * 16];
                        let o = dots16_blocks(n, tiled, blk, pr);
                        // Safety: task (h, block) alone writes its rows' head-h columns.
                        unsafe { std::ptr::copy_nonoverlapping(o.as_ptr(), op.get().add(row + at), 16) };
                        c += 16;
                    }
                    for c in c..hd {
                        let vr = &vt[(lo + c) * n..(lo + c + 1) * n];
                        let o = if tiled { dot_tiled_sl(vr, pr) } else { dot_single_sl(vr, pr) };
                        // Safety: as above.
                        unsafe { *op.get().add(row + lo + c) = o };
                    }
                }
            },
        )
    });
    out
}

/// `ggml_interpolate(BILINEAR | ANTIALIAS)` of a `side`×`side` grid of `d`-wide rows (row
/// y·side + x) to `width`×`height` rows (row y·width + x).
pub fn resize_antialias(src: &[f32], side: usize, d: usize, width: usize, height: usize) -> Vec<f32> {
    let sf0 = width as f32 / side as f32;
    let sf1 = height as f32 / side as f32;
    let tri = |x: f32| (1.0 - x.abs()).max(0.0);
    let support0 = 1.0f32.max(1.0 / sf0);
    let support1 = 1.0f32.max(1.0 / sf1);
    let (inv0, inv1) = (1.0 / support0, 1.0 / support1);
    let mut out = vec![0f32; width * height * d];
    for i1 in 0..height {
        let y = (i1 as f32 + 0.5) / sf1;
        let y_min = ((y - support1 + 0.5) as i64).max(0) as usize;
        let y_max = ((y + support1 + 0.5) as i64).min(side as i64) as usize;
        for i0 in 0..width {
            let x = (i0 as f32 + 0.5) / sf0;
            let x_min = ((x - support0 + 0.5) as i64).max(0) as usize;
            let x_max = ((x + support0 + 0.5) as i64).min(side as i64) as usize;
            let row = &mut out[(i1 * width + i0) * d..(i1 * width + i0 + 1) * d];
            for (c, o) in row.iter_mut().enumerate() {
                let (mut val, mut total) = (0f32, 0f32);
                for sy in y_min..y_max {
                    let wy = tri((sy as f32 - y + 0.5) * inv1);
                    for sx in x_min..x_max {
                        let wx = tri((sx as f32 - x + 0.5) * inv0);
                        let wgt = wx * wy;
                        if wgt <= 0.0 {
                            continue;
                        }
                        val = src[(sy * side + sx) * d + c].mul_add(wgt, val);
                        total += wgt;
                    }
                }
                *o = if total > 0.0 { val / total } else { val };
            }
        }
    }
    out
}

/// `ggml_conv_2d(kernel, image, stride = p)`: `pixels` planar `[3, h, w]`, `kernel` rows of
/// `3·p·p` (channel, row, column) per output channel. Both sides are rounded to f16 (the
/// im2col is always F16, and f16 is its dot type). Returns `[(h/p)·(w/p), out]` in
/// row-major patch order.
pub fn patch_embed(pixels: &[f32], w: usize, h: usize, p: usize, kernel: &[f32]) -> Vec<f32> {
    let r16 = |v: f32| f16::from_f32(v).to_f32();
    let kernel: Vec<f32> = kernel.iter().map(|&v| r16(v)).collect();
    let (nx, ny) = (w / p, h / p);
    let kk = 3 * p * p;
    let n_out = kernel.len() / kk;
    let mut cols = vec![0f32; nx * ny * kk];
    for py in 0..ny {
        for px in 0..nx {
            let dst = &mut cols[(py * nx + px) * kk..(py * nx + px + 1) * kk];
            for c in 0..3 {
                for ky in 0..p {
                    for kx in 0..p {
                        let v = pixels[c * w * h + (py * p + ky) * w + px * p + kx];
                        dst[(c * p + ky) * p + kx] = r16(v);
                    }
                }
            }
        }
    }
    // mul_mat(im2col, kernel): tinyBLAS over the kk-long rows (3·p·p, 768 for p = 16).
    let n = nx * ny;
    if kk.is_multiple_of(16) && n_out >= 2 {
        return tiled_matmul(&cols, n, n_out, kk, &|j0, j1| {
            std::borrow::Cow::Borrowed(&kernel[j0 * kk..j1 * kk])
        });
    }
    let mut y = vec![0f32; n * n_out];
    for r in 0..n {
        for j in 0..n_out {
            // `ggml_vec_dot_f16`: the im2col is F16.
            y[r * n_out + j] =
                super::float_dots::dot_single(kk, |i| cols[r * kk + i], |i| kernel[j * kk + i]);
        }
    }
    y
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn softmax_rows_sum_to_one_and_gelu_is_tanh_gelu() {
        let mut w: Vec<f32> = (0..37).map(|i| (i as f32 * 0.37).sin() * 4.0).collect();
        softmax_row(&mut w, 0.25);
        assert!((w.iter().sum::<f32>() - 1.0).abs() < 1e-5);
        let mut g = vec![-11.0, -1.0, 0.0, 0.5, 2.0, 12.0];
        gelu(&mut g);
        assert_eq!(g[0], 0.0);
        assert_eq!(g[5], 12.0);
        assert!((g[4] - 1.9546).abs() < 2e-3 && (g[1] + 0.1588).abs() < 1e-3);
    }

    #[test]
    fn identity_resize_and_layer_norm_moments() {
        let src: Vec<f32> = (0..16 * 16 * 3).map(|i| i as f32).collect();
        assert_eq!(resize_antialias(&src, 16, 3, 16, 16), src);
        let x: Vec<f32> = (0..40).map(|i| (i as f32 * 1.3).cos()).collect();
        let y = layer_norm(&x, &[1.0; 40], &[0.0; 40], 1e-6);
        let mean = y.iter().sum::<f32>() / 40.0;
        let var = y.iter().map(|v| v * v).sum::<f32>() / 40.0;
        assert!(mean.abs() < 1e-5 && (var - 1.0).abs() < 1e-3);
    }
}
