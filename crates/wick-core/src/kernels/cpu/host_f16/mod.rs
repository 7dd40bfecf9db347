//! F16 weights held on the host as f16 (LoRA adapters: small, and read by every group of rows
//! that uses them each step), multiplied in the orders llama.cpp's CPU backend uses for an F16
//! weight: `ggml_vec_dot_f16` for single-token rows — a short dot (k below one vector step, an
//! adapter's B) as its f64 tail alone, a long one (A) as its 64-step head — and tinyBLAS's for
//! prompt rows where ggml takes it; `f16_core` (the GGUF F16 path) where no kernel here fits
//! (aarch64's prompt rows, x86 without AVX-512). The kernels widen each weight once for up to
//! four rows and read f16 directly: a widened copy per call was most of an adapter's cost.

use candle_core::Tensor;
use half::f16;

#[cfg(target_arch = "x86_64")]
use super::blocks::reduce16;
use super::elementwise::with_host_f32;
use super::f16_matmul::{f16_core, F16Rows, SHORT_DOT};
use super::feats::with_avx2_codegen;
use super::float_dots::{dot_tiled_sl, dots16_blocks, round_to_f16, widen_f16};
use crate::error::{Result, WickError};
use crate::kernels::RowPos;
use crate::runtime::pool::{self, SyncPtr};

mod store;
use store::F16Store;

/// F16 weights kept on the host as stored (small weights such as LoRA adapters, read every
/// step by every group that uses them: half the bytes of widened ones), widened as they are
/// read: what `matmul` gives for the F16 tensor.
pub struct HostF16 {
    /// `[n, k]` row-major; empty when the weights are kept as `t`.
    w: F16Store,
    /// The weights instead when k is a short dot (a LoRA adapter's B, k = its rank), where each
    /// output is a sequential f64 sum over k: panels of `SHORT_BLOCK` outputs, each
    /// `[k, SHORT_BLOCK]` (the last zero-padded), so single-token rows sum a panel's outputs
    /// side by side over one contiguous read.
    t: F16Store,
    n: usize,
    k: usize,
}

impl HostF16 {
    pub fn new(w: Vec<f16>, n: usize, k: usize) -> Result<Self> {
        if w.len() != n * k {
            return Err(WickError::Internal(format!("f16 weight of {} values for [{n}, {k}]", w.len())));
        }
        if k >= SHORT_DOT {
            return Ok(Self { w: F16Store::Own(w), t: F16Store::Own(vec![]), n, k });
        }
        let mut t = Vec::with_capacity(n.div_ceil(SHORT_BLOCK) * SHORT_BLOCK * k);
        for p in 0..n.div_ceil(SHORT_BLOCK) {
            for i in 0..k {
                for j in p * SHORT_BLOCK..(p + 1) * SHORT_BLOCK {
                    t.push(if j < n { w[j * k + i] } else { f16::ZERO });
                }
            }
        }
        Ok(Self { w: F16Store::Own(vec![]), t: F16Store::Own(t), n, k })
    }

    /// `x`: `[m, k]` → `[m, n]`.
    pub fn matmul(&self, x: &Tensor, rows: &[RowPos]) -> Result<Tensor> {
        let (m, kx) = x.dims2()?;
        if kx != self.k || rows.len() != m {
            return Err(WickError::Internal(format!(
                "f16 matmul: input [{m}, {kx}], weight [{}, {}]",
                self.n, self.k
            )));
        }
        let y = with_host_f32(x, |xs| self.matmul_host(xs, rows))?;
        Ok(Tensor::from_vec(y, (m, self.n), x.device())?)
    }

    /// `(n, k)`: outputs and inputs.
    pub fn dims(&self) -> (usize, usize) {
        (self.n, self.k)
    }

    /// The weights' bytes as the products read them.
    pub fn bytes(&self) -> &[u8] {
        let w = if self.t.is_empty() { &self.w } else { &self.t };
        // SAFETY: f16 is two plain bytes; the slice covers exactly `w`'s memory.
        unsafe { std::slice::from_raw_parts(w.as_ptr() as *const u8, std::mem::size_of_val(&w[..])) }
    }

    /// `matmul` on host rows: `xs` holds `rows.len()` rows of k values. Single-token rows go
    /// through the kernels here and the others through `f16_core`, apart when a step mixes
    /// them (a row's result never depends on the rows beside it).
    pub fn matmul_host(&self, xs: &[f32], rows: &[RowPos]) -> Vec<f32> {
        self.matmul_prepared(&Self::prepare(xs), rows)
    }

    /// Activations as every product here reads them, so rows shared by several products are
    /// prepared once: on x86 rounded to f16 (all of ggml's F16 orders there read them so); on
    /// aarch64 as they are (its tinyBLAS order reads them unrounded; the rest round them).
    pub fn prepare(xs: &[f32]) -> Vec<f32> {
        match cfg!(target_arch = "x86_64") {
            true => round_to_f16(xs),
            false => xs.to_vec(),
        }
    }

    /// `matmul_host` of rows given by `prepare`.
    pub fn matmul_prepared(&self, xs: &[f32], rows: &[RowPos]) -> Vec<f32> {
        let (n, k, m) = (self.n, self.k, rows.len());
        let mut y = vec![0f32; m * n];
        let (singles, others): (Vec<usize>, Vec<usize>) = (0..m).partition(|&r| rows[r].seq_len == 1);
        if singles.is_empty() || others.is_empty() {
            self.products(xs, rows, !singles.is_empty(), Out::new(&mut y, n, None));
            return y;
        }
        for (idx, single) in [(&singles, true), (&others, false)] {
            let mut x = Vec::with_capacity(idx.len() * k);
            for &r in idx.iter() {
                x.extend_from_slice(&xs[r * k..(r + 1) * k]);
            }
            let pos: Vec<RowPos> = idx.iter().map(|&r| rows[r]).collect();
            self.products(&x, &pos, single, Out::new(&mut y, n, Some(idx)));
        }
        y
    }

    /// The products of rows (given by `prepare`) that are all single-token ones (`single`) or
    /// none, into `out`.
    fn products(&self, xs: &[f32], rows: &[RowPos], single: bool, out: Out<'_>) {
        let (n, k, m) = (self.n, self.k, rows.len());
        let put = move |r: usize, j: usize, v: f32| out.put(r, j, v);
        // tinyBLAS's order for prompt rows where f16_core takes it (x86: k in chunks of 16,
        // outputs in fours), else ggml_vec_dot_f16's.
        let tiled = !single && cfg!(target_arch = "x86_64") && k.is_multiple_of(16) && n.is_multiple_of(4);
        if !self.t.is_empty() && tiled {
            short_tiled_rows(&self.t, n, k, xs, m, out);
        } else if !self.t.is_empty() && single && cfg!(target_arch = "aarch64") {
            short_single_rows(&self.t, n, k, &round_to_f16(xs), m, out);
        } else if !self.t.is_empty() && cfg!(target_arch = "x86_64") {
            short_single_rows(&self.t, n, k, xs, m, out);
        } else if tiled {
            long_rows(&self.w, (n, k), xs, m, true, &put);
        } else if long_dots_simd() {
            // ggml_vec_dot_f16's order, for single-token rows and prompt rows alike here.
            long_rows(&self.w, (n, k), xs, m, false, &put);
        } else {
            f16_core(n, k, xs, rows, self, &put);
        }
    }
}

/// A product's `[m, n]` output, written by the pool's tasks at disjoint (row, column)s and
/// read after the pass; row r of a part of the rows is the output's row `rows[r]`.
#[derive(Clone, Copy)]
struct Out<'a> {
    y: SyncPtr<f32>,
    n: usize,
    rows: Option<&'a [usize]>,
}

impl<'a> Out<'a> {
    fn new(y: &mut [f32], n: usize, rows: Option<&'a [usize]>) -> Self {
        Out { y: SyncPtr(y.as_mut_ptr()), n, rows }
    }

    #[inline(always)]
    fn at(self, r: usize, j: usize) -> usize {
        self.rows.map_or(r, |rows| rows[r]) * self.n + j
    }

    #[inline(always)]
    fn put(self, r: usize, j: usize, v: f32) {
        // SAFETY: callers keep r below the part's rows and j < n, one writer per (row, column);
        // `y` outlives the pass.
        unsafe { *self.y.get().add(self.at(r, j)) = v }
    }

    /// Row r's outputs from column j0 on.
    #[inline(always)]
    fn put_run(self, r: usize, j0: usize, v: &[f32]) {
        // SAFETY: as for `put`, with j0 + v.len() ≤ n.
        unsafe { std::ptr::copy_nonoverlapping(v.as_ptr(), self.y.get().add(self.at(r, j0)), v.len()) }
    }
}

/// tinyBLAS's order (`dot_tiled`: 16 lanes over chunks of 16, the 16-lane tree sum) for
/// prompt rows of a short dot, a panel half (sixteen outputs) at a time for every row.
fn short_tiled_rows(t: &[f16], n: usize, k: usize, xs: &[f32], m: usize, out: Out<'_>) {
    pool::run(n.div_ceil(SHORT_BLOCK), &|p| {
        let panel = &t[p * k * SHORT_BLOCK..(p + 1) * k * SHORT_BLOCK];
        for h in 0..SHORT_BLOCK / 16 {
            let j0 = p * SHORT_BLOCK + 16 * h;
            let cols = n.saturating_sub(j0).min(16);
            if cols == 0 {
                continue;
            }
            let emit = |r: usize, sums: &[f32; 16]| out.put_run(r, j0, &sums[..cols]);
            #[cfg(target_arch = "x86_64")]
            if k == 16 && super::feats::has_avx512() && xs.len() >= m * 16 {
                // SAFETY: AVX-512 F checked; the panel holds 16 rows, xs m rows of 16.
                unsafe { tiled16_k16_rows(panel, h, xs, m, emit) };
                continue;
            }
            for r in 0..m {
                emit(r, &tiled16(panel, h, &xs[r * k..(r + 1) * k]));
            }
        }
    });
}

/// `tiled16` for k = 16 (one chunk: a LoRA B of rank 16) over m rows, the half's sixteen
/// weight vectors widened once for all rows. Each lane's one product is exact (two f16
/// significands), so `fma(w₈₊ᵢ, x₈₊ᵢ, pᵢ)` rounds `a₈₊ᵢ + aᵢ` as the tree's first level does,
/// with `pᵢ = fma(wᵢ, xᵢ, +0)` as the chunk loop makes it.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn tiled16_k16_rows(
    panel: &[f16],
    h: usize,
    xs: &[f32],
    m: usize,
    mut emit: impl FnMut(usize, &[f32; 16]),
) {
    use std::arch::x86_64::*;
    let w: [__m512; 16] = std::array::from_fn(|i| {
        _mm512_cvtph_ps(_mm256_loadu_si256(panel.as_ptr().add(i * SHORT_BLOCK + 16 * h) as *const __m256i))
    });
    let zero = _mm512_setzero_ps();
    for r in 0..m {
        let x = &xs[r * 16..(r + 1) * 16];
        let t: [__m512; 8] = std::array::from_fn(|i| {
            let p = _mm512_fmadd_ps(w[i], _mm512_set1_ps(x[i]), zero);
            _mm512_fmadd_ps(w[i + 8], _mm512_set1_ps(x[i + 8]), p)
        });
        let mut sums = [0f32; 16];
        _mm512_storeu_ps(sums.as_mut_ptr(), tree8(t));
        emit(r, &sums);
    }
}

/// `dot_tiled` of x (k values, k % 16 = 0) with each of the sixteen outputs of half `h` of a
/// panel (`[k, SHORT_BLOCK]` f16), lane-parallel over the outputs.
fn tiled16(panel: &[f16], h: usize, x: &[f32]) -> [f32; 16] {
    #[cfg(target_arch = "x86_64")]
    if super::feats::has_avx512() && x.len().is_multiple_of(16) && panel.len() >= x.len() * SHORT_BLOCK {
        // SAFETY: AVX-512 F checked; every row of the panel is inside it.
        return unsafe { tiled16_avx512(panel, h, x) };
    }
    tiled16_widened(panel, h, x)
}

/// `tiled16` on the half widened to `dots16_blocks`' layout.
fn tiled16_widened(panel: &[f16], h: usize, x: &[f32]) -> [f32; 16] {
    let k = x.len();
    let mut half = vec![0f32; 16 * k];
    for (i, row) in panel.chunks_exact(SHORT_BLOCK).take(k).enumerate() {
        widen_f16(&row[16 * h..16 * (h + 1)], &mut half[16 * i..16 * (i + 1)]);
    }
    dots16_blocks(k, true, &half, x)
}

/// `tiled16` reading the f16 panel directly: per output 16 lanes over chunks of 16 (FMA), then
/// `reduce16`'s tree, the outputs side by side.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn tiled16_avx512(panel: &[f16], h: usize, x: &[f32]) -> [f32; 16] {
    use std::arch::x86_64::*;
    let mut f = [_mm512_setzero_ps(); 16];
    for base in (0..x.len()).step_by(16) {
        for (l, a) in f.iter_mut().enumerate() {
            let i = base + l;
            let w = _mm512_cvtph_ps(_mm256_loadu_si256(
                panel.as_ptr().add(i * SHORT_BLOCK + 16 * h) as *const __m256i
            ));
            *a = _mm512_fmadd_ps(w, _mm512_set1_ps(x[i]), *a);
        }
    }
    let mut out = [0f32; 16];
    _mm512_storeu_ps(out.as_mut_ptr(), tree8(std::array::from_fn(|i| _mm512_add_ps(f[i + 8], f[i]))));
    out
}

/// `reduce16`'s tree from its second level on, lane-wise: the sums of lanes i and i + 8 in, the
/// 16-lane total out, for sixteen outputs side by side.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn tree8(t: [std::arch::x86_64::__m512; 8]) -> std::arch::x86_64::__m512 {
    use std::arch::x86_64::*;
    let q: [__m512; 4] = std::array::from_fn(|i| _mm512_add_ps(t[i + 4], t[i]));
    _mm512_add_ps(_mm512_add_ps(q[0], q[2]), _mm512_add_ps(q[1], q[3]))
}

/// `ggml_vec_dot_f16` with k below one vector step, for single-token rows: per output the f64
/// sum over i in order of `(w·x16) as f64` — `f16_core`'s short dots, each the same sum —
/// a panel of `t` (`HostF16::t`) at a time through `short_sums`: the panel stays in L1 across
/// the rows and its sums in registers across i.
fn short_single_rows(t: &[f16], n: usize, k: usize, xs: &[f32], m: usize, out: Out<'_>) {
    pool::run(n.div_ceil(SHORT_BLOCK), &|p| {
        let (jb, panel) = (p * SHORT_BLOCK, &t[p * k * SHORT_BLOCK..(p + 1) * k * SHORT_BLOCK]);
        // The weights from this panel on, which its prefetches may reach into.
        let room = (t.len() - p * k * SHORT_BLOCK) * 2;
        let cols = SHORT_BLOCK.min(n - jb);
        let x = |r: usize| &xs[r * k..(r + 1) * k];
        let out = |r: usize, sums: &[f32; SHORT_BLOCK]| out.put_run(r, jb, &sums[..cols]);
        // Four rows at a time share each weight's widening.
        let mut r = 0;
        while r + 4 <= m {
            let sums = short_sums(panel, room, [x(r), x(r + 1), x(r + 2), x(r + 3)]);
            sums.iter().enumerate().for_each(|(i, s)| out(r + i, s));
            r += 4;
        }
        match m - r {
            3 => short_sums(panel, room, [x(r), x(r + 1), x(r + 2)])
                .iter()
                .enumerate()
                .for_each(|(i, s)| out(r + i, s)),
            2 => {
                short_sums(panel, room, [x(r), x(r + 1)]).iter().enumerate().for_each(|(i, s)| out(r + i, s))
            }
            1 => out(r, &short_sums(panel, room, [x(r)])[0]),
            _ => {}
        }
    });
}

impl F16Rows for HostF16 {
    fn row<'a>(&'a self, j: usize, buf: &'a mut [f32]) -> &'a [f32] {
        let k = self.k;
        if self.t.is_empty() {
            widen_f16(&self.w[j * k..(j + 1) * k], buf);
        } else {
            // Column j % SHORT_BLOCK of panel j / SHORT_BLOCK.
            let panel = &self.t[j / SHORT_BLOCK * k * SHORT_BLOCK..][..k * SHORT_BLOCK];
            for (o, row) in buf.iter_mut().zip(panel.chunks_exact(SHORT_BLOCK)) {
                *o = row[j % SHORT_BLOCK].to_f32();
            }
        }
        &buf[..k]
    }
}

/// Long dots for single-token rows (`long_dots`): x86 with AVX-512 F. Elsewhere `f16_core`.
fn long_dots_simd() -> bool {
    #[cfg(target_arch = "x86_64")]
    return super::feats::has_avx512();
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// Every output of `w` (`[n, k]`, k ≥ 64) for each of the m rows of `xs`, in tinyBLAS's order
/// (`tiled`, prompt rows) or `ggml_vec_dot_f16`'s (x86): outputs spread over the pool, rows
/// four at a time per weight row.
fn long_rows<P: Fn(usize, usize, f32) + Sync>(
    w: &[f16],
    (n, k): (usize, usize),
    xs: &[f32],
    m: usize,
    tiled: bool,
    put: &P,
) {
    let x = |r: usize| &xs[r * k..(r + 1) * k];
    pool::run(n, &|j| {
        let wr = &w[j * k..(j + 1) * k];
        // The weights from this row on, which its prefetches may reach into.
        let room = (n - j) * k * 2;
        let emit = |r: usize, d: &[f32]| d.iter().enumerate().for_each(|(i, v)| put(r + i, j, *v));
        let mut r = 0;
        while r + 4 <= m {
            emit(r, &row_dots(tiled, wr, room, [x(r), x(r + 1), x(r + 2), x(r + 3)]));
            r += 4;
        }
        match m - r {
            3 => emit(r, &row_dots(tiled, wr, room, [x(r), x(r + 1), x(r + 2)])),
            2 => emit(r, &row_dots(tiled, wr, room, [x(r), x(r + 1)])),
            1 => emit(r, &row_dots(tiled, wr, room, [x(r)])),
            _ => {}
        }
    });
}

/// `long_tiled` or `long_dots`.
#[inline]
fn row_dots<const R: usize>(tiled: bool, w: &[f16], room: usize, xs: [&[f32]; R]) -> [f32; R] {
    if tiled {
        long_tiled(w, xs)
    } else {
        long_dots(w, room, xs)
    }
}

/// tinyBLAS's order (`dot_tiled_sl`: 16 lanes over chunks of 16, the 16-lane tree sum) of the
/// f16 row `w` with each of R rows `xs` (k % 16 = 0), each row summed as alone.
fn long_tiled<const R: usize>(w: &[f16], xs: [&[f32]; R]) -> [f32; R] {
    #[cfg(target_arch = "x86_64")]
    if xs.iter().all(|x| x.len() == w.len()) && w.len().is_multiple_of(16) && super::feats::has_avx512() {
        // SAFETY: AVX-512 F checked; every row is as long as `w`, whole chunks of 16.
        return unsafe { long_tiled_avx512(w, xs) };
    }
    let mut wide = vec![0f32; w.len()];
    widen_f16(w, &mut wide);
    with_avx2_codegen(
        #[inline(always)]
        || xs.map(|x| dot_tiled_sl(&wide, x)),
    )
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn long_tiled_avx512<const R: usize>(w: &[f16], xs: [&[f32]; R]) -> [f32; R] {
    use std::arch::x86_64::*;
    let mut acc = [_mm512_setzero_ps(); R];
    for base in (0..w.len()).step_by(16) {
        let wv = _mm512_cvtph_ps(_mm256_loadu_si256(w.as_ptr().add(base) as *const __m256i));
        for (a, x) in acc.iter_mut().zip(&xs) {
            *a = _mm512_fmadd_ps(wv, _mm512_loadu_ps(x.as_ptr().add(base)), *a);
        }
    }
    acc.map(|a| {
        let mut lanes = [0f32; 16];
        _mm512_storeu_ps(lanes.as_mut_ptr(), a);
        reduce16(&lanes)
    })
}

/// `ggml_vec_dot_f16` on x86 of the f16 row `w` with each of R rows `xs` of f16-exact values:
/// the `dot_single_sl` order (4 accumulators of 16 lanes over steps of 64, folded
/// (a0+a2)+(a1+a3), the 16-lane tree sum, the tail added in f64), each row summed as alone.
/// Its prefetches stay within the `room` bytes from `w`'s start (`w` and the weights after
/// it): a prefetch past the adapter's end is bandwidth spent on nothing.
#[cfg_attr(not(target_arch = "x86_64"), allow(unused_variables))]
#[inline]
pub fn long_dots<const R: usize>(w: &[f16], room: usize, xs: [&[f32]; R]) -> [f32; R] {
    #[cfg(target_arch = "x86_64")]
    if xs.iter().all(|x| x.len() == w.len()) && super::feats::has_avx512() {
        // SAFETY: AVX-512 F checked; every row is as long as `w`.
        return unsafe { long_dots_avx512(w, room, xs) };
    }
    let mut wide = vec![0f32; w.len()];
    widen_f16(w, &mut wide);
    xs.map(|x| super::float_dots::dot_single_sl(&wide, x))
}

/// How far ahead of its reads a kernel here prefetches an adapter's weights: each weight's A
/// and B are short streams (32–150 KB) that the hardware prefetcher barely ramps up on, and a
/// core's misses in flight bound its bandwidth. 4 KB ahead took 4 distinct adapters from 0.65
/// to 0.75–0.78 of no adapter over 1 KB (Zen 5 VM); 16 KB was slower (benches/RESULTS.md).
#[cfg(target_arch = "x86_64")]
const PREFETCH: usize = 4096;

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn long_dots_avx512<const R: usize>(w: &[f16], room: usize, xs: [&[f32]; R]) -> [f32; R] {
    use std::arch::x86_64::*;
    let (k, np) = (w.len(), w.len() & !63);
    let mut acc = [[_mm512_setzero_ps(); 4]; R];
    for base in (0..np).step_by(64) {
        if 2 * base + PREFETCH + 128 <= room {
            let ahead = (w.as_ptr().add(base) as *const i8).wrapping_add(PREFETCH);
            _mm_prefetch::<_MM_HINT_T0>(ahead);
            _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(64));
        }
        for j in 0..4 {
            let wv = _mm512_cvtph_ps(_mm256_loadu_si256(w.as_ptr().add(base + 16 * j) as *const __m256i));
            for (a, x) in acc.iter_mut().zip(&xs) {
                a[j] = _mm512_fmadd_ps(wv, _mm512_loadu_ps(x.as_ptr().add(base + 16 * j)), a[j]);
            }
        }
    }
    let mut out = [0f32; R];
    for ((o, a), x) in out.iter_mut().zip(&acc).zip(&xs) {
        let folded = _mm512_add_ps(_mm512_add_ps(a[0], a[2]), _mm512_add_ps(a[1], a[3]));
        let mut lanes = [0f32; 16];
        _mm512_storeu_ps(lanes.as_mut_ptr(), folded);
        let mut sum = reduce16(&lanes) as f64;
        for i in np..k {
            sum += (w[i].to_f32() * x[i]) as f64;
        }
        *o = sum as f32;
    }
    out
}

/// Outputs `short_sums` runs side by side (eight AVX2 registers of f64).
const SHORT_BLOCK: usize = 32;

/// `ggml_vec_dot_f16` of k below one vector step (its f64 tail alone) for `SHORT_BLOCK`
/// outputs side by side, over a panel `w` of `[k, SHORT_BLOCK]` f16 weights, for R rows `xs`
/// of k f16-exact values: output c of row r is the sum over i in order of
/// `(w[i][c] · xs[r][i]) as f64` — the product in f32 (exact: two 11-bit significands), the
/// sum in f64 from zero, rounded to f32 at the end.
/// Its prefetches stay within the `room` bytes from `w`'s start (as `long_dots`').
#[cfg_attr(not(target_arch = "x86_64"), allow(unused_variables))]
#[inline]
pub fn short_sums<const R: usize>(w: &[half::f16], room: usize, xs: [&[f32]; R]) -> [[f32; SHORT_BLOCK]; R] {
    #[cfg(target_arch = "x86_64")]
    if xs.iter().all(|x| w.len() >= x.len() * SHORT_BLOCK) {
        if super::feats::has_avx512() {
            // SAFETY: AVX-512 F checked; the panel holds every row's weights.
            return unsafe { short_sums_avx512(w, room, xs) };
        }
        if super::feats::has_avx2() {
            // SAFETY: AVX2 and F16C checked; as above.
            return xs.map(|x| unsafe { short_sums_avx2(w, x) });
        }
    }
    xs.map(|x| {
        let mut acc = [0f64; SHORT_BLOCK];
        for (row, &xi) in w.chunks_exact(SHORT_BLOCK).zip(x) {
            for (a, wv) in acc.iter_mut().zip(row) {
                *a += (wv.to_f32() * xi) as f64;
            }
        }
        acc.map(|a| a as f32)
    })
}

/// `short_sums` with the weights widened to f64 once for all R rows: since each product is
/// exact, `fma(w, x, acc)` rounds `acc + w·x` once, as the f32 product widened and added does.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,f16c")]
unsafe fn short_sums_avx512<const R: usize>(
    w: &[half::f16],
    room: usize,
    xs: [&[f32]; R],
) -> [[f32; SHORT_BLOCK]; R] {
    use std::arch::x86_64::*;
    let mut acc = [[_mm512_setzero_pd(); SHORT_BLOCK / 8]; R];
    let k = xs.iter().map(|x| x.len()).min().unwrap_or(0);
    for i in 0..k {
        let row = w.as_ptr().add(i * SHORT_BLOCK) as *const __m256i;
        // Adapters stream from memory: ask for the line PREFETCH bytes ahead (a hint; never faults).
        if 2 * i * SHORT_BLOCK + PREFETCH + 64 <= room {
            _mm_prefetch::<_MM_HINT_T0>((row as *const i8).wrapping_add(PREFETCH));
        }
        let mut wv = [_mm512_setzero_pd(); SHORT_BLOCK / 8];
        for (q, v) in wv.iter_mut().enumerate() {
            *v = _mm512_cvtps_pd(_mm256_cvtph_ps(_mm_loadu_si128((row as *const __m128i).add(q))));
        }
        for (a, x) in acc.iter_mut().zip(&xs) {
            let xv = _mm512_set1_pd(x[i] as f64);
            for (aq, &wq) in a.iter_mut().zip(&wv) {
                *aq = _mm512_fmadd_pd(wq, xv, *aq);
            }
        }
    }
    acc.map(|a| {
        let mut out = [0f32; SHORT_BLOCK];
        for (q, v) in a.iter().enumerate() {
            _mm256_storeu_ps(out.as_mut_ptr().add(8 * q), _mm512_cvtpd_ps(*v));
        }
        out
    })
}

/// `short_sums` over a whole block: per i, 32 f16 weights widened (F16C, exact), multiplied
/// by `x[i]` in f32, widened to f64 and added, eight registers of four sums.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,f16c")]
unsafe fn short_sums_avx2(w: &[half::f16], x: &[f32]) -> [f32; SHORT_BLOCK] {
    use std::arch::x86_64::*;
    let mut acc = [_mm256_setzero_pd(); SHORT_BLOCK / 4];
    for (i, &xi) in x.iter().enumerate() {
        let xv = _mm256_set1_ps(xi);
        let row = w.as_ptr().add(i * SHORT_BLOCK) as *const __m128i;
        for q in 0..SHORT_BLOCK / 8 {
            let p = _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128(row.add(q))), xv);
            acc[2 * q] = _mm256_add_pd(acc[2 * q], _mm256_cvtps_pd(_mm256_castps256_ps128(p)));
            acc[2 * q + 1] = _mm256_add_pd(acc[2 * q + 1], _mm256_cvtps_pd(_mm256_extractf128_ps(p, 1)));
        }
    }
    let mut out = [0f32; SHORT_BLOCK];
    for (q, a) in acc.iter().enumerate() {
        _mm_storeu_ps(out.as_mut_ptr().add(4 * q), _mm256_cvtpd_ps(*a));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::cpu::dot_checks::lcg;
    use crate::kernels::cpu::float_dots::dot_single_sl;

    /// The SIMD short sums (one to four rows; f16-exact activations over a wide exponent
    /// range, subnormal and huge values, infinities) equal the scalar order bit for bit, and
    /// the F16C conversions equal `half`'s.
    #[test]
    fn short_sums_and_f16_conversions_match_the_scalar_order() {
        let mut r = lcg(9);
        let mut f = move || {
            let v = (r() as f32 / (1 << 24) as f32) - 0.5;
            let e = (r() % 40) as i32 - 24;
            v * 2f32.powi(e)
        };
        let k = 16;
        let mut w: Vec<half::f16> = (0..k * SHORT_BLOCK).map(|_| half::f16::from_f32(f())).collect();
        w[3] = half::f16::from_f32(65504.0);
        w[40] = half::f16::from_bits(1); // the smallest subnormal
        w[70] = half::f16::ZERO;
        let mut xs: Vec<f32> = round_to_f16(&(0..4 * k).map(|_| f()).collect::<Vec<_>>());
        xs[2] = 65504.0;
        xs[20] = f32::INFINITY;
        let reference = |x: &[f32]| {
            let mut acc = [0f64; SHORT_BLOCK];
            for i in 0..k {
                for c in 0..SHORT_BLOCK {
                    acc[c] += (w[i * SHORT_BLOCK + c].to_f32() * x[i]) as f64;
                }
            }
            acc.map(|a| a as f32)
        };
        let x = |r: usize| &xs[r * k..(r + 1) * k];
        let want: Vec<[f32; SHORT_BLOCK]> = (0..4).map(|r| reference(x(r))).collect();
        let bits = |a: &[[f32; SHORT_BLOCK]]| a.iter().flatten().map(|v| v.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&short_sums(&w, w.len() * 2, [x(0)])), bits(&want[..1]));
        assert_eq!(bits(&short_sums(&w, w.len() * 2, [x(0), x(1), x(2)])), bits(&want[..3]));
        assert_eq!(bits(&short_sums(&w, w.len() * 2, [x(0), x(1), x(2), x(3)])), bits(&want));

        let raw: Vec<f32> = (0..1003).map(|_| f() * 1e3).collect();
        let rounded = round_to_f16(&raw);
        for (a, b) in raw.iter().zip(&rounded) {
            assert_eq!(half::f16::from_f32(*a).to_f32().to_bits(), b.to_bits());
        }
        let mut wide = vec![0f32; w.len() - 3];
        widen_f16(&w[3..], &mut wide);
        for (a, b) in w[3..].iter().zip(&wide) {
            assert_eq!(a.to_f32().to_bits(), b.to_bits());
        }
    }

    /// The long dots (one to four rows, k with and without a tail) equal `dot_single_sl` over
    /// the widened row bit for bit.
    #[test]
    fn long_dots_match_the_single_token_order() {
        let mut r = lcg(11);
        let mut f = move || (r() as f32 / (1 << 24) as f32) - 0.5;
        for k in [64, 1024, 4608, 200] {
            let w: Vec<f16> = (0..k).map(|_| f16::from_f32(f())).collect();
            let xs = round_to_f16(&(0..4 * k).map(|_| f() * 8.0).collect::<Vec<_>>());
            let x = |r: usize| &xs[r * k..(r + 1) * k];
            let mut wide = vec![0f32; k];
            widen_f16(&w, &mut wide);
            let want: Vec<u32> = (0..4).map(|r| dot_single_sl(&wide, x(r)).to_bits()).collect();
            let bits = |d: &[f32]| d.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&long_dots(&w, k * 2, [x(0)])), want[..1], "k {k}");
            assert_eq!(bits(&long_dots(&w, k * 2, [x(0), x(1)])), want[..2], "k {k}");
            assert_eq!(bits(&long_dots(&w, k * 2, [x(0), x(1), x(2), x(3)])), want, "k {k}");
        }
    }

    /// `matmul_host` — single-token and prompt rows mixed, short and long dots, outputs not a
    /// whole number of panels — equals `f16_core` (the GGUF F16 path) bit for bit.
    #[test]
    fn host_products_match_the_f16_path() {
        let mut r = lcg(13);
        let mut f = move || (r() as f32 / (1 << 24) as f32) - 0.5;
        let rows: Vec<RowPos> = [1, 1, 6, 6, 6, 6, 6, 6, 1]
            .iter()
            .enumerate()
            .map(|(i, &seq_len)| RowPos { seq_len, idx: if seq_len == 1 { 0 } else { i as u32 - 2 } })
            .collect();
        for (n, k) in [(100, 16), (96, 8), (16, 1024), (12, 200)] {
            // Zeros of both signs among the weights and inputs (sums of zero products).
            let w: Vec<f16> =
                (0..n * k).map(|i| f16::from_f32(if i % 7 == 0 { -0.0 } else { f() })).collect();
            let xs: Vec<f32> =
                (0..rows.len() * k).map(|i| if i % 5 == 0 { 0.0 } else { f() * 4.0 }).collect();
            let host = HostF16::new(w.clone(), n, k).unwrap();
            // Rows read back as stored, whichever layout keeps them.
            let mut buf = vec![0f32; k];
            for j in 0..n {
                let want: Vec<u32> = w[j * k..(j + 1) * k].iter().map(|v| v.to_f32().to_bits()).collect();
                assert_eq!(host.row(j, &mut buf).iter().map(|v| v.to_bits()).collect::<Vec<_>>(), want);
            }
            if k % 16 == 0 && k < SHORT_DOT {
                let x16 = round_to_f16(&xs[..k]);
                for h in 0..2 {
                    let (a, b) = (tiled16(&host.t, h, &x16), tiled16_widened(&host.t, h, &x16));
                    assert_eq!(a.map(f32::to_bits), b.map(f32::to_bits));
                }
            }
            for rows in [&rows[..], &rows[..2], &rows[2..8]] {
                let xs = &xs[..rows.len() * k];
                let mut want = vec![0f32; rows.len() * n];
                let yp = SyncPtr(want.as_mut_ptr());
                // SAFETY: one writer per (row, column) of `want`, read after the pass.
                let put = move |r: usize, j: usize, v: f32| unsafe { *yp.get().add(r * n + j) = v };
                f16_core(n, k, xs, rows, &host, &put);
                let got = host.matmul_host(xs, rows);
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&got), bits(&want), "[{n}, {k}], {} rows", rows.len());
            }
        }
    }
}
