//! Scores and outputs over a quantized KV cache (`--cache-type-k/-v q8_0|q4_0`), for one new
//! token per task (`single.rs`) or a tile of them (`tiled.rs`, which gives the same bits).
//! - Quantized keys, as llama.cpp without flash attention: the query quantized to q8_0 as
//!   ggml quantizes a matmul's f32 operand, each key row's dot in
//!   `ggml_vec_dot_q{8,4}_0_q8_0`'s order (tinyBLAS rounds the same for several new tokens),
//!   scaled; the softmax as over f16 keys.
//! - Quantized values (llama.cpp reads those only with flash attention, in its online order):
//!   Σ_t p_t·v_t with one fma per position and dimension in position order, f32 weights
//!   against the exact dequantized values — the same for one new token or many, so a
//!   sequence's outputs do not depend on how its tokens were batched.

#[cfg(target_arch = "x86_64")]
use super::avx512;
use super::Plan;
use crate::cache::{KvType, PagedView, BLOCK_SIZE};
use crate::kernels::cpu::q8::{quantize_q8, Act32};
use crate::kernels::cpu::quants::dot_rows;

impl Plan<'_, '_> {
    /// The group's scaled scores `q·k` of KV head `g` over positions `t0..t_len` into `w`
    /// (`group` rows of `padded`; the rest stays as it is, −∞). `q`: the group's query heads,
    /// `group · hd` values.
    #[inline(always)]
    pub(super) fn quant_scores(
        &self,
        kv: &PagedView<'_>,
        g: usize,
        q: &[f32],
        (t0, t_len): (usize, usize),
        w: &mut [f32],
        padded: usize,
    ) {
        let acts: Vec<Vec<Act32>> = q.chunks_exact(self.hd).map(quantize_q8).collect();
        let acts: Vec<&[Act32]> = acts.iter().map(Vec::as_slice).collect();
        let q8 = kv.types().k == KvType::Q8_0;
        // Block by block: a block's key rows lie one after another.
        let mut t = t0;
        while t < t_len {
            let n = (BLOCK_SIZE - t % BLOCK_SIZE).min(t_len - t);
            let next = t + n;
            if next < t_len {
                prefetch_rows(kv, g, next, (BLOCK_SIZE - next % BLOCK_SIZE).min(t_len - next));
            }
            dot_rows(q8, kv.key_rows(g, t, n), &acts, &mut w[t..], padded);
            for h in 0..acts.len() {
                for s in &mut w[h * padded + t..h * padded + next] {
                    *s *= self.scale;
                }
            }
            t = next;
        }
    }

    /// The group's outputs `Σ p·v` of KV head `g` over positions `0..t_len` from the weights
    /// `p` (`group` rows of `padded`), into `orow` (the token's output row).
    #[inline(always)]
    pub(super) fn quant_values(
        &self,
        kv: &PagedView<'_>,
        g: usize,
        p: &[f32],
        (t_len, padded): (usize, usize),
        orow: &mut [f32],
    ) {
        let (hd, group) = (self.hd, self.group);
        let ty = kv.types().v;
        let out = &mut orow[g * group * hd..(g + 1) * group * hd];
        #[cfg(target_arch = "x86_64")]
        if avx512::available() && hd.is_multiple_of(64) {
            let ps = |h: usize| &p[h * padded..h * padded + t_len];
            self.pv64_rows(kv, g, (group, t_len), ps, |h, d0, s| out[h * hd + d0..][..64].copy_from_slice(s));
            return;
        }
        out.fill(0.0);
        let mut v = vec![0f32; hd];
        for t in 0..t_len {
            ty.dequantize_row(kv.value_row(g, t), &mut v);
            for h in 0..group {
                let pt = p[h * padded + t];
                // A masked position (outside a window) weighs exactly 0: adding it changes nothing.
                if pt == 0.0 {
                    continue;
                }
                let o = &mut out[h * hd..(h + 1) * hd];
                for d in 0..hd {
                    o[d] = pt.mul_add(v[d], o[d]);
                }
            }
        }
    }
}

impl Plan<'_, '_> {
    /// `Σ p·v` over KV head `g`'s quantized values for `n` weight rows `ps(r)` (`t_len` weights
    /// each), six rows per pass of `pv64_quant` (one fma per position in order), each row's
    /// 64 dims from `d0` handed to `put(r, d0, sums)`. The caller checked AVX-512 and that the
    /// head size is a multiple of 64.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    pub(super) fn pv64_rows<'p>(
        &self,
        kv: &PagedView<'_>,
        g: usize,
        (n, t_len): (usize, usize),
        ps: impl Fn(usize) -> &'p [f32],
        mut put: impl FnMut(usize, usize, &[f32; 64]),
    ) {
        let ty = kv.types().v;
        let mut sums = [[0f32; 64]; 6];
        for d0 in (0..self.hd).step_by(64) {
            for r0 in (0..n).step_by(6) {
                let m = (n - r0).min(6);
                // SAFETY: AVX-512 and hd a multiple of 64 checked by the caller (d0 + 64 ≤ hd);
                // the view holds positions `0..t_len`, each weight row `t_len` values.
                unsafe {
                    let x = |k: usize| ps(r0 + k);
                    by_count!(avx512::pv64_quant, m, x, sums, kv, g, ty, t_len, d0)
                };
                for (k, s) in sums.iter().take(m).enumerate() {
                    put(r0 + k, d0, s);
                }
            }
        }
    }
}

/// Asks for the key rows of positions `t..t + n` (one block) ahead of use: a step's keys come
/// from DRAM, a block's rows contiguous but blocks scattered.
#[inline(always)]
fn prefetch_rows(kv: &PagedView<'_>, g: usize, t: usize, n: usize) {
    #[cfg(target_arch = "x86_64")]
    for line in kv.key_rows(g, t, n).chunks(64) {
        // SAFETY: a prefetch of a valid address has no effect on memory.
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T1 }>(line.as_ptr() as *const i8)
        };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (kv, g, t, n);
}

#[cfg(test)]
mod tests {
    use candle_core::Device;

    use crate::cache::{KvPool, KvType, KvTypes, LayerKind, SeqCache};
    use crate::kernels::cpu::attention::testing::{filled, rng};
    use crate::kernels::cpu::attention::{attend, attend_many, attend_one_token_tasks, SeqAttn};
    use crate::runtime::device::Placement;

    /// Causal attention in f64 over the values the pool holds (dequantized) and the query
    /// as given: what a quantized cache approximates.
    fn exact(
        q: &[f32],
        pool: &KvPool,
        seq: &SeqCache,
        (len, pos0): (usize, usize),
        n_head: usize,
    ) -> Vec<f64> {
        let kv = pool.view(0, seq).unwrap();
        let (n_kv, hd) = (kv.n_kv_head, kv.head_dim);
        let mut out = vec![0f64; len * n_head * hd];
        for i in 0..len {
            for h in 0..n_head {
                let g = h / (n_head / n_kv);
                let qh = &q[(i * n_head + h) * hd..][..hd];
                let s: Vec<f64> = (0..=pos0 + i)
                    .map(|t| {
                        kv.key_values(g, t).iter().zip(qh).map(|(&k, &x)| k as f64 * x as f64).sum::<f64>()
                            * 0.125
                    })
                    .collect();
                let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = s.iter().map(|x| (x - m).exp()).collect();
                let z: f64 = e.iter().sum();
                for d in 0..hd {
                    let o: f64 = e.iter().enumerate().map(|(t, p)| p / z * kv.value(g, d, t) as f64).sum();
                    out[(i * n_head + h) * hd + d] = o;
                }
            }
        }
        out
    }

    const TYPES: [(KvType, KvType); 5] = [
        (KvType::Q8_0, KvType::F16),
        (KvType::Q4_0, KvType::F16),
        (KvType::Q8_0, KvType::Q8_0),
        (KvType::Q4_0, KvType::Q4_0),
        (KvType::F16, KvType::Q8_0),
    ];

    #[test]
    fn attention_over_quantized_blocks_follows_their_values() {
        let mut r = rng(5);
        for (k, v) in TYPES {
            let types = KvTypes { k, v };
            for ((n_kv, n_head), hd) in [((2, 6), 64), ((1, 4), 128), ((2, 2), 96)] {
                for (len, pos0) in [(1usize, 0usize), (1, 70), (5, 0), (19, 40), (3, 130)] {
                    let (pool, seq) = filled(types, n_kv, hd, pos0 + len, &mut r);
                    let q: Vec<f32> = (0..len * n_head * hd).map(|_| r() * 3.0).collect();
                    let got = attend(&q, &pool.view(0, &seq).unwrap(), len, pos0, n_head, 0.125, None);
                    let want = exact(&q, &pool, &seq, (len, pos0), n_head);
                    // Left: the query's q8_0 rounding (quantized keys) and the weights' f16
                    // rounding (f16 values); outputs are means of values in ±0.5.
                    let err = got.iter().zip(&want).map(|(&a, &b)| (a as f64 - b).abs()).fold(0f64, f64::max);
                    assert!(
                        err < 4e-3,
                        "{types:?} heads {n_head}/{n_kv} hd {hd} len {len} pos0 {pos0}: {err}"
                    );
                }
            }
        }
    }

    #[test]
    fn quantized_values_read_the_same_alone_batched_or_one_by_one() {
        // With quantized keys and values every row is the same sum whether its token came
        // alone, in a prompt chunk, or beside other sequences (no tiled order to switch to).
        let (n_kv, n_head, hd) = (2, 6, 64);
        for (k, v) in [(KvType::Q8_0, KvType::Q8_0), (KvType::Q4_0, KvType::Q4_0)] {
            let types = KvTypes { k, v };
            let mut r = rng(9);
            let (len, pos0) = (20, 50);
            let (pool, seq) = filled(types, n_kv, hd, pos0 + len, &mut r);
            let view = pool.view(0, &seq).unwrap();
            let q: Vec<f32> = (0..len * n_head * hd).map(|_| r() * 3.0).collect();
            let row = n_head * hd;
            for window in [None, Some(24)] {
                let chunk = attend(&q, &view, len, pos0, n_head, 0.125, window);
                let singles: Vec<f32> = (0..len)
                    .flat_map(|i| {
                        attend(&q[i * row..(i + 1) * row], &view, 1, pos0 + i, n_head, 0.125, window)
                    })
                    .collect();
                assert!(
                    chunk.iter().zip(&singles).all(|(a, b)| a.to_bits() == b.to_bits()),
                    "{types:?} {window:?}"
                );
                let other: Vec<f32> = (0..row).map(|_| r()).collect();
                let seqs = [SeqAttn::causal(&other, &view, 1, 7), SeqAttn::causal(&q, &view, len, pos0)];
                let many = attend_many(&seqs, n_head, 0.125, window);
                assert!(
                    many[row..].iter().zip(&chunk).all(|(a, b)| a.to_bits() == b.to_bits()),
                    "{types:?} batched"
                );
            }
        }
    }

    /// A prompt's tokens in tiles (the queries of several tokens sharing each key and value
    /// row) give the bits of one token per task, for every pair of cache types, windows and
    /// head sizes.
    #[test]
    fn tiles_over_quantized_caches_are_one_token_tasks() {
        let mut r = rng(21);
        for (k, v) in TYPES.into_iter().chain([(KvType::F16, KvType::F16)]) {
            let types = KvTypes { k, v };
            for ((n_kv, n_head), hd) in [((2, 6), 64), ((1, 4), 128), ((2, 2), 96)] {
                for (len, pos0) in [(9usize, 0usize), (37, 40), (20, 130)] {
                    let (pool, seq) = filled(types, n_kv, hd, pos0 + len, &mut r);
                    let view = pool.view(0, &seq).unwrap();
                    let q: Vec<f32> = (0..len * n_head * hd).map(|_| r() * 3.0).collect();
                    for window in [None, Some(24)] {
                        let seqs = [SeqAttn::causal(&q, &view, len, pos0)];
                        let tiled = attend_many(&seqs, n_head, 0.125, window);
                        let single = attend_one_token_tasks(&seqs, n_head, 0.125, window);
                        let same = tiled.iter().zip(&single).all(|(a, b)| a.to_bits() == b.to_bits());
                        assert!(
                            same,
                            "{types:?} heads {n_head}/{n_kv} hd {hd} len {len} pos0 {pos0} {window:?}"
                        );
                    }
                }
            }
        }
    }

    /// The AVX-512 value kernel gives the portable loop's bits (one fma per position in order).
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_wide_value_kernel_is_the_portable_loop() {
        if !crate::kernels::cpu::attention::avx512::available() {
            return;
        }
        let mut r = rng(13);
        for v in [KvType::Q8_0, KvType::Q4_0] {
            let (hd, t) = (128, 150);
            let (pool, seq) = filled(KvTypes { k: KvType::F16, v }, 2, hd, t, &mut r);
            let kv = pool.view(0, &seq).unwrap();
            // Weights with exact zeros among them (masked positions are skipped).
            let ps: Vec<Vec<f32>> =
                (0..3).map(|_| (0..t).map(|i| if i % 7 == 3 { 0.0 } else { r().abs() }).collect()).collect();
            for d0 in [0, 64] {
                // SAFETY: AVX-512 checked; rows of 128 values, 150 positions, weights of 150.
                let got = unsafe {
                    crate::kernels::cpu::attention::avx512::pv64_quant::<3>(
                        &kv,
                        1,
                        v,
                        t,
                        d0,
                        [&ps[0], &ps[1], &ps[2]],
                    )
                };
                for (h, p) in ps.iter().enumerate() {
                    let mut want = vec![0f32; hd];
                    let mut row = vec![0f32; hd];
                    for (i, &pt) in p.iter().enumerate() {
                        v.dequantize_row(kv.value_row(1, i), &mut row);
                        if pt != 0.0 {
                            for d in 0..hd {
                                want[d] = pt.mul_add(row[d], want[d]);
                            }
                        }
                    }
                    let same = got[h].iter().zip(&want[d0..d0 + 64]).all(|(a, b)| a.to_bits() == b.to_bits());
                    assert!(same, "{v:?} head {h} dims {d0}..");
                }
            }
        }
    }

    #[test]
    fn quantized_types_refuse_head_sizes_off_their_blocks() {
        let layout = [LayerKind::Attention { n_kv_head: 1, head_dim: 80 }];
        let cpu = Placement::for_device(&Device::Cpu);
        let types = KvTypes { k: KvType::Q8_0, v: KvType::F16 };
        let err = KvPool::new_on(&layout, 2, true, &cpu, types).err().expect("80 is not whole blocks");
        assert!(err.to_string().contains("multiple of 32"), "{err}");
    }
}
