//! Tiles of new tokens per task (ggml's tiled path, AVX-512): every query of the tile shares
//! each K and V load, in tinyBLAS's order per output. Over a quantized cache the tile's
//! queries share each quantized key row (`quant_scores` with all of them) and, for quantized
//! values, each value row six queries at a time; every output keeps the one-token task's sums.

use std::ops::Range;

use super::{avx512, prefetch, put_scores, round_to_f16, softmax_f16, Plan, SeqAttn};
use crate::kernels::cpu::feats::with_avx2_codegen;
use crate::runtime::pool::SyncPtr;

/// A tile's task: new tokens `i0..` of sequence `si` against KV head `g`, `nq` queries (query
/// `qi` is head `g·group + qi % group` of token `i0 + qi / group`), positions up to `t_hi`
/// (rows of `row`, whole chunks of 16).
struct Tile {
    si: usize,
    g: usize,
    i0: usize,
    nq: usize,
    t_hi: usize,
    row: usize,
    pos0: usize,
    group: usize,
    window: Option<usize>,
    /// Every query sees all `t_hi` positions (a bidirectional sequence).
    all: bool,
}

impl Tile {
    /// Positions query `qi` attends.
    #[inline(always)]
    fn t_len(&self, qi: usize) -> usize {
        if self.all {
            self.t_hi
        } else {
            self.pos0 + self.i0 + qi / self.group + 1
        }
    }

    /// Query `qi`'s window start.
    #[inline(always)]
    fn t0(&self, qi: usize) -> usize {
        self.window.map_or(0, |w| self.t_len(qi).saturating_sub(w))
    }
}

impl Plan<'_, '_> {
    /// New tokens `tokens` of sequence `si` against KV head `g`, AVX-512 (`wide_tiles`; as
    /// ggml's tiled flash attention): the queries of all of them (the group's heads of each
    /// token) share every K and V load, six at a time through the tile kernels; each output
    /// sees the fmas of `one_token`'s tinyBLAS order.
    pub(super) fn tile_of_tokens(
        &self,
        si: usize,
        tokens: Range<usize>,
        g: usize,
        scratch: &mut [f32],
        op: SyncPtr<f32>,
    ) {
        with_avx2_codegen(
            #[inline(always)]
            || {
                let SeqAttn { q, pos0, causal, .. } = self.seqs[si];
                let (hd, group, n_head) = (self.hd, self.group, self.n_head);
                let (i0, nq) = (tokens.start, tokens.len() * group);
                let t_hi = self.seqs[si].seen(tokens.end - 1);
                let row = t_hi.div_ceil(16) * 16;
                let tile = Tile { si, g, i0, nq, t_hi, row, pos0, group, window: self.window, all: !causal };
                let (q16, rest) = scratch[..nq * (hd + 2 * row)].split_at_mut(nq * hd);
                let (w, p16) = rest.split_at_mut(nq * row);
                let types = self.seqs[si].kv.types();
                for (qi, qd) in q16.chunks_exact_mut(hd).enumerate() {
                    let (i, h) = (i0 + qi / group, g * group + qi % group);
                    let qh = &q[(i * n_head + h) * hd..][..hd];
                    // Quantized keys take the query as it is (quantized to q8_0 in their dot).
                    match types.k.is_quantized() {
                        true => qd.copy_from_slice(qh),
                        false => round_to_f16(qh, qd),
                    }
                }
                match types.k.is_quantized() {
                    true => self.tile_quant_scores(&tile, q16, w),
                    false => self.tile_scores(&tile, q16, w),
                }
                // Quantized values meet the weights as they are (f32), as in `one_token`.
                let round = !types.v.is_quantized();
                for (qi, (wq, pq)) in w.chunks_exact(row).zip(p16.chunks_exact_mut(row)).enumerate() {
                    let own = tile.t_len(qi).div_ceil(16) * 16;
                    softmax_f16(&wq[..own], &mut pq[..own], self.var, round);
                    // Past its own positions a row weighs the tile's later tokens by exact zeros (their
                    // values are stored and finite), which leaves every sum as its own positions make it.
                    pq[own..].fill(0.0);
                }
                match types.v.is_quantized() {
                    true => self.tile_quant_values(&tile, p16, op),
                    false => self.tile_values(&tile, p16, op),
                }
            },
        )
    }

    /// The tile's scaled scores into `w` (`nq` rows of `row`), each query's outside its own
    /// positions and window left at −∞.
    #[inline(always)]
    fn tile_scores(&self, tile: &Tile, q16: &[f32], w: &mut [f32]) {
        let (kv, hd, g, nq, row, t_hi) =
            (self.seqs[tile.si].kv, self.hd, tile.g, tile.nq, tile.row, tile.t_hi);
        let qs = |qi: usize| &q16[qi * hd..(qi + 1) * hd];
        w.fill(f32::NEG_INFINITY);
        let mut block = [[0f32; 16]; 6];
        // From the first query's window start (the earliest); each query keeps its own range.
        let mut t = tile.t0(0) & !15;
        while t < t_hi {
            if t + 16 < t_hi {
                prefetch(kv.keys(g, t + 16, 16));
            }
            for c0 in (0..nq).step_by(6) {
                let n = (nq - c0).min(6);
                // SAFETY: AVX-512 checked (`wide_tiles`); hd a multiple of 16; t of 16 and the
                // chunk's keys are stored (blocks are whole chunks).
                unsafe { by_count!(avx512::kq16_tile, n, |k: usize| qs(c0 + k), block, kv, g, t) };
                for (k, s) in block.iter().take(n).enumerate() {
                    let qi = c0 + k;
                    put_scores(&mut w[qi * row + t..], s, t, (tile.t0(qi), tile.t_len(qi)), self.scale);
                }
            }
            t += 16;
        }
    }

    /// `tile_scores` over quantized keys: every query's q8_0 dots in one pass over the key
    /// rows (each score its own dot, so the one-token task's bits), then each query's outside
    /// its own positions and window set back to −∞.
    #[inline(always)]
    fn tile_quant_scores(&self, tile: &Tile, q: &[f32], w: &mut [f32]) {
        let row = tile.row;
        w.fill(f32::NEG_INFINITY);
        self.quant_scores(self.seqs[tile.si].kv, tile.g, q, (tile.t0(0), tile.t_hi), w, row);
        for (qi, wq) in w.chunks_exact_mut(row).enumerate() {
            wq[..tile.t0(qi)].fill(f32::NEG_INFINITY);
            wq[tile.t_len(qi)..].fill(f32::NEG_INFINITY);
        }
    }

    /// `tile_values` over quantized values, the tile's queries six at a time over each value
    /// row (`pv64_quant`: one fma per position in order, the one-token task's sums; a row's
    /// weights past its own positions are exact zeros, which it skips). Head sizes off 64
    /// take `quant_values` token by token.
    #[inline(always)]
    fn tile_quant_values(&self, tile: &Tile, p: &[f32], op: SyncPtr<f32>) {
        let (kv, n_head, hd, group) = (self.seqs[tile.si].kv, self.n_head, self.hd, self.group);
        // Output row of the tile's token k (`n_head · hd` values).
        let out_row = |k: usize| {
            // SAFETY: row `row0[si] + i0 + k` is within the output's `n_rows · n_head · hd`
            // values; this task alone writes its KV head's slices of it.
            unsafe {
                std::slice::from_raw_parts_mut(
                    op.get().add((self.row0[tile.si] + tile.i0 + k) * n_head * hd),
                    n_head * hd,
                )
            }
        };
        if !hd.is_multiple_of(64) {
            for (k, ps) in p.chunks_exact(group * tile.row).enumerate() {
                self.quant_values(kv, tile.g, ps, (tile.t_hi, tile.row), out_row(k));
            }
            return;
        }
        let ps = |qi: usize| &p[qi * tile.row..qi * tile.row + tile.t_hi];
        self.pv64_rows(kv, tile.g, (tile.nq, tile.t_hi), ps, |qi, d0, s| {
            let h = tile.g * group + qi % group;
            out_row(qi / group)[h * hd + d0..][..64].copy_from_slice(s);
        });
    }

    /// The tile's outputs `Σ p·v` from the weights `p16` (`nq` rows of `row`), written into
    /// the pass's output at `op`.
    #[inline(always)]
    fn tile_values(&self, tile: &Tile, p16: &[f32], op: SyncPtr<f32>) {
        let (kv, hd, g, group, nq) = (self.seqs[tile.si].kv, self.hd, tile.g, self.group, tile.nq);
        let ps = |qi: usize| &p16[qi * tile.row..qi * tile.row + tile.t_hi];
        let mut block = [[0f32; 16]; 6];
        for d0 in (0..hd).step_by(16) {
            for c0 in (0..nq).step_by(6) {
                let n = (nq - c0).min(6);
                // SAFETY: AVX-512 checked (`wide_tiles`); the view holds positions `0..t_hi`,
                // dims to `hd` (a multiple of 16).
                unsafe { by_count!(avx512::pv16_tile, n, |k: usize| ps(c0 + k), block, kv, g, d0) };
                for (k, o) in block.iter().take(n).enumerate() {
                    let qi = c0 + k;
                    let (i, h) = (tile.i0 + qi / group, g * group + qi % group);
                    // SAFETY: row `row0[si] + i` of the output (`n_rows · n_head · hd` values)
                    // holds head h's dims d0..d0 + 16 (d0 + 16 ≤ hd); this task alone writes
                    // its queries' slices of these rows.
                    let dst = unsafe {
                        std::slice::from_raw_parts_mut(
                            op.get().add(((self.row0[tile.si] + i) * self.n_head + h) * hd + d0),
                            16,
                        )
                    };
                    dst.copy_from_slice(o);
                }
            }
        }
    }
}
