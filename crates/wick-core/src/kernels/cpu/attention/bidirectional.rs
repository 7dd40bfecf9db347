//! Bidirectional multi-head attention of the vision tower, rounding as llama.cpp's CPU backend
//! rounds `clip.cpp`'s graph (flash attention off): per head `K·Q` (`ggml_vec_dot_f32`: the
//! views are not contiguous, so tinyBLAS is skipped), `soft_max_ext` in f32 (ggml's vector
//! `expf`, sums in f64), then `V·P` through tinyBLAS (or `ggml_vec_dot_f32` when positions %
//! 16 ≠ 0). The dot orders are `float_dots`' (`dots16_blocks` for sixteen outputs at once).

#[cfg(target_arch = "x86_64")]
use crate::kernels::cpu::blocks::reduce16;
#[cfg(target_arch = "x86_64")]
use crate::kernels::cpu::expf::ExpVariant;
use crate::kernels::cpu::expf::{exp_variant, ggml_expf, simd_width, vector_sum};
use crate::kernels::cpu::feats::with_avx2_codegen;
use crate::kernels::cpu::float_dots::{dot_single_f32_sl, dot_tiled_sl, dots16_blocks};
#[cfg(target_arch = "x86_64")]
use crate::kernels::cpu::x86;
use crate::runtime::pool::{self, SyncPtr};

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
    if var == ExpVariant::Avx512 {
        // SAFETY: the Avx512 variant is only detected with AVX-512 F and DQ.
        sum = unsafe { exp_chunks16(&mut w[..whole], max) };
    }
    #[cfg(target_arch = "x86_64")]
    let whole_done = var == ExpVariant::Avx512;
    #[cfg(not(target_arch = "x86_64"))]
    let whole_done = false;
    for c in w[..if whole_done { 0 } else { whole }].chunks_mut(lanes) {
        let mut l = [0f32; 16];
        for (e, s) in c.iter_mut().zip(l.iter_mut()) {
            *e = ggml_expf(*e - max, var);
            *s = *e;
        }
        sum += vector_sum(var, &l) as f64;
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

/// `e = expf(w − max)` in place over whole 16-lane chunks with ggml's AVX-512 `expf`, each
/// chunk's tree sum added in f64; returns the sum.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512dq")]
unsafe fn exp_chunks16(w: &mut [f32], max: f32) -> f64 {
    use std::arch::x86_64::*;
    let m = _mm512_set1_ps(max);
    let mut sum = 0f64;
    for c in w.chunks_exact_mut(16) {
        let e = crate::kernels::cpu::expf::expf16(_mm512_sub_ps(_mm512_loadu_ps(c.as_ptr()), m));
        _mm512_storeu_ps(c.as_mut_ptr(), e);
        let l: &[f32; 16] = (&*c).try_into().unwrap_or(&[0.0; 16]);
        sum += reduce16(l) as f64;
    }
    sum
}

/// Queries per attention task: a head's K and V rows are read once for this many queries.
const QUERY_BLOCK: usize = 16;

/// Blocks of 16 outputs' operands, contiguous (strided rows would alias in the L1): K as
/// [head][key block][e][16 keys], V as [head][channel block][position][16 channels], and V
/// transposed (row (h, c) holds V[·, h·hd + c] over positions) for channels past the last
/// block of 16.
struct Blocks {
    kb: Vec<f32>,
    vb: Vec<f32>,
    vt: Vec<f32>,
}

fn blocks(k: &[f32], v: &[f32], n: usize, heads: usize, d: usize) -> Blocks {
    let hd = d / heads;
    let mut vt = vec![0f32; d * n];
    for j in 0..n {
        for c in 0..d {
            vt[c * n + j] = v[j * d + c];
        }
    }
    let (nb, ncb) = (n / 16, hd / 16);
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
    Blocks { kb, vb, vt }
}

/// Bidirectional multi-head attention: `q`, `k`, `v` are `[n, heads·hd]`; returns the same.
/// Each output is computed in ggml's order whatever the blocking (see the module doc): K·Q
/// sixteen keys at a time, V·P sixteen channels at a time, lane-parallel over those outputs.
pub fn attention(q: &[f32], k: &[f32], v: &[f32], n: usize, heads: usize, scale: f32) -> Vec<f32> {
    let d = q.len() / n;
    let hd = d / heads;
    let mut out = vec![0f32; n * d];
    let op = SyncPtr(out.as_mut_ptr());
    let bl = blocks(k, v, n, heads, d);
    let blocks = n.div_ceil(QUERY_BLOCK);
    pool::run(heads * blocks, &|t| {
        with_avx2_codegen(
            #[inline(always)]
            || {
                let (h, i0) = (t / blocks, (t % blocks) * QUERY_BLOCK);
                let rows = QUERY_BLOCK.min(n - i0);
                let mut p = vec![0f32; rows * n];
                scores(&mut p, q, k, &bl.kb, (n, d, hd), h, i0);
                for pr in p.chunks_exact_mut(n) {
                    softmax_row(pr, scale);
                }
                // Four queries × four channels per pass where it can (tinyBLAS's sums, as
                // `values` gives), the queries left one by one.
                #[cfg(target_arch = "x86_64")]
                let done = match n.is_multiple_of(16)
                    && hd.is_multiple_of(4)
                    && crate::kernels::cpu::feats::has_avx512()
                {
                    true => rows / 4 * 4,
                    false => 0,
                };
                #[cfg(not(target_arch = "x86_64"))]
                let done = 0;
                #[cfg(target_arch = "x86_64")]
                for r in (0..done).step_by(4) {
                    values4(&p[r * n..(r + 4) * n], &bl, (n, hd, d), h, i0 + r, op);
                }
                for (r, pr) in p.chunks_exact(n).enumerate().skip(done) {
                    values(pr, &bl, (n, hd), h, (i0 + r) * d, op);
                }
            },
        )
    });
    out
}

/// Scores `q_i·k_j` of head h's queries `i0..` (`p.len() / n` of them) into rows of `p`.
#[inline(always)]
fn scores(
    p: &mut [f32],
    q: &[f32],
    k: &[f32],
    kb: &[f32],
    (n, d, hd): (usize, usize, usize),
    h: usize,
    i0: usize,
) {
    let (n16, nb) = (n / 16 * 16, n / 16);
    let (lo, hi) = (h * hd, (h + 1) * hd);
    let query = |r: usize| &q[(i0 + r) * d + lo..(i0 + r) * d + hi];
    // Each block of 16 keys once for all the task's queries: it stays in the L1 while they
    // meet it (query by query, the head's whole K came from the L2 for every query).
    for j0 in (0..n16).step_by(16) {
        let blk = &kb[(h * nb + j0 / 16) * hd * 16..(h * nb + j0 / 16 + 1) * hd * 16];
        for (r, pr) in p.chunks_exact_mut(n).enumerate() {
            pr[j0..j0 + 16].copy_from_slice(&dots16_blocks(hd, false, blk, query(r)));
        }
    }
    for (r, pr) in p.chunks_exact_mut(n).enumerate() {
        let qi = query(r);
        for j in n16..n {
            pr[j] = dot_single_f32_sl(&k[j * d + lo..j * d + hi], qi);
        }
    }
}

/// `values` of four queries (weights `p`, four rows of `n`) from query `i` on, four channels
/// at a time through the AVX-512 4 × 4 tile over V transposed; `n % 16 == 0`, `hd % 4 == 0`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn values4(p: &[f32], bl: &Blocks, (n, hd, d): (usize, usize, usize), h: usize, i: usize, op: SyncPtr<f32>) {
    let pr = |r: usize| &p[r * n..(r + 1) * n];
    let vt = |c: usize| &bl.vt[(h * hd + c) * n..(h * hd + c + 1) * n];
    for c in (0..hd).step_by(4) {
        // SAFETY: AVX-512F checked by the caller; every row holds n values, n % 16 == 0.
        let sums = unsafe {
            let lanes =
                x86::tile4x4_f32([vt(c), vt(c + 1), vt(c + 2), vt(c + 3)], [pr(0), pr(1), pr(2), pr(3)], n);
            x86::reduce16_4x4(&lanes)
        };
        for (r, row) in sums.iter().enumerate() {
            for (cc, &v) in row.iter().enumerate() {
                // SAFETY: query i + r < n, channel h·hd + c + cc < d; task (h, block) alone
                // writes its queries' head-h columns.
                unsafe { *op.get().add((i + r) * d + h * hd + c + cc) = v };
            }
        }
    }
}

/// Head h's outputs `Σ p·v` of one query (weights `pr`) into its output row at `row`.
#[inline(always)]
fn values(pr: &[f32], bl: &Blocks, (n, hd): (usize, usize), h: usize, row: usize, op: SyncPtr<f32>) {
    let tiled = n.is_multiple_of(16);
    let ncb = hd / 16;
    let lo = h * hd;
    let mut c = 0;
    while c + 16 <= hd {
        let blk = &bl.vb[(h * ncb + c / 16) * n * 16..(h * ncb + c / 16 + 1) * n * 16];
        let o = dots16_blocks(n, tiled, blk, pr);
        // SAFETY: `row + lo + c + 16 ≤ n·d` (the query's row, head h's channels c..c + 16 < hd);
        // task (h, block) alone writes its rows' head-h columns.
        unsafe { std::ptr::copy_nonoverlapping(o.as_ptr(), op.get().add(row + lo + c), 16) };
        c += 16;
    }
    for c in c..hd {
        let vr = &bl.vt[(lo + c) * n..(lo + c + 1) * n];
        let o = if tiled { dot_tiled_sl(vr, pr) } else { dot_single_f32_sl(vr, pr) };
        // SAFETY: as above, for channel c < hd.
        unsafe { *op.get().add(row + lo + c) = o };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn softmax_rows_sum_to_one() {
        let mut w: Vec<f32> = (0..37).map(|i| (i as f32 * 0.37).sin() * 4.0).collect();
        softmax_row(&mut w, 0.25);
        assert!((w.iter().sum::<f32>() - 1.0).abs() < 1e-5);
    }
}
