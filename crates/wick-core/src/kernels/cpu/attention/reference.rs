//! Causal GQA attention over a host-side f16 KV cache, summed in the order llama.cpp's CPU
//! backend (AVX-512 build, flash attention off) sums it.
//!
//! Why this exists: every quantized matmul after attention re-quantizes its input to q8
//! blocks, so a one-ulp difference in an attention output can flip a rounding and move the
//! logits by ~1e-2 (measured on SmolLM2: layer sums agreed to 1e-7 for 27 layers, then one
//! such flip). Matching llama.cpp token for token needs the same dot-product order:
//! - one new token: `ggml_vec_dot_f16` — 4 accumulators of 16 lanes over steps of 64, folded
//!   (a0+a2)+(a1+a3), a 16-lane tree sum, and the tail (n % 64) added in f64;
//! - several new tokens: llamafile's tinyBLAS — 16 lanes accumulated over chunks of 16, then
//!   the 16-lane tree sum;
//! - softmax: ggml's vector `expf`, per-16 tree sums accumulated in f64, scaled by
//!   `(float)(1/sum)`; probabilities rounded to f16 before meeting V (as ggml converts them
//!   to the f16 cache's dot type).

use half::f16;

use crate::cache::PagedView;
use crate::ops::attn::reduce16;
use crate::ops::expf::{exp_variant, ggml_expf};

/// `ggml_vec_dot_f16` (AVX-512): `x(i)·y(i)` for i < n; values are f16-exact f32s.
#[inline(always)]
pub(crate) fn dot_single(n: usize, x: impl Fn(usize) -> f32, y: impl Fn(usize) -> f32) -> f32 {
    let np = n & !63;
    let mut acc = [[0f32; 16]; 4];
    for base in (0..np).step_by(64) {
        for (j, a) in acc.iter_mut().enumerate() {
            for (l, s) in a.iter_mut().enumerate() {
                let i = base + 16 * j + l;
                *s = x(i).mul_add(y(i), *s);
            }
        }
    }
    let mut folded = [0f32; 16];
    for l in 0..16 {
        folded[l] = (acc[0][l] + acc[2][l]) + (acc[1][l] + acc[3][l]);
    }
    let mut sum = reduce16(&folded) as f64;
    for i in np..n {
        sum += (x(i) * y(i)) as f64;
    }
    sum as f32
}

/// tinyBLAS `gemm_bloc` for one output: 16 lanes over chunks of 16 (n % 16 == 0).
#[inline(always)]
pub(crate) fn dot_tiled(n: usize, x: impl Fn(usize) -> f32, y: impl Fn(usize) -> f32) -> f32 {
    let mut acc = [0f32; 16];
    for base in (0..n).step_by(16) {
        for (l, s) in acc.iter_mut().enumerate() {
            *s = x(base + l).mul_add(y(base + l), *s);
        }
    }
    reduce16(&acc)
}

/// Every sequence's attention for one layer (`q`: `[len, n_head, hd]` row-major for positions
/// `pos0..pos0+len`, the cache holding `pos0 + len` positions; `window`: a sliding-window
/// layer's span, Gemma 3's local layers), in one pass over the thread pool. The vectorised
/// kernels in `ops::attn` do exactly the arithmetic of `attend_reference` below
/// (bit-identical; checked by `ops_match_reference`).
pub fn attend_many(
    seqs: &[crate::ops::attn::SeqAttn<'_>],
    n_head: usize,
    scale: f32,
    window: Option<usize>,
) -> Vec<f32> {
    crate::ops::attn::attend_many(seqs, n_head, scale, window)
}

/// The scalar statement of `attend`'s arithmetic, kept as its specification and test oracle.
#[allow(dead_code)]
pub(crate) fn attend_reference(
    q: &[f32],
    kv: &PagedView<'_>,
    len: usize,
    pos0: usize,
    n_head: usize,
    scale: f32,
) -> Vec<f32> {
    let (n_kv, hd) = (kv.n_kv_head, kv.head_dim);
    let group = n_head / n_kv;
    let var = exp_variant();
    // ggml uses tinyBLAS only when more than one token is multiplied and rows split into
    // 16-lane chunks; otherwise the single-token dot product.
    let tiled = len > 1;
    let mut out = vec![0f32; len * n_head * hd];
    let mut p16 = Vec::new();
    for i in 0..len {
        let t_len = pos0 + i + 1;
        // Masked (future and padding) cells are -inf in ggml and contribute exact zeros.
        let padded = t_len.div_ceil(16) * 16;
        for h in 0..n_head {
            let kvh = h / group;
            let qh = &q[(i * n_head + h) * hd..(i * n_head + h + 1) * hd];
            let q16: Vec<f32> = qh.iter().map(|&x| f16::from_f32(x).to_f32()).collect();
            let kq = |t: usize| {
                let kt = kv.key(kvh, t);
                let (x, y) = (|d: usize| kt[d].to_f32(), |d: usize| q16[d]);
                if tiled && hd.is_multiple_of(16) {
                    dot_tiled(hd, x, y)
                } else {
                    dot_single(hd, x, y)
                }
            };
            let w: Vec<f32> = (0..t_len).map(|t| kq(t) * scale).collect();
            let max = w.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let mut e = vec![0f32; padded];
            let mut sum = 0f64;
            for (c, chunk) in e.chunks_mut(16).enumerate() {
                let mut lanes = [0f32; 16];
                for (l, v) in chunk.iter_mut().enumerate() {
                    let t = c * 16 + l;
                    if t < t_len {
                        *v = ggml_expf(w[t] - max, var);
                        lanes[l] = *v;
                    }
                }
                sum += reduce16(&lanes) as f64;
            }
            let inv = (1.0 / sum) as f32;
            p16.clear();
            p16.extend(e.iter().map(|&v| f16::from_f32(v * inv).to_f32()));
            let o = &mut out[(i * n_head + h) * hd..(i * n_head + h + 1) * hd];
            for (d, od) in o.iter_mut().enumerate() {
                let x = |t: usize| if t < t_len { kv.value(kvh, d, t).to_f32() } else { 0.0 };
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
    use crate::cache::{KvPool, LayerKind, SeqCache};
    use crate::ops::attn::{attend, SeqAttn};

    fn rng(seed: u32) -> impl FnMut() -> f32 {
        let mut s = seed;
        move || {
            s = s.wrapping_mul(1664525).wrapping_add(1013904223);
            (s >> 8) as f32 / (1 << 24) as f32 - 0.5
        }
    }

    /// A pool holding `t` random positions for one sequence, its blocks out of order, and NaN
    /// in the rest of its last block (what a block's earlier owner may have left: positions
    /// past the sequence must not reach its outputs).
    fn filled(n_kv: usize, hd: usize, t: usize, r: &mut impl FnMut() -> f32) -> (KvPool, SeqCache) {
        let layout = [LayerKind::Attention { n_kv_head: n_kv, head_dim: hd }];
        let bs = crate::cache::BLOCK_SIZE;
        let mut pool = KvPool::with_capacity(&layout, t + 2 * bs, &Device::Cpu).unwrap();
        let mut spacer = pool.new_seq();
        pool.reserve(&mut spacer, 1).unwrap();
        let mut seq = pool.new_seq();
        let whole = t.div_ceil(bs) * bs;
        pool.reserve(&mut seq, whole).unwrap();
        let val = |i: usize, x: f32| if i < t * n_kv * hd { x } else { f32::NAN };
        let k: Vec<f32> = (0..whole * n_kv * hd).map(|i| val(i, r() * 3.0)).collect();
        let v: Vec<f32> = (0..whole * n_kv * hd).map(|i| val(i, r())).collect();
        pool.write(0, &seq, 0, &k, &v).unwrap();
        (pool, seq)
    }

    #[test]
    fn ops_match_reference() {
        let (n_kv, n_head) = (2, 4);
        let mut r = rng(3);
        for hd in [64, 80, 128] {
            for (len, pos0) in
                [(1usize, 0usize), (1, 15), (1, 37), (1, 63), (1, 200), (5, 0), (19, 40), (70, 0), (3, 130)]
            {
                let (pool, seq) = filled(n_kv, hd, pos0 + len, &mut r);
                let kv = pool.view(0, &seq).unwrap();
                let q: Vec<f32> = (0..len * n_head * hd).map(|_| r() * 3.0).collect();
                let a = attend(&q, &kv, len, pos0, n_head, 0.125, None);
                let b = attend_reference(&q, &kv, len, pos0, n_head, 0.125);
                assert!(
                    a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()),
                    "hd {hd} len {len} pos0 {pos0}"
                );
            }
        }
    }

    /// `cargo test --release -p wick-core --lib eight_decoding_sequences_speed -- --ignored --nocapture`
    /// (SmolLM2's attention shape: 9 query heads on 3 KV heads, 160 cached positions each).
    #[test]
    #[ignore]
    fn eight_decoding_sequences_speed() {
        let (n_kv, n_head, hd) = (3, 9, 64);
        let mut r = rng(11);
        let made: Vec<_> = (0..8).map(|_| filled(n_kv, hd, 160, &mut r)).collect();
        let views: Vec<_> = made.iter().map(|(pool, seq)| pool.view(0, seq).unwrap()).collect();
        let qs: Vec<Vec<f32>> = (0..8).map(|_| (0..n_head * hd).map(|_| r() * 3.0).collect()).collect();
        let seqs: Vec<SeqAttn<'_>> =
            views.iter().zip(&qs).map(|(kv, q)| SeqAttn { q, kv, len: 1, pos0: 159 }).collect();
        for _ in 0..3 {
            let t = std::time::Instant::now();
            for _ in 0..300 {
                std::hint::black_box(attend_many(&seqs, n_head, 0.125, None));
            }
            println!("attend_many 8×160: {:.1} us", t.elapsed().as_secs_f64() / 300.0 * 1e6);
        }
        // The same over 64 layers' worth of KV (~24 MB, from DRAM as in a real step).
        let layers: Vec<Vec<_>> =
            (0..64).map(|_| (0..8).map(|_| filled(n_kv, hd, 160, &mut r)).collect()).collect();
        let views: Vec<Vec<_>> =
            layers.iter().map(|l| l.iter().map(|(pool, seq)| pool.view(0, seq).unwrap()).collect()).collect();
        let steps: Vec<Vec<SeqAttn<'_>>> = views
            .iter()
            .map(|vs| vs.iter().zip(&qs).map(|(kv, q)| SeqAttn { q, kv, len: 1, pos0: 159 }).collect())
            .collect();
        for _ in 0..3 {
            let t = std::time::Instant::now();
            for _ in 0..10 {
                for step in &steps {
                    std::hint::black_box(attend_many(step, n_head, 0.125, None));
                }
            }
            println!(
                "attend_many 8×160 from DRAM: {:.1} us per layer",
                t.elapsed().as_secs_f64() / 640.0 * 1e6
            );
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
                    .map(|((&(len, pos0), kv), q)| SeqAttn { q, kv, len, pos0 })
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
                if window.is_none() {
                    let reference: Vec<f32> = seqs
                        .iter()
                        .flat_map(|s| attend_reference(s.q, s.kv, s.len, s.pos0, n_head, 0.125))
                        .collect();
                    assert!(same(&together, &reference), "{n_head}/{n_kv} heads: reference");
                }
            }
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
