//! The row-dot matmul for weights without packed panels (`repack`): F16, BF16, Q8_0, Q4_0,
//! Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K and Q6_K, rounding exactly as llama.cpp's x86 CPU
//! backend does (the kernels it picks for these types on AVX2/AVX-512; BF16 and Q2_K only
//! where llama.cpp loads an AVX512-BF16 / AVX-512 build, see `supported`). On aarch64 the
//! orders are those of llama.cpp's armv8.2-a+dotprod NEON build (each kernel file says which:
//! F16 through tinyBLAS's 4-lane f16 × f32 kernel, Q8_0 in its 4x4 repack order, …).
//!
//! Why: ggml re-quantizes every activation row to q8 blocks, so a one-ulp difference in one
//! layer's output can flip a rounding in the next and change a greedy token (see
//! `attention`). candle's kernels accumulate in other orders and, for Q4_1, round the q8_1
//! block sum differently (`f16(sum)·f16(d)` in f16 instead of ggml's `f16(d·sum)`). Here:
//! activations are quantized as ggml's x86 `quantize_row_q8_0/q8_1` and
//! `quantize_row_q8_K_ref` (`q8`), f16 weights see f16-rounded activations, and each type's
//! row dot (`quants`, `k_quants`, `float_dots`) follows its ggml kernel.

use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::Tensor;

use super::elementwise::with_host_f32;
#[cfg(target_arch = "x86_64")]
use super::feats::has_avx2_fma;
use super::feats::{has_avx512, has_avx512bf16, with_avx2_codegen};
use super::float_dots::{dot_bf16_single, dot_bf16_tiled, dot_single_f32, dot_tiled, to_bf16};
use super::k_quants::{dot_q2k, dot_q3k, dot_q4k, dot_q5k, dot_q6k};
use super::q8::{quantize_q8, quantize_q8k, quantize_rows, Act256, Act32};
use super::quants::{dot_q4_0, dot_q4_1, dot_q5_0, dot_q5_1, dot_q8_0};
#[cfg(target_arch = "x86_64")]
use super::split::BlockRows;
pub use super::split::RowPos;
use super::split::{for_cols, ROW_BLOCK};
#[cfg(target_arch = "x86_64")]
use super::x86::{bf16 as simd_bf16, k_quants as simd_k, quants as simd};
use crate::error::{Result, WickError};
use crate::runtime::pool::SyncPtr;

/// Whether `matmul` handles this weight type (with this output count).
pub fn supported(dtype: GgmlDType, n_out: usize) -> bool {
    match dtype {
        GgmlDType::F32
        | GgmlDType::F16
        | GgmlDType::Q8_0
        | GgmlDType::Q4_1
        | GgmlDType::Q5_0
        | GgmlDType::Q5_1 => true,
        GgmlDType::Q3K | GgmlDType::Q5K | GgmlDType::Q6K => true,
        // Only llama.cpp's AVX512-BF16 builds are matched (others sum BF16 in other orders).
        GgmlDType::BF16 => has_avx512bf16(),
        GgmlDType::Q4_0 | GgmlDType::Q4K => n_out.is_multiple_of(8),
        // ggml repacks Q2_K (8x8 GEMV/GEMM) only in its AVX-512 builds; the others use
        // `ggml_vec_dot_q2_K_q8_K`, which is not implemented here.
        GgmlDType::Q2K => n_out.is_multiple_of(8) && has_avx512(),
        _ => false,
    }
}

/// The type of an absent `dot4` of `tiled_rows` (no SIMD kernels on this architecture).
#[cfg(not(target_arch = "x86_64"))]
type NoDot4 = fn(&[u8], usize) -> [f32; 4];

/// Every output `(r, j)`: columns spread over the pool, activation rows in blocks of
/// `ROW_BLOCK` so a weight row stays in cache, four rows at a time through `dot4` when given
/// (SIMD), the rest through `dot1`. Each output keeps the single-row kernel's order either way.
/// Generic rather than `dyn` so the dot kernels inline into the loop (a `dyn` call per dot
/// was a measurable share of prefill).
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

/// A four-row SIMD twin of a row dot: one weight row against four activation rows.
pub(crate) type Dot4<A> = unsafe fn(&[u8], [&[A]; 4]) -> [f32; 4];

/// `tiled_rows` for a type whose every row follows one row dot `dot`, four rows at a time
/// through `dot4` when given (called only when the CPU has AVX2/FMA).
fn rows_by_dot<'w, A: Sync, W, P>(
    n: usize,
    m: usize,
    wrow: &W,
    put: &P,
    acts: &[Vec<A>],
    dot: fn(&[u8], &[A]) -> f32,
    dot4: Option<Dot4<A>>,
) where
    W: Fn(usize) -> &'w [u8] + Sync,
    P: Fn(usize, usize, f32) + Sync,
{
    let four = dot4.map(|d4| {
        move |wr: &[u8], r: usize| {
            let a = [&acts[r][..], &acts[r + 1][..], &acts[r + 2][..], &acts[r + 3][..]];
            // SAFETY: `dot4` is only given when AVX2/FMA are available; rows hold whole blocks.
            unsafe { d4(wr, a) }
        }
    });
    tiled_rows(n, m, wrow, put, four.as_ref(), &|wr, r| dot(wr, &acts[r]));
}

/// One `matmul`'s operands: `m` activation rows of `k` f32 (`xs`), `n` weight rows of
/// `row_bytes` (`data`), and which of llama.cpp's kernels each activation row follows.
struct Operands<'a> {
    xs: &'a [f32],
    data: &'a [u8],
    row_bytes: usize,
    rows: &'a [RowPos],
    n: usize,
    k: usize,
    m: usize,
}

impl<'a> Operands<'a> {
    /// Weight row (output column) `j`.
    #[inline(always)]
    fn wrow(&self, j: usize) -> &'a [u8] {
        &self.data[j * self.row_bytes..(j + 1) * self.row_bytes]
    }
}

/// `x`: `[m, k]` f32 on the CPU, `w`: `[n, k]` of a `supported` type → `[m, n]` f32.
/// `rows[i]` decides which of llama.cpp's kernels row i follows (see `RowPos`).
///
/// Columns (weight rows) are spread over `pool`; several activation rows go through
/// one weight row at a time (unpacked once), each output with its own accumulators in the
/// order of the single-row kernel, so the result does not depend on tiling or threads.
pub fn matmul(x: &Tensor, w: &QTensor, rows: &[RowPos]) -> Result<Tensor> {
    let (m, _) = x.dims2()?;
    let n = w.shape().dims2()?.0;
    let y = with_host_f32(x, |xs| matmul_host(xs, m, w, rows))??;
    Ok(Tensor::from_vec(y, (m, n), x.device())?)
}

/// `matmul` on host rows: `xs` holds `m` rows of the weight's k values.
pub fn matmul_host(xs: &[f32], m: usize, w: &QTensor, rows: &[RowPos]) -> Result<Vec<f32>> {
    let (n, k) = w.shape().dims2()?;
    let dtype = w.dtype();
    if xs.len() != m * k || !k.is_multiple_of(dtype.block_size()) || !supported(dtype, n) || rows.len() != m {
        return Err(WickError::Internal(format!(
            "ggml matmul: input of {} values for {m} rows, {dtype:?} weight [{n}, {k}]",
            xs.len()
        )));
    }
    let data = w.data()?;
    let row_bytes = k / dtype.block_size() * dtype.type_size();
    if data.len() != n * row_bytes {
        return Err(WickError::Internal("weight size does not match its shape".into()));
    }
    let op = Operands { xs, data: &data, row_bytes, rows, n, k, m };
    let mut y = vec![0f32; m * n];
    let yp = SyncPtr(y.as_mut_ptr());
    // `put` is called with r < m and j < n only.
    // SAFETY: `y` holds m·n values and r < m, j < n; each (row, column) is written by the one
    // task owning the column, and `y` is not read until the pass ends.
    let put = move |r: usize, j: usize, v: f32| unsafe { *yp.get().add(r * n + j) = v };
    match dtype {
        GgmlDType::F32 => f32_rows(&op, &put),
        GgmlDType::F16 => super::f16_matmul::f16_rows(n, k, xs, rows, &data, &put),
        GgmlDType::Q2K | GgmlDType::Q4K => gemm_group_rows(&op, dtype == GgmlDType::Q2K, &put),
        GgmlDType::BF16 => bf16_rows(&op, &put),
        GgmlDType::Q3K | GgmlDType::Q5K | GgmlDType::Q6K => k_quant_rows(&op, dtype, &put),
        _ => q8_rows(&op, dtype, &put),
    }
    Ok(y)
}

/// F32 weights (LoRA adapters, F32 files): tinyBLAS for several rows when k splits into whole
/// chunks (16 lanes on x86, 4 on aarch64, which also wants at least 4 rows) and the outputs
/// into tiles of 4, else `ggml_vec_dot_f32`; the activations as they are (f32 is the weights'
/// dot type).
fn f32_rows<P: Fn(usize, usize, f32) + Sync>(op: &Operands<'_>, put: &P) {
    let (n, k, m, rows) = (op.n, op.k, op.m, op.rows);
    let (chunk, min_rows) = if cfg!(target_arch = "aarch64") { (4, 4) } else { (16, 2) };
    let shapes_ok = k.is_multiple_of(chunk) && n.is_multiple_of(4);
    for_cols(n, m, &|j0, j1| {
        let mut wide = vec![0f32; k];
        with_avx2_codegen(
            #[inline(always)]
            || {
                for j in j0..j1 {
                    for (w, b) in wide.iter_mut().zip(op.wrow(j).chunks_exact(4)) {
                        *w = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                    }
                    let wv = |i: usize| wide[i];
                    for r in 0..m {
                        let xr = &op.xs[r * k..(r + 1) * k];
                        let v = if shapes_ok && rows[r].seq_len as usize >= min_rows {
                            dot_tiled(k, wv, |i| xr[i])
                        } else {
                            dot_single_f32(k, wv, |i| xr[i])
                        };
                        put(r, j, v);
                    }
                }
            },
        )
    });
}

/// Q2_K and Q4_K: ggml's repacked kernels run rows in groups of four through the GEMM and the
/// remaining `len % 4` rows (all rows when len < 4) through the GEMV; a row's flag picks the
/// summation order of the one it went through.
fn gemm_group_rows<P: Fn(usize, usize, f32) + Sync>(op: &Operands<'_>, q2k: bool, put: &P) {
    let rows = op.rows;
    let acts: Vec<Vec<Act256>> = quantize_rows(op.xs, op.k, quantize_q8k);
    let gemm = RowPos::in_gemm_group;
    #[cfg(target_arch = "x86_64")]
    let simd = has_avx2_fma();
    #[cfg(target_arch = "x86_64")]
    let dot4 = |wr: &[u8], r: usize| {
        let a = [&acts[r][..], &acts[r + 1][..], &acts[r + 2][..], &acts[r + 3][..]];
        let g = [gemm(rows[r]), gemm(rows[r + 1]), gemm(rows[r + 2]), gemm(rows[r + 3])];
        // SAFETY: only passed on when AVX2/FMA are available (`simd`); every row has k/256
        // blocks and the weight row as many.
        unsafe {
            if q2k {
                simd_k::dotn_q2k::<4>(wr, a, g)
            } else {
                simd_k::dotn_q4k::<4>(wr, a, g)
            }
        }
    };
    #[cfg(target_arch = "x86_64")]
    let dot4 = simd.then_some(&dot4);
    #[cfg(not(target_arch = "x86_64"))]
    let dot4: Option<&NoDot4> = None;
    let dot1 = |wr: &[u8], r: usize| {
        if q2k {
            return dot_q2k(wr, &acts[r], gemm(rows[r]));
        }
        #[cfg(target_arch = "x86_64")]
        if simd {
            // SAFETY: AVX2/FMA checked (`simd`); every row has k/256 blocks.
            return unsafe { simd_k::dotn_q4k::<1>(wr, [&acts[r][..]], [gemm(rows[r])]) }[0];
        }
        dot_q4k(wr, &acts[r], gemm(rows[r]))
    };
    tiled_rows(op.n, op.m, &|j| op.wrow(j), put, dot4, &dot1);
}

/// BF16 weights: as for F16, tinyBLAS for several rows when k splits into 32-value chunks and
/// the output count into tiles of 4, `ggml_vec_dot_bf16` otherwise.
fn bf16_rows<P: Fn(usize, usize, f32) + Sync>(op: &Operands<'_>, put: &P) {
    let (n, k, m, rows) = (op.n, op.k, op.m, op.rows);
    let xb: Vec<u16> = op.xs.iter().map(|&v| to_bf16(v)).collect();
    let shapes_ok = k.is_multiple_of(32) && n.is_multiple_of(4);
    let tiled = |r: usize| shapes_ok && rows[r].seq_len > 1;
    let x = |r: usize| &xb[r * k..(r + 1) * k];
    let one = |r: usize, j: usize| {
        put(r, j, if tiled(r) { dot_bf16_tiled(op.wrow(j), x(r)) } else { dot_bf16_single(op.wrow(j), x(r)) })
    };
    for_cols(n, m, &|j0, j1| {
        // Blocks of rows, a block's activations kept in cache while every column meets them.
        for rb in (0..m).step_by(ROW_BLOCK) {
            let block = rb..(rb + ROW_BLOCK).min(m);
            #[cfg(target_arch = "x86_64")]
            let j = bf16_tiles(op, &xb, block.clone(), j0..j1, &tiled, &one, put);
            #[cfg(not(target_arch = "x86_64"))]
            let j = j0;
            for j in j..j1 {
                block.clone().for_each(|r| one(r, j));
            }
        }
    });
}

/// With AVX512-BF16's own instruction (every x86 CPU Wick runs BF16 on, see `supported`): the
/// leading columns of `cols` in fours against the tiled rows of `block` in fours, the sums
/// `dot_bf16_tiled` gives (the other rows through `one`). Returns the first column left.
#[cfg(target_arch = "x86_64")]
fn bf16_tiles<T, O, P>(
    op: &Operands<'_>,
    xb: &[u16],
    block: std::ops::Range<usize>,
    cols: std::ops::Range<usize>,
    tiled: &T,
    one: &O,
    put: &P,
) -> usize
where
    T: Fn(usize) -> bool,
    O: Fn(usize, usize),
    P: Fn(usize, usize, f32),
{
    let (k, mut j) = (op.k, cols.start);
    if !has_avx512bf16() {
        return j;
    }
    let x = |r: usize| &xb[r * k..(r + 1) * k];
    let (quads, mut rest): (BlockRows, BlockRows) = block.partition(|&r| tiled(r));
    let whole = quads.len() / 4 * 4;
    rest.extend(quads[whole..].iter().copied());
    while whole > 0 && j + 4 <= cols.end {
        let w = [op.wrow(j), op.wrow(j + 1), op.wrow(j + 2), op.wrow(j + 3)];
        for q in quads[..whole].chunks_exact(4) {
            // SAFETY: AVX-512F/BF16 checked; rows of 2k bytes and k values, k % 32 == 0.
            let sums = unsafe {
                let lanes = simd_bf16::tile4x4_lanes(w, [x(q[0]), x(q[1]), x(q[2]), x(q[3])], k);
                super::x86::reduce16_4x4(&lanes)
            };
            for (&r, row) in q.iter().zip(&sums) {
                for (c, &v) in row.iter().enumerate() {
                    put(r, j + c, v);
                }
            }
        }
        for c in j..j + 4 {
            rest.iter().for_each(|&r| one(r, c));
        }
        j += 4;
    }
    j
}

/// Q3_K, Q5_K and Q6_K: one kernel for every row count (see `dot_q6k`, `dot_q5k`, `dot_q3k`).
/// On aarch64 Q6_K with an output count % 8 == 0 follows ggml's 8x4 repack instead
/// (`k_quants::dot_q6k_repacked`: GEMM rows in groups of four, the rest GEMV).
fn k_quant_rows<P: Fn(usize, usize, f32) + Sync>(op: &Operands<'_>, dtype: GgmlDType, put: &P) {
    let acts: Vec<Vec<Act256>> = quantize_rows(op.xs, op.k, quantize_q8k);
    #[cfg(target_arch = "aarch64")]
    if dtype == GgmlDType::Q6K && op.n.is_multiple_of(8) {
        let (rows, none) = (op.rows, None::<&fn(&[u8], usize) -> [f32; 4]>);
        let one =
            |wr: &[u8], r: usize| super::k_quants::dot_q6k_repacked(wr, &acts[r], rows[r].in_gemm_group());
        return tiled_rows(op.n, op.m, &|j| op.wrow(j), put, none, &one);
    }
    let dot = match dtype {
        GgmlDType::Q6K => dot_q6k,
        GgmlDType::Q5K => dot_q5k,
        _ => dot_q3k,
    };
    #[cfg(target_arch = "x86_64")]
    let dot4: Option<Dot4<Act256>> = has_avx2_fma().then_some(match dtype {
        GgmlDType::Q6K => simd_k::dotn_q6k::<4>,
        GgmlDType::Q5K => simd_k::dotn_q5k::<4>,
        _ => simd_k::dotn_q3k::<4>,
    });
    #[cfg(not(target_arch = "x86_64"))]
    let dot4 = None;
    rows_by_dot(op.n, op.m, &|j| op.wrow(j), put, &acts, dot, dot4);
}

/// The 32-value block types (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1) on q8_0 / q8_1 activation blocks.
fn q8_rows<P: Fn(usize, usize, f32) + Sync>(op: &Operands<'_>, dtype: GgmlDType, put: &P) {
    let acts: Vec<Vec<Act32>> = quantize_rows(op.xs, op.k, quantize_q8);
    let dot = match dtype {
        GgmlDType::Q8_0 => dot_q8_0,
        GgmlDType::Q4_0 => dot_q4_0,
        GgmlDType::Q5_0 => dot_q5_0,
        GgmlDType::Q5_1 => dot_q5_1,
        _ => dot_q4_1,
    };
    #[cfg(target_arch = "x86_64")]
    let dot4: Option<Dot4<Act32>> = has_avx2_fma().then_some(match dtype {
        GgmlDType::Q8_0 => simd::dot4_q8_0,
        GgmlDType::Q4_0 => simd::dot4_q4_0,
        GgmlDType::Q5_0 => simd::dot4_q5_0,
        GgmlDType::Q5_1 => simd::dot4_q5_1,
        _ => simd::dot4_q4_1,
    });
    #[cfg(not(target_arch = "x86_64"))]
    let dot4 = None;
    #[cfg(target_arch = "aarch64")]
    if dtype == GgmlDType::Q8_0 && op.n.is_multiple_of(4) {
        // ggml repacks these on aarch64 (`quants::dot_q8_0_repacked`).
        let (rows, none) = (op.rows, None::<&fn(&[u8], usize) -> [f32; 4]>);
        let one =
            |wr: &[u8], r: usize| super::quants::dot_q8_0_repacked(wr, &acts[r], rows[r].in_gemm_group());
        return tiled_rows(op.n, op.m, &|j| op.wrow(j), put, none, &one);
    }
    #[cfg(target_arch = "x86_64")]
    if dtype == GgmlDType::Q8_0 && op.m >= 4 && has_avx512() {
        return q8_0_tiles(op, &acts, put);
    }
    rows_by_dot(op.n, op.m, &|j| op.wrow(j), put, &acts, dot, dot4);
}

/// Q8_0 with several rows (unrepacked weights: the vision tower's): 4 rows × 4 columns per
/// pass of the AVX512-VNNI kernel, row blocks kept in cache while every column meets them;
/// the rows and columns left over one by one. Each output is `dot_q8_0`'s.
#[cfg(target_arch = "x86_64")]
fn q8_0_tiles<P: Fn(usize, usize, f32) + Sync>(op: &Operands<'_>, acts: &[Vec<Act32>], put: &P) {
    for_cols(op.n, op.m, &|j0, j1| {
        for rb in (0..op.m).step_by(ROW_BLOCK) {
            let re = (rb + ROW_BLOCK).min(op.m);
            let fours = rb + (re - rb) / 4 * 4;
            let mut j = j0;
            while j + 4 <= j1 {
                let w = [op.wrow(j), op.wrow(j + 1), op.wrow(j + 2), op.wrow(j + 3)];
                for r in (rb..fours).step_by(4) {
                    let a = [&acts[r][..], &acts[r + 1][..], &acts[r + 2][..], &acts[r + 3][..]];
                    // SAFETY: AVX-512 with VNNI (`has_avx512`), F16C and FMA; rows of k/32 blocks.
                    let v = unsafe { simd::tile4x4_q8_0(w, a) };
                    for (t, row) in v.iter().enumerate() {
                        for (c, &x) in row.iter().enumerate() {
                            put(r + t, j + c, x);
                        }
                    }
                }
                for r in fours..re {
                    (0..4).for_each(|c| put(r, j + c, dot_q8_0(w[c], &acts[r])));
                }
                j += 4;
            }
            for j in j..j1 {
                (rb..re).for_each(|r| put(r, j, dot_q8_0(op.wrow(j), &acts[r])));
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::cpu::dot_checks::lcg;

    /// Q8_0's 4 × 4 VNNI tiles give every output `dot_q8_0`'s sum: 11 rows (two tiles and
    /// three left), 14 columns (three tiles and two left), extreme bytes included.
    #[test]
    fn q8_0_tiles_give_each_output_its_row_dot() {
        let mut next = lcg(5);
        let (k, n, m) = (128, 14, 11);
        let xs: Vec<f32> = (0..m * k)
            .map(|i| if i % 37 == 0 { -4.0 } else { (next() % 2001) as f32 / 1000.0 - 1.0 })
            .collect();
        let mut data = Vec::with_capacity(n * k / 32 * 34);
        for _ in 0..n * k / 32 {
            data.extend(half::f16::from_f32(0.01 + (next() % 100) as f32 / 1e4).to_le_bytes());
            data.extend((0..32).map(|i| if i == 3 { 0x80 } else { next() as u8 }));
        }
        let rows = vec![RowPos { seq_len: m as u32, idx: 0 }; m];
        let op = Operands { xs: &xs, data: &data, row_bytes: k / 32 * 34, rows: &rows, n, k, m };
        let mut y = vec![0f32; m * n];
        let yp = SyncPtr(y.as_mut_ptr());
        // SAFETY: r < m, j < n; one task per column.
        q8_rows(&op, GgmlDType::Q8_0, &move |r: usize, j: usize, v: f32| unsafe {
            *yp.get().add(r * n + j) = v
        });
        let acts: Vec<Vec<Act32>> = quantize_rows(&xs, k, quantize_q8);
        for r in 0..m {
            for j in 0..n {
                let want = dot_q8_0(op.wrow(j), &acts[r]);
                assert_eq!(y[r * n + j].to_bits(), want.to_bits(), "row {r}, column {j}");
            }
        }
    }

    /// BF16's 4 × 4 tiles (AVX512-BF16's own instruction) give every output the sum of its row
    /// dot (the AVX2 emulation): prompts of 9 and 4 rows beside decode rows, a partial tile of
    /// columns.
    #[test]
    fn bf16_tiles_give_each_output_its_row_dot() {
        let mut next = lcg(3);
        let mut val = || (next() % 2001) as f32 / 1000.0 - 1.0;
        let (k, n) = (96, 12);
        let rows: Vec<RowPos> = [9u32, 1, 4, 1]
            .iter()
            .flat_map(|&len| (0..len).map(move |idx| RowPos { seq_len: len, idx }))
            .collect();
        let m = rows.len();
        let xs: Vec<f32> = (0..m * k).map(|_| val()).collect();
        let data: Vec<u8> = (0..n * k).flat_map(|_| to_bf16(val()).to_le_bytes()).collect();
        let op = Operands { xs: &xs, data: &data, row_bytes: 2 * k, rows: &rows, n, k, m };
        let mut y = vec![0f32; m * n];
        let yp = SyncPtr(y.as_mut_ptr());
        // SAFETY: r < m, j < n; one task per column.
        bf16_rows(&op, &move |r: usize, j: usize, v: f32| unsafe { *yp.get().add(r * n + j) = v });
        for r in 0..m {
            let x: Vec<u16> = xs[r * k..(r + 1) * k].iter().map(|&v| to_bf16(v)).collect();
            for j in 0..n {
                let want = match rows[r].seq_len > 1 {
                    true => dot_bf16_tiled(op.wrow(j), &x),
                    false => dot_bf16_single(op.wrow(j), &x),
                };
                assert_eq!(y[r * n + j].to_bits(), want.to_bits(), "row {r}, column {j}");
            }
        }
    }
}
