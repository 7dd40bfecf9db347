//! The scalar statement of the attention kernels' arithmetic (`attend`), kept as their
//! specification and test oracle (compiled for tests only).

use half::f16;

use super::{kq_tiled, p_in_f16, SeqAttn};
use crate::cache::PagedView;
use crate::kernels::cpu::blocks::reduce16;
use crate::kernels::cpu::expf::{exp_variant, ggml_expf, vector_sum, ExpVariant};
use crate::kernels::cpu::float_dots::{dot_single, dot_tiled};

/// One sequence's attention as `attend` computes it, element by element.
pub(crate) fn attend_reference(
    q: &[f32],
    kv: &PagedView<'_>,
    len: usize,
    pos0: usize,
    n_head: usize,
    scale: f32,
    window: Option<usize>,
) -> Vec<f32> {
    attend_reference_seq(&SeqAttn::causal(q, kv, len, pos0), n_head, scale, window)
}

/// `attend_reference` of a causal or bidirectional sequence (`SeqAttn::causal`).
pub(crate) fn attend_reference_seq(
    s: &SeqAttn<'_>,
    n_head: usize,
    scale: f32,
    window: Option<usize>,
) -> Vec<f32> {
    let (q, kv, len) = (s.q, s.kv, s.len);
    let (n_kv, hd) = (kv.n_kv_head, kv.head_dim);
    let group = n_head / n_kv;
    let var = exp_variant();
    // ggml uses tinyBLAS only when more than one token is multiplied and rows split into
    // whole chunks (x86: for K·Q and V·P; aarch64: for V·P only, on unrounded weights);
    // otherwise the single-token dot product.
    let tiled = len > 1;
    let mut out = vec![0f32; len * n_head * hd];
    let mut p16 = Vec::new();
    for i in 0..len {
        let t_len = s.seen(i);
        // Masked (future and padding) cells are -inf in ggml and contribute exact zeros.
        let padded = t_len.div_ceil(16) * 16;
        for h in 0..n_head {
            let kvh = h / group;
            let qh = &q[(i * n_head + h) * hd..(i * n_head + h + 1) * hd];
            let q16: Vec<f32> = qh.iter().map(|&x| f16::from_f32(x).to_f32()).collect();
            let kq = |t: usize| {
                let kt = kv.key(kvh, t);
                let (x, y) = (|d: usize| kt[d].to_f32(), |d: usize| q16[d]);
                if kq_tiled(tiled) && hd.is_multiple_of(16) {
                    dot_tiled(hd, x, y)
                } else {
                    dot_single(hd, x, y)
                }
            };
            // A sliding window masks positions before its start to -inf, as ggml's SWA mask.
            let t0 = window.map_or(0, |w| t_len.saturating_sub(w));
            let w: Vec<f32> =
                (0..t_len).map(|t| if t < t0 { f32::NEG_INFINITY } else { kq(t) * scale }).collect();
            let max = w.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let mut e = vec![0f32; padded];
            let mut sum = 0f64;
            // One horizontal sum per vector of ggml's `expf` (aarch64: `vaddvq_f32` of 4).
            let width = if var == ExpVariant::Neon { 4 } else { 16 };
            for (c, chunk) in e.chunks_mut(width).enumerate() {
                let mut lanes = [0f32; 16];
                for (l, v) in chunk.iter_mut().enumerate() {
                    let t = c * width + l;
                    if t < t_len {
                        *v = ggml_expf(w[t] - max, var);
                        lanes[l] = *v;
                    }
                }
                sum += if width == 4 { vector_sum(var, &lanes) } else { reduce16(&lanes) } as f64;
            }
            let inv = (1.0 / sum) as f32;
            let round = p_in_f16(tiled);
            p16.clear();
            p16.extend(e.iter().map(|&v| if round { f16::from_f32(v * inv).to_f32() } else { v * inv }));
            let o = &mut out[(i * n_head + h) * hd..(i * n_head + h + 1) * hd];
            for (d, od) in o.iter_mut().enumerate() {
                let x = |t: usize| if t < t_len { kv.value(kvh, d, t) } else { 0.0 };
                let y = |t: usize| p16[t];
                // The KV length ggml multiplies is padded to 256 cells: always 16-aligned.
                *od = if tiled {
                    dot_tiled(padded, x, y)
                } else {
                    dot_single(padded.div_ceil(64) * 64, x, |t| if t < padded { p16[t] } else { 0.0 })
                };
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use candle_core::Device;

    use super::*;
    use crate::cache::{KvPool, KvTypes, LayerKind, SeqCache};
    use crate::kernels::cpu::attention::testing::{self, rng};
    use crate::kernels::cpu::attention::{attend, attend_many, attend_many_in, SeqAttn};

    /// An f16 pool of `t` random positions (`testing::filled`).
    fn filled(n_kv: usize, hd: usize, t: usize, r: &mut impl FnMut() -> f32) -> (KvPool, SeqCache) {
        testing::filled(KvTypes::F16, n_kv, hd, t, r)
    }

    #[test]
    fn ops_match_reference() {
        let mut r = rng(3);
        // Groups of 1, 2, 3 and 4 query heads per KV head (the V product takes 4, 2, 1 and 1
        // dimensions per pass over the positions for them).
        for ((n_kv, n_head), hd) in
            [(2, 4), (2, 2), (2, 6), (1, 4)].into_iter().flat_map(|s| [64, 80, 128].map(|hd| (s, hd)))
        {
            for (len, pos0) in [
                (1usize, 0usize),
                (1, 15),
                (1, 37),
                (1, 63),
                (1, 200),
                (5, 0),
                (19, 40),
                (70, 0),
                (3, 130),
                (45, 77),
            ] {
                let (pool, seq) = filled(n_kv, hd, pos0 + len, &mut r);
                let kv = pool.view(0, &seq).unwrap();
                let q: Vec<f32> = (0..len * n_head * hd).map(|_| r() * 3.0).collect();
                for window in [None, Some(24)] {
                    let a = attend(&q, &kv, len, pos0, n_head, 0.125, window);
                    let b = attend_reference(&q, &kv, len, pos0, n_head, 0.125, window);
                    assert!(
                        a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()),
                        "heads {n_head}/{n_kv} hd {hd} len {len} pos0 {pos0} window {window:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn many_sequences_in_one_pass_match_each_alone() {
        // Query heads per KV head: 3 (one kernel call per group) and 10 (4 + 4 + 2).
        for (n_kv, n_head) in [(2usize, 6usize), (1, 10)] {
            let hd = 64;
            let mut r = rng(11);
            // (new tokens, cached positions before them): decodes and prefill chunks mixed.
            let shapes = [(1usize, 0usize), (1, 70), (7, 0), (1, 129), (3, 40), (20, 64)];
            let made: Vec<_> =
                shapes.iter().map(|&(len, pos0)| filled(n_kv, hd, pos0 + len, &mut r)).collect();
            let views: Vec<_> = made.iter().map(|(pool, seq)| pool.view(0, seq).unwrap()).collect();
            let qs: Vec<Vec<f32>> =
                shapes.iter().map(|&(len, _)| (0..len * n_head * hd).map(|_| r() * 3.0).collect()).collect();
            for window in [None, Some(24)] {
                let seqs: Vec<SeqAttn<'_>> = shapes
                    .iter()
                    .zip(&views)
                    .zip(&qs)
                    .map(|((&(len, pos0), kv), q)| SeqAttn::causal(q, kv, len, pos0))
                    .collect();
                let together = attend_many(&seqs, n_head, 0.125, window);
                let alone: Vec<f32> = seqs
                    .iter()
                    .flat_map(|s| attend(s.q, s.kv, s.len, s.pos0, n_head, 0.125, window))
                    .collect();
                let same = |a: &[f32], b: &[f32]| {
                    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
                };
                assert!(same(&together, &alone), "{n_head}/{n_kv} heads, window {window:?}");
                // Tasks in many small waves sharing scratch slots (what bounds a long prompt's
                // scratch) give the same bits.
                let waves = attend_many_in(&seqs, n_head, 0.125, window, 1);
                assert!(same(&waves, &together), "{n_head}/{n_kv} heads, window {window:?}: waves");
                let reference: Vec<f32> = seqs
                    .iter()
                    .flat_map(|s| attend_reference(s.q, s.kv, s.len, s.pos0, n_head, 0.125, window))
                    .collect();
                assert!(same(&together, &reference), "{n_head}/{n_kv} heads, window {window:?}: reference");
            }
        }
    }

    #[test]
    fn bidirectional_sequences_see_the_whole_step() {
        // A bidirectional embedding model's sequences: each token attends every position of
        // its step, alone and batched with causal ones, in the kernels' orders.
        for (n_kv, n_head) in [(2usize, 6usize), (2, 4)] {
            let hd = 64;
            let mut r = rng(17);
            let shapes =
                [(1usize, 0usize, false), (7, 0, false), (20, 0, true), (45, 0, false), (3, 40, true)];
            let made: Vec<_> =
                shapes.iter().map(|&(len, pos0, _)| filled(n_kv, hd, pos0 + len, &mut r)).collect();
            let views: Vec<_> = made.iter().map(|(pool, seq)| pool.view(0, seq).unwrap()).collect();
            let qs: Vec<Vec<f32>> = shapes
                .iter()
                .map(|&(len, _, _)| (0..len * n_head * hd).map(|_| r() * 3.0).collect())
                .collect();
            let seqs: Vec<SeqAttn<'_>> = shapes
                .iter()
                .zip(&views)
                .zip(&qs)
                .map(|((&(len, pos0, causal), kv), q)| SeqAttn { q, kv, len, pos0, causal })
                .collect();
            let together = attend_many(&seqs, n_head, 0.125, None);
            let reference: Vec<f32> =
                seqs.iter().flat_map(|s| attend_reference_seq(s, n_head, 0.125, None)).collect();
            assert_eq!(together.len(), reference.len());
            assert!(
                together.iter().zip(&reference).all(|(x, y)| x.to_bits() == y.to_bits()),
                "{n_head}/{n_kv} heads"
            );
            // The first token of a bidirectional sequence differs from its causal self (it sees
            // the later ones): the flag is not ignored.
            let causal = attend(seqs[1].q, seqs[1].kv, 7, 0, n_head, 0.125, None);
            let row = n_head * hd;
            let bidir = &together[row..2 * row];
            assert!(causal[..row].iter().zip(bidir).any(|(a, b)| a != b));
        }
    }

    #[test]
    fn a_window_sees_only_the_last_positions() {
        let (n_kv, n_head, hd, t, w) = (1, 2, 64, 90, 24);
        let mut r = rng(7);
        let layout = [LayerKind::Attention { n_kv_head: n_kv, head_dim: hd }];
        let mut pool = KvPool::with_capacity(&layout, 2 * t, &Device::Cpu).unwrap();
        let (mut full_seq, mut tail_seq) = (pool.new_seq(), pool.new_seq());
        pool.reserve(&mut full_seq, t).unwrap();
        pool.reserve(&mut tail_seq, w).unwrap();
        let k: Vec<f32> = (0..t * hd).map(|_| r() * 3.0).collect();
        let v: Vec<f32> = (0..t * hd).map(|_| r()).collect();
        pool.write(0, &full_seq, 0, &k, &v).unwrap();
        // The same keys and values but only the last `w` positions.
        pool.write(0, &tail_seq, 0, &k[(t - w) * hd..], &v[(t - w) * hd..]).unwrap();
        let q: Vec<f32> = (0..n_head * hd).map(|_| r() * 3.0).collect();
        let full_kv = pool.view(0, &full_seq).unwrap();
        let windowed = attend(&q, &full_kv, 1, t - 1, n_head, 0.125, Some(w));
        let tail = attend(&q, &pool.view(0, &tail_seq).unwrap(), 1, w - 1, n_head, 0.125, None);
        let full = attend(&q, &full_kv, 1, t - 1, n_head, 0.125, None);
        // Masked cells add exact zeros; only the summation lanes move, so compare closely.
        assert!(windowed.iter().zip(&tail).all(|(a, b)| (a - b).abs() < 1e-5));
        assert!(windowed.iter().zip(&full).any(|(a, b)| (a - b).abs() > 1e-3), "the window must matter");
    }
}
