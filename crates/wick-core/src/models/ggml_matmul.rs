//! CPU matmuls for F16, Q8_0, Q4_0, Q4_1 and Q4_K weights that round exactly as llama.cpp's x86
//! CPU backend does (the kernels it picks for these types on AVX2/AVX-512).
//!
//! Why: ggml re-quantizes every activation row to q8 blocks, so a one-ulp difference in one
//! layer's output can flip a rounding in the next and change a greedy token (see
//! `cpu_attention`). candle's kernels accumulate in other orders and, for Q4_1, round the q8_1
//! block sum differently (`f16(sum)·f16(d)` in f16 instead of ggml's `f16(d·sum)`). Here:
//! - activations: ggml's x86 `quantize_row_q8_0/q8_1` (`id = 127/max`, round half to even)
//!   and `quantize_row_q8_K_ref`; f16 weights see f16-rounded activations;
//! - Q4_0, Q4_K (output count % 8 == 0): the repacked 8x8 GEMV/GEMM — per block an exact
//!   integer dot, then `acc = fma(float(isum), dx·dy, acc)` (Q4_K: minus the same for mins);
//! - Q8_0: `ggml_vec_dot_q8_0_q8_0` (tinyBLAS rounds identically for several rows) and
//!   Q4_1: `ggml_vec_dot_q4_1_q8_1` — 8 lanes of 4-byte dots, fma per lane and block, an
//!   8-lane tree sum (Q4_1: plus the m·s terms accumulated with fma);
//! - F16: `ggml_vec_dot_f16` for one token, llamafile tinyBLAS for several.

use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::Tensor;
use half::f16;

use super::cpu_attention::{dot_single, dot_tiled};
use super::ggml_simd as simd;
use super::layers::RowPos;
use crate::error::{Result, WickError};
use crate::ops::pool::{self, SyncPtr};

/// Whether `matmul` handles this weight type (with this output count).
pub fn supported(dtype: GgmlDType, n_out: usize) -> bool {
    match dtype {
        GgmlDType::F16 | GgmlDType::Q8_0 | GgmlDType::Q4_1 | GgmlDType::Q5_0 => true,
        GgmlDType::Q4_0 | GgmlDType::Q4K => n_out.is_multiple_of(8),
        _ => false,
    }
}

pub(super) fn f16_at(b: &[u8], i: usize) -> f32 {
    f16::from_le_bytes([b[i], b[i + 1]]).to_f32()
}

/// One q8_0 / q8_1 activation block: the f16 scale (as f32), the q8_1 sum term, the quants
/// and their integer sum.
pub(super) struct Act32 {
    pub d: f32,
    pub s: f32,
    pub qs: [i8; 32],
    pub qsum: i32,
}

/// One q8_K activation block (f32 scale) with the integer sum of each 32-value sub-block.
pub(super) struct Act256 {
    pub d: f32,
    pub qs: [i8; 256],
    pub sums: [i32; 8],
}

/// q8_0 / q8_1 over blocks of 32, as ggml's AVX2 `quantize_row_q8_0` / `_q8_1`.
fn quantize_q8(x: &[f32]) -> Vec<Act32> {
    x.chunks_exact(32)
        .map(|b| {
            let max = b.iter().fold(0f32, |m, v| m.max(v.abs()));
            let d = max / 127.0;
            let id = if max != 0.0 { 127.0 / max } else { 0.0 };
            let mut qs = [0i8; 32];
            let mut sum = 0i32;
            for (q, &v) in qs.iter_mut().zip(b) {
                *q = (v * id).round_ties_even() as i8;
                sum += *q as i32;
            }
            Act32 { d: f16::from_f32(d).to_f32(), s: f16::from_f32(d * sum as f32).to_f32(), qs, qsum: sum }
        })
        .collect()
}

/// q8_K over blocks of 256, as `quantize_row_q8_K_ref` (scale from the signed extreme).
fn quantize_q8k(x: &[f32]) -> Vec<Act256> {
    x.chunks_exact(256)
        .map(|b| {
            let (mut amax, mut max) = (0f32, 0f32);
            for &v in b {
                if v.abs() > amax {
                    amax = v.abs();
                    max = v;
                }
            }
            let mut qs = [0i8; 256];
            if amax == 0.0 {
                return Act256 { d: 0.0, qs, sums: [0; 8] };
            }
            let iscale = -127.0 / max;
            for (q, &v) in qs.iter_mut().zip(b) {
                *q = ((iscale * v).round_ties_even() as i32).min(127) as i8;
            }
            let mut sums = [0i32; 8];
            for (j, s) in sums.iter_mut().enumerate() {
                *s = qs[j * 32..j * 32 + 32].iter().map(|&q| q as i32).sum();
            }
            Act256 { d: 1.0 / iscale, qs, sums }
        })
        .collect()
}

/// The 32 4-bit values of a Q4_0/Q4_1 block in element order: low nibbles, then high.
#[inline(always)]
fn nibbles(qs: &[u8]) -> [u8; 32] {
    let mut w = [0u8; 32];
    for i in 0..16 {
        w[i] = qs[i] & 0x0F;
        w[i + 16] = qs[i] >> 4;
    }
    w
}

fn dot_q4_0(w: &[u8], a: &[Act32]) -> f32 {
    let simd = simd::available();
    let mut acc = 0f32;
    for (blk, y) in w.chunks_exact(18).zip(a) {
        let s = if simd {
            // Safety: AVX2/FMA checked by `available`; the block has 16 nibble bytes.
            #[cfg(target_arch = "x86_64")]
            unsafe {
                simd::isum_q4_0(&blk[2..18], &y.qs, y.qsum)
            }
            #[cfg(not(target_arch = "x86_64"))]
            0
        } else {
            let q = nibbles(&blk[2..18]);
            (0..32).map(|i| (q[i] as i32 - 8) * y.qs[i] as i32).sum()
        };
        acc = (s as f32).mul_add(f16_at(blk, 0) * y.d, acc);
    }
    acc
}

fn dot_q8_0(w: &[u8], a: &[Act32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if simd::available() {
        // Safety: AVX2/FMA checked; `w` holds one 34-byte block per activation block.
        return unsafe { simd::dot_q8_0(w, a) };
    }
    let mut acc = [0f32; 8];
    for (blk, y) in w.chunks_exact(34).zip(a) {
        let d = f16_at(blk, 0) * y.d;
        for (l, a) in acc.iter_mut().enumerate() {
            let s: i32 = (0..4).map(|t| blk[2 + 4 * l + t] as i8 as i32 * y.qs[4 * l + t] as i32).sum();
            *a = d.mul_add(s as f32, *a);
        }
    }
    let h = [acc[4] + acc[0], acc[5] + acc[1], acc[6] + acc[2], acc[7] + acc[3]];
    (h[0] + h[2]) + (h[1] + h[3])
}

/// The 32 values (q - 16) of a Q5_0 block (d, qh, 16 nibble bytes) in element order.
fn q5_0_values(blk: &[u8]) -> [i32; 32] {
    let qh = u32::from_le_bytes([blk[2], blk[3], blk[4], blk[5]]);
    let q = nibbles(&blk[6..22]);
    std::array::from_fn(|i| (q[i] as i32 | (((qh >> i) & 1) as i32) << 4) - 16)
}

/// `ggml_vec_dot_q5_0_q8_0`: as Q8_0 (8 lanes of 4-value dots, one fma per lane and block).
fn dot_q5_0(w: &[u8], a: &[Act32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if simd::available() {
        // Safety: AVX2/FMA checked; `w` holds one 22-byte block per activation block.
        return unsafe { simd::dot_q5_0(w, a) };
    }
    let mut acc = [0f32; 8];
    for (blk, y) in w.chunks_exact(22).zip(a) {
        let d = f16_at(blk, 0) * y.d;
        let x = q5_0_values(blk);
        for (l, a) in acc.iter_mut().enumerate() {
            let s: i32 = (0..4).map(|t| x[4 * l + t] * y.qs[4 * l + t] as i32).sum();
            *a = d.mul_add(s as f32, *a);
        }
    }
    let h = [acc[4] + acc[0], acc[5] + acc[1], acc[6] + acc[2], acc[7] + acc[3]];
    (h[0] + h[2]) + (h[1] + h[3])
}

fn dot_q4_1(w: &[u8], a: &[Act32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if simd::available() {
        // Safety: AVX2/FMA checked; `w` holds one 20-byte block per activation block.
        return unsafe { simd::dot_q4_1(w, a) };
    }
    let mut acc = [0f32; 8];
    let mut summs = 0f32;
    for (blk, y) in w.chunks_exact(20).zip(a) {
        summs = f16_at(blk, 2).mul_add(y.s, summs);
        let d = y.d * f16_at(blk, 0);
        let q = nibbles(&blk[4..20]);
        // Lane l: elements 4l..4l+4 (ggml's 8-lane integer dot).
        let mut lanes = [0i32; 8];
        for (l, s) in lanes.iter_mut().enumerate() {
            for t in 0..4 {
                *s += q[4 * l + t] as i32 * y.qs[4 * l + t] as i32;
            }
        }
        for l in 0..8 {
            acc[l] = d.mul_add(lanes[l] as f32, acc[l]);
        }
    }
    let h = [acc[4] + acc[0], acc[5] + acc[1], acc[6] + acc[2], acc[7] + acc[3]];
    ((h[0] + h[2]) + (h[1] + h[3])) + summs
}

/// The 6-bit scale and min of sub-block j of a Q4_K block (`get_scale_min_k4`).
pub(super) fn scale_min(sc: &[u8], j: usize) -> (i32, i32) {
    if j < 4 {
        ((sc[j] & 63) as i32, (sc[j + 4] & 63) as i32)
    } else {
        (
            ((sc[j + 4] & 0x0F) | ((sc[j - 4] >> 6) << 4)) as i32,
            ((sc[j + 4] >> 4) | ((sc[j] >> 6) << 4)) as i32,
        )
    }
}

/// Q4_K·q8_K. The 8x8 GEMV (`per_pair == false`) folds a whole 256-value block into one
/// fma; the 8x8 GEMM that ggml uses for rows in groups of four folds every pair of 32-value
/// sub-blocks, so the two round differently.
fn dot_q4k(w: &[u8], a: &[Act256], per_pair: bool) -> f32 {
    let simd = simd::available();
    let (mut acc, mut acc_min) = (0f32, 0f32);
    for (blk, y) in w.chunks_exact(144).zip(a) {
        let (d, dmin, sc, qs) = (f16_at(blk, 0), f16_at(blk, 2), &blk[4..16], &blk[16..]);
        let (mut isum, mut imin) = (0i32, 0i32);
        for j in 0..8 {
            let (s, m) = scale_min(sc, j);
            let bytes = &qs[(j / 2) * 32..(j / 2) * 32 + 32];
            let ys = &y.qs[j * 32..j * 32 + 32];
            let dot = if simd {
                // Safety: AVX2/FMA checked; 32 bytes and 32 values.
                #[cfg(target_arch = "x86_64")]
                unsafe {
                    simd::isum_q4k_sub(bytes, j % 2 == 1, ys)
                }
                #[cfg(not(target_arch = "x86_64"))]
                0
            } else {
                let shift = if j % 2 == 0 { 0 } else { 4 };
                bytes.iter().zip(ys).map(|(b, &q8)| ((b >> shift) & 0x0F) as i32 * q8 as i32).sum()
            };
            isum += s * dot;
            imin += m * y.sums[j];
            if per_pair && j % 2 == 1 {
                acc = (isum as f32).mul_add(d * y.d, acc);
                acc_min = (imin as f32).mul_add(dmin * y.d, acc_min);
                (isum, imin) = (0, 0);
            }
        }
        if !per_pair {
            acc = (isum as f32).mul_add(d * y.d, acc);
            acc_min = (imin as f32).mul_add(dmin * y.d, acc_min);
        }
    }
    acc - acc_min
}

/// Output columns per task: enough tasks to balance `threads` (and a helper that wakes late),
/// whole groups of 8 columns, at least 8.
fn cols_per_task(n: usize, m: usize) -> usize {
    let threads = pool::global().threads();
    if threads == 1 {
        return n;
    }
    let tasks = if m == 1 { threads * 8 } else { threads * 16 };
    (n.div_ceil(tasks).div_ceil(8) * 8).max(8)
}

/// Rows of activations per cache block in the multi-row kernels.
const ROW_BLOCK: usize = 64;

/// Runs `f(j0, j1)` over column ranges covering `0..n`, spread over the pool.
fn for_cols(n: usize, m: usize, f: &(dyn Fn(usize, usize) + Sync)) {
    let c = cols_per_task(n, m);
    pool::run(n.div_ceil(c), &|t| f(t * c, ((t + 1) * c).min(n)));
}

/// The type of an absent `dot4` of `tiled_rows` (no SIMD kernels on this architecture).
#[cfg(not(target_arch = "x86_64"))]
type NoDot4 = fn(&[u8], usize) -> [f32; 4];

/// Every output `(r, j)`: columns spread over the pool, activation rows in blocks of
/// `ROW_BLOCK` so a weight row stays in cache, four rows at a time through `dot4` when given
/// (SIMD), the rest through `dot1`. Each output keeps the single-row kernel's order either way.
/// Generic rather than `dyn` so the dot kernels inline into the loop (measured: ~5% of prefill).
fn tiled_rows<'w, W, P, D4, D1>(n: usize, m: usize, wrow: &W, put: &P, dot4: Option<&D4>, dot1: &D1)
where
    W: Fn(usize) -> &'w [u8] + Sync,
    P: Fn(usize, usize, f32) + Sync,
    D4: Fn(&[u8], usize) -> [f32; 4] + Sync,
    D1: Fn(&[u8], usize) -> f32 + Sync,
{
    for_cols(n, m, &|j0, j1| {
        for rb in (0..m).step_by(ROW_BLOCK) {
            let re = (rb + ROW_BLOCK).min(m);
            for j in j0..j1 {
                let wr = wrow(j);
                let mut r = rb;
                if let Some(dot4) = dot4 {
                    while r + 4 <= re {
                        for (t, v) in dot4(wr, r).into_iter().enumerate() {
                            put(r + t, j, v);
                        }
                        r += 4;
                    }
                }
                while r < re {
                    put(r, j, dot1(wr, r));
                    r += 1;
                }
            }
        }
    });
}

/// Quantizes every row of `xs` (`k` values each) with `q`, rows spread over the pool.
fn quantize_rows<A: Send>(xs: &[f32], k: usize, q: fn(&[f32]) -> Vec<A>) -> Vec<Vec<A>> {
    let m = xs.len() / k;
    let mut out: Vec<Option<Vec<A>>> = (0..m).map(|_| None).collect();
    let op = SyncPtr(out.as_mut_ptr());
    let per = m.div_ceil(pool::global().threads() * 4).max(1);
    pool::run(m.div_ceil(per), &|t| {
        for r in t * per..((t + 1) * per).min(m) {
            // Safety: each row index is written by exactly one task.
            unsafe { *op.get().add(r) = Some(q(&xs[r * k..(r + 1) * k])) };
        }
    });
    out.into_iter().map(|v| v.expect("quantized row")).collect()
}

/// `x`: `[m, k]` f32 on the CPU, `w`: `[n, k]` of a `supported` type → `[m, n]` f32.
/// `rows[i]` decides which of llama.cpp's kernels row i follows (see `RowPos`).
///
/// Columns (weight rows) are spread over `ops::pool`; several activation rows go through
/// one weight row at a time (unpacked once), each output with its own accumulators in the
/// order of the single-row kernel, so the result does not depend on tiling or threads.
pub fn matmul(x: &Tensor, w: &QTensor, rows: &[RowPos]) -> Result<Tensor> {
    let (n, k) = w.shape().dims2()?;
    let (m, kx) = x.dims2()?;
    let dtype = w.dtype();
    if kx != k || !k.is_multiple_of(dtype.block_size()) || !supported(dtype, n) || rows.len() != m {
        return Err(WickError::Internal(format!(
            "ggml matmul: input [{m}, {kx}], {dtype:?} weight [{n}, {k}]"
        )));
    }
    let data = w.data()?;
    let data: &[u8] = &data;
    let row_bytes = k / dtype.block_size() * dtype.type_size();
    if data.len() != n * row_bytes {
        return Err(WickError::Internal("weight size does not match its shape".into()));
    }
    let xs = x.flatten_all()?.to_vec1::<f32>()?;
    let mut y = vec![0f32; m * n];
    let yp = SyncPtr(y.as_mut_ptr());
    // Safety (all `put`s): each (row, column) is written by the one task owning the column.
    let put = move |r: usize, j: usize, v: f32| unsafe { *yp.get().add(r * n + j) = v };
    let simd = simd::available();
    let wrow = |j: usize| &data[j * row_bytes..(j + 1) * row_bytes];
    if dtype == GgmlDType::F16 {
        let x16: Vec<f32> = xs.iter().map(|&v| f16::from_f32(v).to_f32()).collect();
        // tinyBLAS takes over from ggml's own dot product for several rows when k splits
        // into 16-lane chunks and the output count into tiles of 4.
        let shapes_ok = k.is_multiple_of(16) && n.is_multiple_of(4);
        for_cols(n, m, &|j0, j1| {
            for j in j0..j1 {
                let wr = wrow(j);
                let wv = |i: usize| f16_at(wr, 2 * i);
                for r in 0..m {
                    let xr = &x16[r * k..(r + 1) * k];
                    let tiled = shapes_ok && rows[r].seq_len > 1;
                    put(r, j, if tiled { dot_tiled(k, wv, |i| xr[i]) } else { dot_single(k, wv, |i| xr[i]) });
                }
            }
        });
    } else if dtype == GgmlDType::Q4K {
        let acts: Vec<Vec<Act256>> = quantize_rows(&xs, k, quantize_q8k);
        // ggml's repacked kernels run rows in groups of four through the GEMM and the
        // remaining `len % 4` rows (all rows when len < 4) through the GEMV.
        let gemm = |p: RowPos| p.seq_len > 3 && p.idx < p.seq_len - p.seq_len % 4;
        #[cfg(target_arch = "x86_64")]
        let dot4 = |wr: &[u8], r: usize| {
            let a = [&acts[r][..], &acts[r + 1][..], &acts[r + 2][..], &acts[r + 3][..]];
            let pp = [gemm(rows[r]), gemm(rows[r + 1]), gemm(rows[r + 2]), gemm(rows[r + 3])];
            // Safety: only passed on when AVX2/FMA are available; every row has k/256 blocks.
            unsafe { simd::dotn_q4k::<4>(wr, a, pp) }
        };
        #[cfg(target_arch = "x86_64")]
        let dot4 = simd.then_some(&dot4);
        #[cfg(not(target_arch = "x86_64"))]
        let dot4: Option<&NoDot4> = None;
        let dot1 = |wr: &[u8], r: usize| {
            #[cfg(target_arch = "x86_64")]
            if simd {
                // Safety: AVX2/FMA checked; every row has k/256 blocks.
                return unsafe { simd::dotn_q4k::<1>(wr, [&acts[r][..]], [gemm(rows[r])]) }[0];
            }
            dot_q4k(wr, &acts[r], gemm(rows[r]))
        };
        tiled_rows(n, m, &wrow, &put, dot4, &dot1);
    } else {
        let acts: Vec<Vec<Act32>> = quantize_rows(&xs, k, quantize_q8);
        let dot = match dtype {
            GgmlDType::Q8_0 => dot_q8_0,
            GgmlDType::Q4_0 => dot_q4_0,
            GgmlDType::Q5_0 => dot_q5_0,
            _ => dot_q4_1,
        };
        #[cfg(target_arch = "x86_64")]
        let simd4: unsafe fn(&[u8], [&[Act32]; 4]) -> [f32; 4] = match dtype {
            GgmlDType::Q8_0 => simd::dot4_q8_0,
            GgmlDType::Q4_0 => simd::dot4_q4_0,
            GgmlDType::Q5_0 => simd::dot4_q5_0,
            _ => simd::dot4_q4_1,
        };
        #[cfg(target_arch = "x86_64")]
        let dot4 = |wr: &[u8], r: usize| {
            let a = [&acts[r][..], &acts[r + 1][..], &acts[r + 2][..], &acts[r + 3][..]];
            // Safety: only passed on when AVX2/FMA are available; every row has k/32 blocks.
            unsafe { simd4(wr, a) }
        };
        #[cfg(target_arch = "x86_64")]
        let dot4 = simd.then_some(&dot4);
        #[cfg(not(target_arch = "x86_64"))]
        let dot4: Option<&NoDot4> = None;
        tiled_rows(n, m, &wrow, &put, dot4, &|wr, r| dot(wr, &acts[r]));
    }
    Ok(Tensor::from_vec(y, (m, n), x.device())?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SIMD and scalar paths agree bit for bit, and both stay within a relative error bound
    /// of the dequantized f32 reference (the bound covers the q8 activation rounding).
    #[test]
    fn q5_0_matches_scalar_and_dequantized_reference() {
        let mut s = 11u32;
        let mut r = || {
            s = s.wrapping_mul(1664525).wrapping_add(1013904223);
            (s >> 8) as f32 / (1 << 24) as f32 - 0.5
        };
        let k = 256;
        for _ in 0..20 {
            let mut w = vec![];
            let mut deq = vec![];
            for _ in 0..k / 32 {
                let d = f16::from_f32(r().abs() * 0.1 + 0.01);
                w.extend_from_slice(&d.to_le_bytes());
                let vals: Vec<i32> = (0..32).map(|_| ((r() + 0.5) * 32.0) as i32 % 32).collect();
                let mut qh = 0u32;
                let mut qs = [0u8; 16];
                for (i, &v) in vals.iter().enumerate() {
                    qh |= ((v as u32 >> 4) & 1) << i;
                    if i < 16 {
                        qs[i] |= (v & 15) as u8
                    } else {
                        qs[i - 16] |= ((v & 15) as u8) << 4
                    }
                    deq.push((v - 16) as f32 * d.to_f32());
                }
                w.extend_from_slice(&qh.to_le_bytes());
                w.extend_from_slice(&qs);
            }
            let x: Vec<f32> = (0..k).map(|_| r()).collect();
            let a = quantize_q8(&x);
            let fast = dot_q5_0(&w, &a);
            let exact: f64 = deq.iter().zip(&x).map(|(&p, &q)| p as f64 * q as f64).sum();
            let norm: f64 = deq.iter().zip(&x).map(|(&p, &q)| (p as f64 * q as f64).abs()).sum();
            assert!(((fast as f64) - exact).abs() <= 1e-2 * norm, "{fast} vs {exact}");
            #[cfg(target_arch = "x86_64")]
            if simd::available() {
                let four = unsafe { simd::dot4_q5_0(&w, [&a, &a, &a, &a]) };
                assert!(four.iter().all(|v| v.to_bits() == fast.to_bits()));
                let mut acc = [0f32; 8];
                for (blk, y) in w.chunks_exact(22).zip(&a) {
                    let d = f16_at(blk, 0) * y.d;
                    let xv = q5_0_values(blk);
                    for (l, s) in acc.iter_mut().enumerate() {
                        let v: i32 = (0..4).map(|t| xv[4 * l + t] * y.qs[4 * l + t] as i32).sum();
                        *s = d.mul_add(v as f32, *s);
                    }
                }
                let h = [acc[4] + acc[0], acc[5] + acc[1], acc[6] + acc[2], acc[7] + acc[3]];
                assert_eq!(((h[0] + h[2]) + (h[1] + h[3])).to_bits(), fast.to_bits());
            }
        }
    }
}
