//! Quantized weights repacked at load into panels of 16 output columns, and the matmul over
//! them: for each block of the input dimension, a panel holds the 16 columns' scales and
//! quants side by side, so one vector register covers 16 outputs and no horizontal sums are
//! needed (ggml's "repack" buffers do the same with 8 columns).
//!
//! Every kernel computes each output exactly as the row-by-row kernel of `quants` / `k_quants`
//! for the same type does (the same integer block sums, the same float operations in the same
//! order), only for many outputs at once; the unit tests check it bit for bit.
//!
//! Instruction sets are picked at run time (`feats::isa`): AVX-512 VNNI, AVX2, or portable
//! scalar code.

/// Calls `$f::<R>(acts as [_; R], rest…)` for R = `$acts.len()` in 1..=8.
#[cfg(target_arch = "x86_64")]
macro_rules! by_rows {
    ($f:ident, $acts:expr, $($rest:expr),*) => {{
        let a = $acts;
        match a.len() {
            1 => $f::<1>(std::array::from_fn(|i| a[i]), $($rest),*),
            2 => $f::<2>(std::array::from_fn(|i| a[i]), $($rest),*),
            3 => $f::<3>(std::array::from_fn(|i| a[i]), $($rest),*),
            4 => $f::<4>(std::array::from_fn(|i| a[i]), $($rest),*),
            5 => $f::<5>(std::array::from_fn(|i| a[i]), $($rest),*),
            6 => $f::<6>(std::array::from_fn(|i| a[i]), $($rest),*),
            7 => $f::<7>(std::array::from_fn(|i| a[i]), $($rest),*),
            _ => $f::<8>(std::array::from_fn(|i| a[i]), $($rest),*),
        }
    }};
}

/// The NEON tiles' driver: `$call` for each pair of rows (`$rows = [a, b]`) and a last odd row
/// (`[a]`), with `$o` the pair's first output row and `$i` the pair's index.
#[cfg(target_arch = "aarch64")]
macro_rules! in_row_pairs {
    ($acts:expr, $out:expr, $ldo:expr, |$rows:ident, $o:ident, $i:ident| $call:expr) => {{
        for ($i, two) in $acts.chunks(2).enumerate() {
            let $o = $out.add(2 * $i * $ldo);
            match two.len() {
                1 => {
                    let $rows = [two[0]];
                    $call
                }
                _ => {
                    let $rows = [two[0], two[1]];
                    $call
                }
            }
        }
    }};
}

/// `TileKernels::neon` for a type whose tiles read only the quantized rows: its
/// `tile_neon::<R, DOT>(rows, panel, nb, out, ldo)` on rows in pairs.
#[cfg(target_arch = "aarch64")]
macro_rules! neon_in_row_pairs {
    ($act:ty) => {
        #[inline(always)]
        unsafe fn neon<const DOT: bool>(
            panel: &[u8],
            nb: usize,
            acts: &[&[$act]],
            _: &[bool],
            out: *mut f32,
            ldo: usize,
        ) {
            crate::kernels::cpu::arm::with_dot::<DOT, _>(
                #[inline(always)]
                || in_row_pairs!(acts, out, ldo, |rows, o, _i| tile_neon::<_, DOT>(rows, panel, nb, o, ldo)),
            )
        }
    };
}

mod cached;
mod panel;
mod q4_0;
mod q4_1;
mod q4k;
mod q6k;
mod q8_0;

use std::sync::Arc;

use candle_core::quantized::{GgmlDType, QTensor};

use crate::error::{Result, WickError};
use crate::kernels::cpu::feats::{isa, Isa};
use crate::kernels::cpu::matmul::RowPos;
use crate::kernels::cpu::q8::quantize_rows;
use crate::runtime::alloc::StreamedBytes;
use crate::runtime::pool::{self, SyncPtr};
use crate::runtime::weight_cache::MappedBytes;

pub use self::panel::PANEL;

/// A tile's activation rows as slices, on the stack (tiles are called per panel: a heap
/// allocation each was measurable in decode).
#[inline(always)]
fn row_slices<A>(rows: &[Vec<A>]) -> [&[A]; MAX_ROWS] {
    let mut a: [&[A]; MAX_ROWS] = [&[]; MAX_ROWS];
    for (s, r) in a.iter_mut().zip(rows) {
        *s = r;
    }
    a
}

/// Activation rows per tile (the register budget of the AVX-512 kernels; the AVX2 ones take
/// them four at a time).
const MAX_ROWS: usize = 8;
/// Activation rows kept hot in L2 while the task's panels pass over them.
const ROW_BLOCK: usize = 64;

/// A tile kernel: `(panel, first row, rows, out, ldo)`.
type TileFn = dyn Fn(&[u8], usize, usize, *mut f32, usize) + Sync;

/// `PanelType::tiles`: `(isa, xs, k, rows)` → the tile kernel over the quantized rows.
type TilesFn = fn(Isa, &[f32], usize, &[RowPos]) -> Result<Box<TileFn>>;

/// What the panel driver needs of one packed type, as ggml's `type_traits_cpu` or candle's
/// `GgmlType`: each type's file defines one and `TYPES` lists it, so a new type is its file
/// and one line there.
pub(super) struct PanelType {
    /// The GGUF type its panels hold: `rows_raw` gives rows back as it, and weights of one
    /// `dtype` concatenate.
    dtype: GgmlDType,
    /// Inputs per block.
    qk: usize,
    /// Bytes of one block of one panel.
    block_bytes: usize,
    /// Whether weights are packed on this instruction set (where the row kernel is as fast,
    /// they are not).
    packs_on: fn(Isa) -> bool,
    /// GGUF rows (`n` rows of `k` inputs) → panels, into `out` (zeroed, the panels' length).
    pack: fn(raw: &[u8], n: usize, k: usize, out: &mut [u8]),
    /// Column `c`'s GGUF block `b` back out of a panel of `nb` blocks (`pack`'s inverse).
    unpack: fn(panel: &[u8], nb: usize, b: usize, c: usize, blk: &mut [u8]),
    /// The rows of `xs` (`k` inputs each) quantized as the kernel reads them, and its tile
    /// kernel over them on `isa`.
    tiles: TilesFn,
}

/// Every packed type, by the GGUF type it packs. A static: a packed weight's type is one of
/// these entries, and the pack cache names it by its place here.
static TYPES: &[(GgmlDType, &PanelType)] = &[
    (GgmlDType::Q4_0, &q4_0::TYPE),
    (GgmlDType::Q4_1, &q4_1::TYPE),
    (GgmlDType::Q8_0, &q8_0::TYPE),
    // Q5_0 rides on Q8_0 panels (its values are q8_0-exact).
    (GgmlDType::Q5_0, &q8_0::FROM_Q5_0),
    (GgmlDType::Q4K, &q4k::TYPE),
    (GgmlDType::Q6K, &q6k::TYPE),
];

/// `PanelType::packs_on` of the types with kernels for every instruction set.
fn every_isa(_: Isa) -> bool {
    true
}

/// `PanelType::tiles` of a type whose kernels read only the quantized rows (no per-row
/// flags): `quantize` turns each row of `xs` into the blocks `K` reads.
fn quantized_tiles<K: TileKernels + 'static>(
    isa: Isa,
    xs: &[f32],
    k: usize,
    quantize: fn(&[f32]) -> Vec<K::Act>,
) -> Result<Box<TileFn>>
where
    K::Act: Send + Sync + 'static,
{
    let acts = quantize_rows(xs, k, quantize);
    Ok(Box::new(move |panel, r0, rows, out, ldo| {
        let a = row_slices(&acts[r0..r0 + rows]);
        tile::<K>(isa, panel, &a[..rows], &[], out, ldo)
    }))
}

/// One type's tile kernels per instruction set; `tile` picks one by `isa` for each call.
/// Implementations mark `vnni` and `avx2` `#[inline(always)]`: they are thin loops that must
/// fold into the tile closure, as a call per panel shows in one-row (decode) passes.
/// Each computes `acts.len()` (≤ 8) rows × 16 columns into `out[r·ldo + c]`; `gemm[r]` (Q4_K
/// only, empty for the others): whether row r folds per sub-block pair (ggml's GEMM) or per
/// block (GEMV).
pub(super) trait TileKernels {
    /// The activation block the kernels read.
    type Act;
    /// Bytes of one block of one panel.
    const BLOCK_BYTES: usize;

    /// # Safety
    /// The CPU has AVX-512 F/BW/DQ/VL/VNNI; every activation row has `nb` blocks; the caller
    /// owns `out[r·ldo..r·ldo + 16]` for each row r.
    #[cfg(target_arch = "x86_64")]
    unsafe fn vnni(panel: &[u8], nb: usize, acts: &[&[Self::Act]], gemm: &[bool], out: *mut f32, ldo: usize);

    /// # Safety
    /// As `vnni`, with AVX2, FMA and F16C.
    #[cfg(target_arch = "x86_64")]
    unsafe fn avx2(panel: &[u8], nb: usize, acts: &[&[Self::Act]], gemm: &[bool], out: *mut f32, ldo: usize);

    /// # Safety
    /// As `vnni`, on NEON (every aarch64 CPU) with the dot-product instructions when `DOT`.
    #[cfg(target_arch = "aarch64")]
    unsafe fn neon<const DOT: bool>(
        panel: &[u8],
        nb: usize,
        acts: &[&[Self::Act]],
        gemm: &[bool],
        out: *mut f32,
        ldo: usize,
    );

    /// # Safety
    /// As `neon::<true>`, with the int8 matrix multiply too. Types without such a kernel run
    /// their dot-product one.
    #[cfg(target_arch = "aarch64")]
    unsafe fn i8mm(panel: &[u8], nb: usize, acts: &[&[Self::Act]], gemm: &[bool], out: *mut f32, ldo: usize) {
        // SAFETY: the caller's contract covers the dot-product instructions.
        unsafe { Self::neon::<true>(panel, nb, acts, gemm, out, ldo) }
    }

    /// Portable; writes through `out` as `vnni` (the caller owns those rows).
    fn scalar(panel: &[u8], nb: usize, acts: &[&[Self::Act]], gemm: &[bool], out: *mut f32, ldo: usize);
}

/// `K`'s tile for `isa` over one panel.
#[inline(always)]
fn tile<K: TileKernels>(
    isa: Isa,
    panel: &[u8],
    acts: &[&[K::Act]],
    gemm: &[bool],
    out: *mut f32,
    ldo: usize,
) {
    let nb = panel.len() / K::BLOCK_BYTES;
    debug_assert!(acts.iter().all(|a| a.len() == nb) && acts.len() <= MAX_ROWS);
    #[cfg(target_arch = "x86_64")]
    match isa {
        // SAFETY: `isa` comes from `feats::isa()` (or a test's cap under `detected()`), so
        // AVX-512 VNNI is present; every activation row was quantized from the weight's `k`
        // inputs (`nb` blocks); the driver owns out[r·ldo..+16] for each row.
        Isa::Avx512Vnni => return unsafe { K::vnni(panel, nb, acts, gemm, out, ldo) },
        // SAFETY: as above, with AVX2/FMA/F16C present.
        Isa::Avx2 => return unsafe { K::avx2(panel, nb, acts, gemm, out, ldo) },
        _ => {}
    }
    #[cfg(target_arch = "aarch64")]
    match isa {
        // SAFETY: `isa` comes from `feats::isa()` (or a test's cap under `detected()`), so the
        // dot-product and int8 matrix multiply instructions are present; rows and outputs as above.
        Isa::NeonI8mm => return unsafe { K::i8mm(panel, nb, acts, gemm, out, ldo) },
        Isa::NeonDotprod => {
            // SAFETY: as above, with the dot-product instructions.
            return unsafe { K::neon::<true>(panel, nb, acts, gemm, out, ldo) };
        }
        // SAFETY: NEON is baseline on aarch64; rows and outputs as above.
        Isa::Neon => return unsafe { K::neon::<false>(panel, nb, acts, gemm, out, ldo) },
        _ => {}
    }
    K::scalar(panel, nb, acts, gemm, out, ldo)
}

/// A packed weight's panels: packed by this process, or mapped from the pack cache's file.
enum Panels {
    /// Shared with the pack cache until it has written them.
    Packed(Arc<StreamedBytes>),
    Mapped(MappedBytes),
}

impl std::ops::Deref for Panels {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Self::Packed(b) => b,
            Self::Mapped(b) => b,
        }
    }
}

/// A weight `[n, k]` as panels of `PANEL` columns, each panel `k / block` blocks long; the
/// last panel is padded with zero columns when `n` is not a multiple of `PANEL`.
pub struct PackedWeight {
    ty: &'static PanelType,
    n: usize,
    k: usize,
    data: Panels,
    panel_bytes: usize,
    /// Output widths of the weights this one was concatenated from (`[n]` for one weight);
    /// all but the last are whole panels.
    parts: Vec<usize>,
}

impl PackedWeight {
    /// Repacks `w` when a packed kernel exists for its type and shape; `None` otherwise.
    pub fn pack(w: &QTensor) -> Result<Option<Self>> {
        let (n, k) = w.shape().dims2()?;
        if !w.device().is_cpu() {
            return Ok(None);
        }
        Self::pack_raw(&w.data()?, w.dtype(), n, k)
    }

    /// `pack` straight from GGUF bytes (`n` rows of `k` inputs of `dtype`, e.g. a slice of the
    /// mapped file): no candle copy on the way.
    pub fn pack_raw(raw: &[u8], dtype: GgmlDType, n: usize, k: usize) -> Result<Option<Self>> {
        Self::pack_raw_parts(&[(raw, n)], dtype, k)
    }

    /// Weights that read the same input (Q, K and V; gate and up; `parts`: their GGUF rows and
    /// output widths) as one, packed straight into one buffer: their panels end to end, so a
    /// step quantizes the input once and makes one pass over the pool, each output computed
    /// exactly as by its own weight. `None` when they would not pack, or a part other than the
    /// last is not whole panels.
    pub fn pack_raw_parts(parts: &[(&[u8], usize)], dtype: GgmlDType, k: usize) -> Result<Option<Self>> {
        let Some((_, head)) = parts.split_last() else { return Ok(None) };
        if !k.is_multiple_of(dtype.block_size()) || head.iter().any(|(_, n)| !n.is_multiple_of(PANEL)) {
            return Ok(None);
        }
        let Some(&(_, ty)) = TYPES.iter().find(|(d, t)| *d == dtype && (t.packs_on)(isa())) else {
            return Ok(None);
        };
        if parts.iter().any(|&(raw, n)| raw.len() != n * k / dtype.block_size() * dtype.type_size()) {
            return Err(WickError::Internal("weight size does not match its shape".into()));
        }
        let panel_bytes = k / ty.qk * ty.block_bytes;
        let mut data =
            StreamedBytes::zeroed(parts.iter().map(|p| p.1.div_ceil(PANEL)).sum::<usize>() * panel_bytes);
        let mut at = 0;
        for &(raw, n) in parts {
            let len = n.div_ceil(PANEL) * panel_bytes;
            (ty.pack)(raw, n, k, &mut data[at..at + len]);
            at += len;
        }
        let widths: Vec<usize> = parts.iter().map(|p| p.1).collect();
        let data = Panels::Packed(Arc::new(data));
        Ok(Some(Self { ty, n: widths.iter().sum(), k, data, panel_bytes, parts: widths }))
    }

    /// The GGUF blocks of rows `ids` (each `< n`) unpacked from the panels, as a block type
    /// candle reads (Q5_0 comes back as the Q8_0 it was packed as: the same values), so a tied
    /// embedding looks its rows up here and the model keeps one copy of the table.
    pub fn rows_raw(&self, ids: &[u32]) -> Result<(Vec<u8>, GgmlDType)> {
        let (dtype, qk) = (self.ty.dtype, self.ty.qk);
        if self.parts.len() != 1 {
            return Err(WickError::Internal("rows of a concatenated packed weight".into()));
        }
        let (nb, size) = (self.k / qk, dtype.type_size());
        let mut out = vec![0u8; ids.len() * nb * size];
        for (row, &id) in out.chunks_exact_mut(nb * size).zip(ids) {
            let id = id as usize;
            if id >= self.n {
                return Err(WickError::Internal(format!(
                    "row {id} of a [{}, {}] packed weight",
                    self.n, self.k
                )));
            }
            let (panel, c) = (&self.data[id / PANEL * self.panel_bytes..][..self.panel_bytes], id % PANEL);
            for (b, blk) in row.chunks_exact_mut(size).enumerate() {
                (self.ty.unpack)(panel, nb, b, c, blk);
            }
        }
        Ok((out, dtype))
    }

    pub fn dims(&self) -> (usize, usize) {
        (self.n, self.k)
    }

    /// Output widths of the weights this one concatenates (`[n]` for one weight).
    pub fn parts(&self) -> &[usize] {
        &self.parts
    }

    /// `xs`: `rows.len()` rows of `k` f32 → as many rows of `n` f32; `rows[i]` picks the
    /// kernel row i follows where llama.cpp's differ by row count (see `RowPos`).
    pub fn matmul(&self, xs: &[f32], rows: &[RowPos]) -> Result<Vec<f32>> {
        let mut parts = self.matmul_on(isa(), xs, rows)?;
        if parts.len() == 1 {
            return Ok(parts.pop().unwrap_or_default());
        }
        // A concatenated weight read as one: its parts side by side in each row.
        let m = rows.len();
        let mut y = Vec::with_capacity(m * self.n);
        for r in 0..m {
            for (part, &n) in parts.iter().zip(&self.parts) {
                y.extend_from_slice(&part[r * n..(r + 1) * n]);
            }
        }
        Ok(y)
    }

    /// `matmul` giving each concatenated weight's outputs apart (`[rows, part width]` each).
    pub fn matmul_parts(&self, xs: &[f32], rows: &[RowPos]) -> Result<Vec<Vec<f32>>> {
        self.matmul_on(isa(), xs, rows)
    }

    fn matmul_on(&self, isa: Isa, xs: &[f32], rows: &[RowPos]) -> Result<Vec<Vec<f32>>> {
        Ok(Self::matmul_many_on(isa, &[(self, xs, rows)])?.pop().unwrap_or_default())
    }

    /// Several matmuls at once (`(weight, xs, rows)` each, as for `matmul_parts`), all their
    /// panels in one pass over the pool: a mixture of experts runs the experts a step selects
    /// with one fork-join instead of one per expert and weight. Each output has the bits its
    /// own `matmul_parts` gives (the same tiles on the same quantized rows).
    pub fn matmul_many(calls: &[(&PackedWeight, &[f32], &[RowPos])]) -> Result<Vec<Vec<Vec<f32>>>> {
        Self::matmul_many_on(isa(), calls)
    }

    fn matmul_many_on(isa: Isa, calls: &[(&PackedWeight, &[f32], &[RowPos])]) -> Result<Vec<Vec<Vec<f32>>>> {
        let mut outs = Vec::with_capacity(calls.len());
        let mut jobs = Vec::with_capacity(calls.len());
        for &(w, xs, rows) in calls {
            let m = rows.len();
            if xs.len() != m * w.k {
                return Err(WickError::Internal(format!(
                    "packed matmul: {} inputs for [{m}, {}]",
                    xs.len(),
                    w.k
                )));
            }
            // Every output is written by exactly one tile (through raw pointers) before `set_len`.
            let mut ys: Vec<Vec<f32>> = w.parts.iter().map(|&n| Vec::with_capacity(m * n)).collect();
            let yp: Vec<SyncPtr<f32>> = ys.iter_mut().map(|y| SyncPtr(y.as_mut_ptr())).collect();
            jobs.push(Job { w, m, ys: yp, tile: w.tile_fn(isa, xs, rows)? });
            outs.push(ys);
        }
        run_jobs(&jobs);
        for (ys, job) in outs.iter_mut().zip(&jobs) {
            for (y, &n) in ys.iter_mut().zip(&job.w.parts) {
                // SAFETY: `run_jobs` wrote all m·n outputs of every part.
                unsafe { y.set_len(job.m * n) };
            }
        }
        Ok(outs)
    }

    /// The rows of `xs` quantized as the weight's kernel reads them, and its tile kernel over them.
    fn tile_fn(&self, isa: Isa, xs: &[f32], rows: &[RowPos]) -> Result<Box<TileFn>> {
        (self.ty.tiles)(isa, xs, self.k, rows)
    }

    /// Walks panels `panels` of this weight over blocks of rows, calling `tile(panel, first
    /// row, rows ≤ MAX_ROWS, out, ldo)` for every tile. `ys[j]`: part j's `[m, parts[j]]` outputs;
    /// `at[p]`: panel p's part and its first column there.
    fn run_panels(
        &self,
        m: usize,
        ys: &[SyncPtr<f32>],
        at: &[(usize, usize)],
        panels: std::ops::Range<usize>,
        tile: &TileFn,
    ) {
        for rb in (0..m).step_by(ROW_BLOCK) {
            let re = (rb + ROW_BLOCK).min(m);
            for p in panels.clone() {
                let panel = &self.data[p * self.panel_bytes..(p + 1) * self.panel_bytes];
                let (j, c0) = at[p];
                let n = self.parts[j];
                let mut r = rb;
                while r < re {
                    let rows = (re - r).min(MAX_ROWS);
                    let cols = (n - c0).min(PANEL);
                    // SAFETY: this task owns columns c0..c0+cols of every row of part j.
                    let out = unsafe { ys[j].get().add(r * n + c0) };
                    if cols == PANEL {
                        tile(panel, r, rows, out, n);
                    } else {
                        let mut part = [0f32; MAX_ROWS * PANEL];
                        tile(panel, r, rows, part.as_mut_ptr(), PANEL);
                        for i in 0..rows {
                            // SAFETY: as above, only the `cols` real columns are written.
                            unsafe {
                                std::ptr::copy_nonoverlapping(
                                    part.as_ptr().add(i * PANEL),
                                    out.add(i * n),
                                    cols,
                                )
                            };
                        }
                    }
                    r += rows;
                }
            }
        }
    }

    /// Each panel's part and its first column there.
    fn panel_parts(&self) -> Vec<(usize, usize)> {
        let mut at = Vec::with_capacity(self.n.div_ceil(PANEL));
        for (j, &n) in self.parts.iter().enumerate() {
            at.extend((0..n).step_by(PANEL).map(|c| (j, c)));
        }
        at
    }
}

/// One matmul of a `run_jobs` pass.
struct Job<'a> {
    w: &'a PackedWeight,
    m: usize,
    ys: Vec<SyncPtr<f32>>,
    tile: Box<TileFn>,
}

/// Spreads the panels of every job over the pool in one pass (jobs' panels end to end, cut
/// into equal shares); each task walks its panels of each job over that job's row blocks.
fn run_jobs(jobs: &[Job<'_>]) {
    let ats: Vec<Vec<(usize, usize)>> = jobs.iter().map(|j| j.w.panel_parts()).collect();
    // Where each job's panels start in the joint order.
    let mut starts = Vec::with_capacity(jobs.len() + 1);
    starts.push(0);
    for a in &ats {
        starts.push(starts.last().copied().unwrap_or(0) + a.len());
    }
    let total = starts.last().copied().unwrap_or(0);
    let bounds = task_bounds(total, pool::global().threads(), jobs.iter().all(|j| j.m == 1));
    pool::run(bounds.len() - 1, &|t| {
        let (lo, hi) = (bounds[t], bounds[t + 1]);
        for (i, job) in jobs.iter().enumerate() {
            let (a, b) = (lo.max(starts[i]), hi.min(starts[i + 1]));
            if a < b {
                job.w.run_panels(job.m, &job.ys, &ats[i], a - starts[i]..b - starts[i], &*job.tile);
            }
        }
    });
}

/// Where a pass's tasks start and end over `total` panels.
/// - One-row (decode) passes stream: long contiguous runs the prefetcher follows, shrinking as
///   the pass goes (a quarter of what is left per thread pair, down to a sixteenth of the pass
///   per thread), so the thread that finishes first takes small pieces instead of waiting out
///   a long last task. Eight equal tasks per thread were slower than two at 2 threads; two
///   equal ones left a helper idle for a large part of its time (MoE decode profile; figures
///   in benches/RESULTS.md).
/// - Multi-row tiles are compute-bound: eight equal tasks per thread, so the last one leaves
///   the other cores idle for at most an eighth of a share.
fn task_bounds(total: usize, threads: usize, one_row: bool) -> Vec<usize> {
    if threads == 1 && total > 0 {
        return vec![0, total];
    }
    let mut bounds = vec![0];
    let (mut at, min) = (0, total.div_ceil(8 * threads).max(1));
    while at < total {
        let size = if one_row { (total - at).div_ceil(2 * threads).max(min) } else { min };
        at = (at + size).min(total);
        bounds.push(at);
    }
    bounds
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::cpu::feats::detected;
    use crate::kernels::cpu::matmul;
    use candle_core::{Device, Tensor};

    #[test]
    fn task_bounds_cover_every_panel_once() {
        for total in [0usize, 1, 3, 16, 100, 4099] {
            for threads in [1usize, 2, 16] {
                for one_row in [true, false] {
                    let b = task_bounds(total, threads, one_row);
                    assert_eq!((b[0], *b.last().unwrap()), (0, total), "{total}/{threads}/{one_row}");
                    assert!(b.windows(2).all(|w| w[0] < w[1]), "empty task: {b:?}");
                    let sizes: Vec<usize> = b.windows(2).map(|w| w[1] - w[0]).collect();
                    if one_row && threads > 1 {
                        // Shrinking, but never below a sixteenth of the pass per thread pair
                        // (bar the remainder at the end).
                        assert!(sizes.windows(2).all(|w| w[0] >= w[1]), "{sizes:?}");
                        let min = total.div_ceil(8 * threads).max(1);
                        assert!(
                            sizes[..sizes.len().saturating_sub(1)].iter().all(|&s| s >= min),
                            "{sizes:?}"
                        );
                    }
                }
            }
        }
        assert_eq!(task_bounds(100, 1, true), vec![0, 100]);
    }

    fn random(seed: u32, len: usize) -> Vec<f32> {
        let mut s = seed;
        (0..len)
            .map(|_| {
                s = s.wrapping_mul(1664525).wrapping_add(1013904223);
                (s >> 8) as f32 / (1 << 24) as f32 - 0.5
            })
            .collect()
    }

    /// Every instruction set here gives the row-by-row kernel's bits, for 1..17 rows (whole
    /// tiles plus remainders) and several panels; those bits are within the q8 rounding of the
    /// dequantized f32 product.
    fn matches_row_kernel(dtype: GgmlDType, n: usize, k: usize) {
        let dev = Device::Cpu;
        let w = Tensor::from_vec(random(3, n * k), (n, k), &dev).unwrap();
        let q = QTensor::quantize(&w, dtype).unwrap();
        let packed = PackedWeight::pack(&q).unwrap().expect("packable");
        for m in [1usize, 2, 3, 4, 5, 8, 9, 13, 17] {
            let xs = random(m as u32 + 10, m * k);
            let x = Tensor::from_vec(xs.clone(), (m, k), &dev).unwrap();
            let rows: Vec<RowPos> = (0..m).map(|i| RowPos { seq_len: m as u32, idx: i as u32 }).collect();
            let want: Vec<f32> =
                matmul::matmul(&x, &q, &rows).unwrap().flatten_all().unwrap().to_vec1().unwrap();
            // And close to the f64 product with the dequantized weights: the only error left
            // is the activations' q8 rounding (≤ 1 % of Σ|w·x| per type).
            let deq: Vec<f32> = q.dequantize(&dev).unwrap().flatten_all().unwrap().to_vec1().unwrap();
            for r in 0..m {
                for j in 0..n {
                    let (wr, xr) = (&deq[j * k..(j + 1) * k], &xs[r * k..(r + 1) * k]);
                    let exact: f64 = wr.iter().zip(xr).map(|(&a, &b)| a as f64 * b as f64).sum();
                    let norm: f64 = wr.iter().zip(xr).map(|(&a, &b)| (a as f64 * b as f64).abs()).sum();
                    let got = want[r * n + j] as f64;
                    assert!(
                        (got - exact).abs() <= 1e-2 * norm,
                        "{dtype:?} ({r}, {j}): {got} vs {exact} (Σ|·| {norm})"
                    );
                }
            }
            for &isa in Isa::ALL {
                if isa > detected() || !(packed.ty.packs_on)(isa) {
                    continue;
                }
                let got = packed.matmul_on(isa, &xs, &rows).unwrap().concat();
                for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                    assert_eq!(g.to_bits(), w.to_bits(), "{dtype:?} {isa:?} m={m} output {i}: {g} vs {w}");
                }
            }
        }
    }

    /// Concatenated weights (Q, K, V of different widths, a ragged last one) give each part's
    /// own bits, apart and side by side; mismatched types or widths are given back.
    #[test]
    fn concatenated_weights_give_each_part_its_own_outputs() {
        let dev = Device::Cpu;
        let k = 256;
        for dtype in [GgmlDType::Q4_1, GgmlDType::Q4K, GgmlDType::Q8_0] {
            let widths = [64usize, 32, 20];
            let qs: Vec<QTensor> = widths
                .iter()
                .enumerate()
                .map(|(i, &n)| {
                    let w = Tensor::from_vec(random(i as u32 + 1, n * k), (n, k), &dev).unwrap();
                    QTensor::quantize(&w, dtype).unwrap()
                })
                .collect();
            let each: Vec<PackedWeight> =
                qs.iter().map(|q| PackedWeight::pack(q).unwrap().unwrap()).collect();
            let raws: Vec<_> = qs.iter().map(|q| q.data().unwrap().into_owned()).collect();
            let parts: Vec<(&[u8], usize)> = raws.iter().map(|r| &r[..]).zip(widths).collect();
            let fused = PackedWeight::pack_raw_parts(&parts, dtype, k).unwrap().unwrap();
            assert_eq!(fused.dims(), (116, k));
            // The parts' own panels end to end.
            let ends: Vec<u8> = each.iter().flat_map(|w| w.data.iter().copied()).collect();
            assert_eq!((&fused.data[..], fused.parts()), (&ends[..], &widths[..]), "{dtype:?}");
            for m in [1usize, 3, 9] {
                let xs = random(m as u32 + 20, m * k);
                let rows: Vec<RowPos> = (0..m).map(|i| RowPos { seq_len: m as u32, idx: i as u32 }).collect();
                let apart = fused.matmul_parts(&xs, &rows).unwrap();
                let whole = fused.matmul(&xs, &rows).unwrap();
                for (j, w) in each.iter().enumerate() {
                    let want = w.matmul(&xs, &rows).unwrap();
                    assert!(
                        apart[j].iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()),
                        "{dtype:?} part {j}"
                    );
                    let off: usize = widths[..j].iter().sum();
                    for r in 0..m {
                        let got = &whole[r * 116 + off..r * 116 + off + widths[j]];
                        assert!(got
                            .iter()
                            .zip(&want[r * widths[j]..])
                            .all(|(a, b)| a.to_bits() == b.to_bits()));
                    }
                }
            }
        }
        // A ragged part before the last: not packed as one (the parts are one type by signature;
        // `models::packs::packed_parts` loads weights of several types apart).
        let q = |n: usize| {
            let w = Tensor::from_vec(random(5, n * k), (n, k), &dev).unwrap();
            QTensor::quantize(&w, GgmlDType::Q8_0).unwrap().data().unwrap().into_owned()
        };
        let (a, b) = (q(20), q(16));
        assert!(PackedWeight::pack_raw_parts(&[(&a, 20), (&b, 16)], GgmlDType::Q8_0, k).unwrap().is_none());
    }

    /// Several weights (types, widths and row counts mixed, one concatenated) in one pass give
    /// each the bits of its own matmul, on every instruction set.
    #[test]
    fn many_matmuls_in_one_pass_give_each_its_own_bits() {
        let dev = Device::Cpu;
        let k = 256;
        let q = |seed: u32, n: usize, dt| {
            let w = Tensor::from_vec(random(seed, n * k), (n, k), &dev).unwrap();
            PackedWeight::pack(&QTensor::quantize(&w, dt).unwrap()).unwrap().unwrap()
        };
        let raw = |seed: u32, n: usize| {
            let w = Tensor::from_vec(random(seed, n * k), (n, k), &dev).unwrap();
            QTensor::quantize(&w, GgmlDType::Q4_0).unwrap().data().unwrap().into_owned()
        };
        let (a, b) = (raw(1, 32), raw(2, 48));
        let fused = PackedWeight::pack_raw_parts(&[(&a, 32), (&b, 48)], GgmlDType::Q4_0, k).unwrap().unwrap();
        let ws = [fused, q(3, 20, GgmlDType::Q4_0), q(4, 64, GgmlDType::Q8_0), q(5, 48, GgmlDType::Q4K)];
        let ms = [1usize, 3, 9, 2];
        let xs: Vec<Vec<f32>> = ms.iter().map(|&m| random(m as u32 + 40, m * k)).collect();
        let rows: Vec<Vec<RowPos>> = ms.iter().map(|&m| vec![RowPos::SINGLE; m]).collect();
        for &isa in Isa::ALL {
            if isa > detected() {
                continue;
            }
            let calls: Vec<(&PackedWeight, &[f32], &[RowPos])> =
                ws.iter().zip(&xs).zip(&rows).map(|((w, x), r)| (w, x.as_slice(), r.as_slice())).collect();
            let many = PackedWeight::matmul_many_on(isa, &calls).unwrap();
            for (j, (w, got)) in ws.iter().zip(&many).enumerate() {
                let want = w.matmul_on(isa, &xs[j], &rows[j]).unwrap();
                assert_eq!(got.len(), want.len());
                for (g, w) in got.iter().flatten().zip(want.iter().flatten()) {
                    assert_eq!(g.to_bits(), w.to_bits(), "{isa:?} weight {j}");
                }
            }
        }
    }

    #[test]
    fn q4_0_panels_match_the_row_kernel() {
        matches_row_kernel(GgmlDType::Q4_0, 48, 256);
    }

    #[test]
    fn q6k_panels_match_the_row_kernel() {
        if isa() != Isa::Avx512Vnni {
            return; // not packed without AVX-512
        }
        matches_row_kernel(GgmlDType::Q6K, 48, 512);
        matches_row_kernel(GgmlDType::Q6K, 20, 256);
    }

    #[test]
    fn q5_0_runs_on_q8_0_panels_with_the_row_kernel_bits() {
        if cfg!(target_arch = "aarch64") {
            // Not packed there (`q8_0::FROM_Q5_0`).
            let w = Tensor::from_vec(random(3, 48 * 256), (48, 256), &Device::Cpu).unwrap();
            let q = QTensor::quantize(&w, GgmlDType::Q5_0).unwrap();
            assert!(PackedWeight::pack(&q).unwrap().is_none());
            return;
        }
        matches_row_kernel(GgmlDType::Q5_0, 48, 256);
        matches_row_kernel(GgmlDType::Q5_0, 20, 96);
    }

    #[test]
    fn q4k_panels_match_the_row_kernel() {
        matches_row_kernel(GgmlDType::Q4K, 48, 512);
        matches_row_kernel(GgmlDType::Q4K, 24, 256);
    }

    /// Also ragged last panels (8 and 4 real columns) and a long input dimension.
    #[test]
    fn q8_0_panels_match_the_row_kernel() {
        matches_row_kernel(GgmlDType::Q8_0, 48, 256);
        matches_row_kernel(GgmlDType::Q8_0, 40, 64);
        matches_row_kernel(GgmlDType::Q8_0, 20, 96);
        matches_row_kernel(GgmlDType::Q8_0, 16, 1024);
    }

    #[test]
    fn q4_1_panels_match_the_row_kernel() {
        matches_row_kernel(GgmlDType::Q4_1, 48, 256);
        matches_row_kernel(GgmlDType::Q4_1, 40, 64);
        matches_row_kernel(GgmlDType::Q4_1, 20, 96);
        matches_row_kernel(GgmlDType::Q4_1, 16, 1024);
    }

    /// A last panel of 8 real columns (the row kernel needs whole groups of 8 for Q4_0).
    #[test]
    fn ragged_last_panel() {
        matches_row_kernel(GgmlDType::Q4_0, 40, 64);
    }

    /// Every packed type gives its GGUF rows back byte for byte (Q5_0 as the Q8_0 it became,
    /// which dequantizes to the same values), for rows in whole and padded panels.
    #[test]
    fn rows_come_back_out_of_the_panels() {
        let dev = Device::Cpu;
        let (n, k) = (40, 512);
        let w = Tensor::from_vec(random(9, n * k), (n, k), &dev).unwrap();
        for dt in [
            GgmlDType::Q4_0,
            GgmlDType::Q4_1,
            GgmlDType::Q8_0,
            GgmlDType::Q5_0,
            GgmlDType::Q4K,
            GgmlDType::Q6K,
        ] {
            let q = QTensor::quantize(&w, dt).unwrap();
            let Some(p) = PackedWeight::pack(&q).unwrap() else { continue };
            let ids: Vec<u32> = vec![0, 1, 15, 16, 17, 31, 39, 7];
            let (raw, got_dt) = p.rows_raw(&ids).unwrap();
            let back = QTensor::new(
                candle_core::quantized::QStorage::from_data(
                    std::borrow::Cow::Owned(raw.clone()),
                    &dev,
                    got_dt,
                )
                .unwrap(),
                (ids.len(), k),
            )
            .unwrap();
            let want = q.dequantize(&dev).unwrap().to_vec2::<f32>().unwrap();
            let got = back.dequantize(&dev).unwrap().to_vec2::<f32>().unwrap();
            for (r, &id) in ids.iter().enumerate() {
                let same = want[id as usize].iter().zip(&got[r]).all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(same, "{dt:?} row {id}");
            }
            if got_dt == dt {
                let bytes = q.data().unwrap();
                let row = k / dt.block_size() * dt.type_size();
                for (r, &id) in ids.iter().enumerate() {
                    assert_eq!(
                        &raw[r * row..(r + 1) * row],
                        &bytes[id as usize * row..][..row],
                        "{dt:?} row {id} bytes"
                    );
                }
            }
            assert!(p.rows_raw(&[n as u32]).is_err());
        }
    }
}
