//! Matmuls by GGUF F16 weights (and the host-kept F16 LoRA weights, `host_f16`) as ggml's
//! CPU backend computes them: tinyBLAS for prompt rows, `ggml_vec_dot_f16` for single-token
//! rows. The orders are `float_dots`'; the x86 kernels (`x86::f16`) read the weight straight
//! from its f16 bytes with the same operations.

#[cfg(target_arch = "x86_64")]
use super::blocks::reduce16;
use super::feats::with_avx2_codegen;
#[cfg(target_arch = "x86_64")]
use super::feats::{has_avx2, has_avx512};
use super::float_dots::{dot_single_sl, dot_tiled, dot_tiled_sl4};
use super::split::{for_cols, BlockRows, RowPos, ROW_BLOCK};

/// F16 weights: tinyBLAS for several rows when k splits into whole chunks and the output count
/// into tiles of 4 (it takes over from ggml's own dot product there), `ggml_vec_dot_f16`
/// otherwise (orders: `float_dots`). x86: k in 16-lane chunks, the activations rounded to f16
/// for both (ggml converts them to the weights' type first). aarch64 without FP16 arithmetic:
/// k in 4-lane chunks, and tinyBLAS's f16 × f32 kernel takes the activations as they are
/// (ggml tries it before converting); `ggml_vec_dot_f16` sees them rounded.
pub(super) fn f16_rows<P: Fn(usize, usize, f32) + Sync>(
    n: usize,
    k: usize,
    xs: &[f32],
    rows: &[RowPos],
    data: &[u8],
    put: &P,
) {
    f16_core(n, k, xs, rows, &GgufF16 { data, k }, put);
}

/// `[m, k]` rows of `x`, all of one prompt (tinyBLAS's order for every row), times an F16
/// weight's `[n, k]` little-endian bytes → `[m, n]` (the vision tower's `matmul_f16w`).
#[cfg(target_arch = "x86_64")]
pub(super) fn prompt_rows(x: &[f32], m: usize, w: &[u8], n: usize, k: usize) -> Vec<f32> {
    let rows: Vec<RowPos> = (0..m as u32).map(|idx| RowPos { seq_len: m as u32, idx }).collect();
    let mut y = vec![0f32; m * n];
    let yp = crate::runtime::pool::SyncPtr(y.as_mut_ptr());
    // SAFETY: `y` holds m·n values; `f16_core` calls with r < m, j < n, each (r, j) from the one
    // task owning column j, and `y` is not read until it returns.
    let put = move |r: usize, j: usize, v: f32| unsafe { *yp.get().add(r * n + j) = v };
    f16_core(n, k, x, &rows, &GgufF16 { data: w, k }, &put);
    y
}

/// An F16 weight's rows as f32 for `f16_core`.
pub(super) trait F16Rows: Sync {
    /// Row j (k values): converted into `buf` and returned, or returned as it is kept.
    fn row<'a>(&'a self, j: usize, buf: &'a mut [f32]) -> &'a [f32];
    /// Row j as its little-endian f16 bytes, where it is kept so (the fused kernels read it).
    fn raw(&self, _j: usize) -> Option<&[u8]> {
        None
    }
}

/// A GGUF F16 tensor's rows (`k` values each), widened on the way.
struct GgufF16<'a> {
    data: &'a [u8],
    k: usize,
}

impl GgufF16<'_> {
    fn wrow(&self, j: usize) -> &[u8] {
        &self.data[2 * j * self.k..2 * (j + 1) * self.k]
    }
}

impl F16Rows for GgufF16<'_> {
    fn row<'a>(&'a self, j: usize, buf: &'a mut [f32]) -> &'a [f32] {
        super::float_dots::widen_f16_bytes(self.wrow(j), buf);
        buf
    }
    fn raw(&self, j: usize) -> Option<&[u8]> {
        Some(self.wrow(j))
    }
}

/// Dots shorter than one vector step of `ggml_vec_dot_f16` are its f64 tail alone.
pub(super) const SHORT_DOT: usize = if cfg!(target_arch = "aarch64") { 16 } else { 64 };

/// `f16_rows` with column j's weights given by `w.row(j, buf)` (`k` values).
pub(super) fn f16_core<W, P>(n: usize, k: usize, xs: &[f32], rows: &[RowPos], w: &W, put: &P)
where
    W: F16Rows + ?Sized,
    P: Fn(usize, usize, f32) + Sync,
{
    let m = rows.len();
    let x16: Vec<f32> = super::float_dots::round_to_f16(xs);
    let (chunk, tiled_xs) = if cfg!(target_arch = "aarch64") { (4, xs) } else { (16, &x16[..]) };
    let shapes_ok = k.is_multiple_of(chunk) && n.is_multiple_of(4);
    let tiled = |r: usize| shapes_ok && rows[r].seq_len > 1;
    // A dot shorter than one vector step of `ggml_vec_dot_f16` is its f64 tail alone (a
    // LoRA adapter's B, k = its rank): sequential per output, a chain of dependent adds, so
    // eight outputs run side by side instead — each the same sum.
    let short = k < SHORT_DOT;
    let singles: Vec<usize> = (0..m).filter(|&r| !tiled(r)).collect();
    for_cols(n, m, &|j0, j1| {
        let mut wide = vec![0f32; k];
        let mut wt = vec![0f32; if short { k * SHORT } else { 0 }];
        with_avx2_codegen(
            #[inline(always)]
            || {
                if short {
                    for jb in (j0..j1).step_by(SHORT) {
                        let cols = SHORT.min(j1 - jb);
                        wt.fill(0.0);
                        for c in 0..cols {
                            for (i, &v) in w.row(jb + c, &mut wide).iter().enumerate() {
                                wt[i * SHORT + c] = v;
                            }
                        }
                        for r in (0..m).filter(|&r| tiled(r)) {
                            let xr = &tiled_xs[r * k..(r + 1) * k];
                            for c in 0..cols {
                                put(r, jb + c, dot_tiled(k, |i| wt[i * SHORT + c], |i| xr[i]));
                            }
                        }
                        // Four rows at a time: four independent chains of adds per column
                        // (one chain alone waits on each add's latency).
                        for quad in singles.chunks(4) {
                            let mut acc = [[0f64; SHORT]; 4];
                            for i in 0..k {
                                let w = &wt[i * SHORT..(i + 1) * SHORT];
                                for (a, &r) in acc.iter_mut().zip(quad) {
                                    let xi = x16[r * k + i];
                                    for c in 0..SHORT {
                                        a[c] += (w[c] * xi) as f64;
                                    }
                                }
                            }
                            for (a, &r) in acc.iter().zip(quad) {
                                for (c, v) in a.iter().take(cols).enumerate() {
                                    put(r, jb + c, *v as f32);
                                }
                            }
                        }
                    }
                    return;
                }
                // Blocks of rows, so a block's activations stay in cache while every column
                // meets them.
                for rb in (0..m).step_by(ROW_BLOCK) {
                    let block: BlockRows = (rb..(rb + ROW_BLOCK).min(m)).collect();
                    let xs = F16Acts { k, tiled_xs, x16: &x16, tiled: &tiled };
                    f16_block(&xs, w, j0..j1, &block, &mut wide, put);
                }
            },
        )
    });
}

/// A block's activations for `f16_block`: rounded to f16 (`x16`), as tinyBLAS reads them
/// (`tiled_xs`), and which rows take tinyBLAS.
struct F16Acts<'a, T: Fn(usize) -> bool> {
    k: usize,
    tiled_xs: &'a [f32],
    x16: &'a [f32],
    tiled: &'a T,
}

/// Columns `cols` of `w` against the activation rows `block`: tiled rows four at a time
/// (four independent FMA chains; with AVX-512 and the weight's f16 bytes, 4 × 4 outputs per
/// pass of the fused kernel), the others one by one, the weight read from its f16 bytes
/// where it has them. Every output keeps its single kernel's sum. Inlined into `f16_core`'s
/// AVX2 copy (`with_avx2_codegen`): out of it, `mul_add` is a libm call.
#[inline(always)]
fn f16_block<T, W, P>(
    a: &F16Acts<'_, T>,
    w: &W,
    cols: std::ops::Range<usize>,
    block: &[usize],
    wide: &mut [f32],
    put: &P,
) where
    T: Fn(usize) -> bool,
    W: F16Rows + ?Sized,
    P: Fn(usize, usize, f32) + Sync,
{
    let k = a.k;
    let (quads, mut rest): (BlockRows, BlockRows) = block.iter().copied().partition(|&r| (a.tiled)(r));
    let whole = if cfg!(target_arch = "aarch64") { 0 } else { quads.len() / 4 * 4 };
    rest.extend(quads[whole..].iter().copied());
    let quads = &quads[..whole];
    #[cfg(target_arch = "x86_64")]
    let j = tile_columns(a, w, cols.clone(), quads, &rest, wide, put);
    #[cfg(not(target_arch = "x86_64"))]
    let j = cols.start;
    for j in j..cols.end {
        if quads.is_empty() {
            f16_column(a, w, j, &rest, wide, put);
            continue;
        }
        let wv = w.row(j, wide);
        for q in quads.chunks_exact(4) {
            let x = |i: usize| &a.tiled_xs[q[i] * k..(q[i] + 1) * k];
            for (&r, v) in q.iter().zip(dot_tiled_sl4(wv, [x(0), x(1), x(2), x(3)])) {
                put(r, j, v);
            }
        }
        for &r in rest.iter() {
            put(
                r,
                j,
                f16_dot(k, (a.tiled)(r), wv, &a.tiled_xs[r * k..(r + 1) * k], &a.x16[r * k..(r + 1) * k]),
            );
        }
    }
}

/// The leading columns of `cols` in fours through the fused AVX-512 4 × 4 kernel (tiled rows
/// `quads`, whole fours; `rest` one by one), while the CPU has it and the weight its f16
/// bytes. Returns the first column left.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn tile_columns<T, W, P>(
    a: &F16Acts<'_, T>,
    w: &W,
    cols: std::ops::Range<usize>,
    quads: &[usize],
    rest: &[usize],
    wide: &mut [f32],
    put: &P,
) -> usize
where
    T: Fn(usize) -> bool,
    W: F16Rows + ?Sized,
    P: Fn(usize, usize, f32) + Sync,
{
    let k = a.k;
    let raw = |j: usize| w.raw(j).filter(|r| r.len() == 2 * k);
    let mut j = cols.start;
    if quads.is_empty() || !has_avx512() {
        return j;
    }
    while j + 4 <= cols.end {
        let [Some(w0), Some(w1), Some(w2), Some(w3)] = [raw(j), raw(j + 1), raw(j + 2), raw(j + 3)] else {
            break;
        };
        for q in quads.chunks_exact(4) {
            let x = |i: usize| &a.tiled_xs[q[i] * k..(q[i] + 1) * k];
            // SAFETY: AVX-512F checked; four weight rows of 2k bytes, four rows of k values.
            let sums = unsafe {
                let lanes = super::x86::f16::tile4x4_lanes([w0, w1, w2, w3], [x(0), x(1), x(2), x(3)], k);
                super::x86::reduce16_4x4(&lanes)
            };
            for (&r, row) in q.iter().zip(&sums) {
                for (c, &v) in row.iter().enumerate() {
                    put(r, j + c, v);
                }
            }
        }
        for c in j..j + 4 {
            f16_column(a, w, c, rest, wide, put);
        }
        j += 4;
    }
    j
}

/// Column j of `w` against `rows` one at a time: `ggml_vec_dot_f16`'s rows read the f16
/// bytes directly where the weight has them and the CPU runs the fused kernel; the rest
/// (tiled rows, other weights) go through the widened row, converted once.
#[inline(always)]
fn f16_column<T, W, P>(a: &F16Acts<'_, T>, w: &W, j: usize, rows: &[usize], wide: &mut [f32], put: &P)
where
    T: Fn(usize) -> bool,
    W: F16Rows + ?Sized,
    P: Fn(usize, usize, f32) + Sync,
{
    let k = a.k;
    let raw = w.raw(j).filter(|r| r.len() == 2 * k && fused_single());
    let fused = |r: usize| raw.is_some() && !(a.tiled)(r);
    #[cfg(target_arch = "x86_64")]
    if let Some(raw) = raw {
        let x = |r: usize| &a.x16[r * k..(r + 1) * k];
        let finish = |r: usize, lanes: &[f32; 16]| {
            let mut sum = reduce16(lanes) as f64;
            for i in k & !63..k {
                sum += (super::blocks::f16_at(raw, 2 * i) * a.x16[r * k + i]) as f64;
            }
            put(r, j, sum as f32);
        };
        // Four rows at a time with AVX-512 (each weight widened once for the four).
        let (mut quad, mut held, wide4) = ([0usize; 4], 0, has_avx512());
        for &r in rows.iter().filter(|&&r| fused(r)) {
            if !wide4 {
                // SAFETY: AVX2/FMA/F16C checked; 2k bytes against k values.
                finish(r, &unsafe { super::x86::f16::single_lanes(raw, x(r)) });
                continue;
            }
            quad[held] = r;
            held += 1;
            if held == 4 {
                // SAFETY: AVX-512F checked; 2k bytes against four rows of k values.
                let lanes = unsafe { super::x86::f16::single4_lanes(raw, quad.map(x), k) };
                for (&r, l) in quad.iter().zip(&lanes) {
                    finish(r, l);
                }
                held = 0;
            }
        }
        for &r in &quad[..held] {
            // SAFETY: as above.
            finish(r, &unsafe { super::x86::f16::single_lanes(raw, x(r)) });
        }
    }
    if rows.iter().all(|&r| fused(r)) {
        return;
    }
    let wv = w.row(j, wide);
    for &r in rows.iter().filter(|&&r| !fused(r)) {
        let (txr, xr) = (&a.tiled_xs[r * k..(r + 1) * k], &a.x16[r * k..(r + 1) * k]);
        put(r, j, f16_dot(k, (a.tiled)(r), wv, txr, xr));
    }
}

/// Whether `f16_column` reads f16 bytes directly (x86 with AVX2/F16C; elsewhere it widens).
fn fused_single() -> bool {
    #[cfg(target_arch = "x86_64")]
    return has_avx2();
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// Columns a short-dot pass of `f16_core` runs side by side.
const SHORT: usize = 8;

/// One output of `f16_rows`: tinyBLAS's order on `txr` when `tiled`, else `ggml_vec_dot_f16`'s
/// on `xr` (the activations rounded to f16).
#[inline(always)]
fn f16_dot(k: usize, tiled: bool, wide: &[f32], txr: &[f32], xr: &[f32]) -> f32 {
    if tiled {
        dot_tiled(k, |i| wide[i], |i| txr[i])
    } else {
        dot_single_sl(&wide[..k], &xr[..k])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::cpu::dot_checks::lcg;
    use crate::runtime::pool::SyncPtr;

    /// The same rows without their bytes: `f16_core` widens every column (the reference).
    struct Widened<'a>(GgufF16<'a>);

    impl F16Rows for Widened<'_> {
        fn row<'a>(&'a self, j: usize, buf: &'a mut [f32]) -> &'a [f32] {
            self.0.row(j, buf)
        }
    }

    fn run<W: F16Rows>(n: usize, k: usize, xs: &[f32], rows: &[RowPos], w: &W) -> Vec<u32> {
        let mut y = vec![0f32; rows.len() * n];
        let yp = SyncPtr(y.as_mut_ptr());
        // SAFETY: r < rows.len(), j < n; one task per column.
        let put = move |r: usize, j: usize, v: f32| unsafe { *yp.get().add(r * n + j) = v };
        f16_core(n, k, xs, rows, w, &put);
        y.iter().map(|v| v.to_bits()).collect()
    }

    #[test]
    fn the_fused_kernels_give_the_widened_rows_bits() {
        let mut next = lcg(7);
        let mut val = || (next() % 2001) as f32 / 1000.0 - 1.0;
        // Decode rows, a prompt of 9 (two tiles and one left), a prompt of 2 beside decodes, nine
        // decode rows (two fours and one left: verified drafts);
        // k a multiple of 64, of 16 only, and of neither; n with a partial tile of columns.
        let layouts: [&[u32]; 4] = [&[1, 1, 1], &[9], &[1, 2, 1], &[1, 1, 1, 1, 1, 1, 1, 1, 1]];
        for (k, n) in [(64, 8), (576, 12), (592, 13), (600, 8)] {
            for lens in layouts {
                let rows: Vec<RowPos> = lens
                    .iter()
                    .flat_map(|&len| (0..len).map(move |idx| RowPos { seq_len: len, idx }))
                    .collect();
                let xs: Vec<f32> = (0..rows.len() * k).map(|_| val()).collect();
                let data: Vec<u8> =
                    (0..n * k).flat_map(|_| half::f16::from_f32(val()).to_le_bytes()).collect();
                let gguf = GgufF16 { data: &data, k };
                let want = run(n, k, &xs, &rows, &Widened(GgufF16 { data: &data, k }));
                assert_eq!(run(n, k, &xs, &rows, &gguf), want, "k {k}, n {n}, rows {lens:?}");
            }
        }
    }
}
