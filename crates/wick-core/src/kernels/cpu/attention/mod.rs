//! Causal GQA attention over the paged f16 KV pool, summed in the order llama.cpp's CPU
//! backend (AVX-512 build, flash attention off) sums it, vectorised (F16C converts, one fma
//! per lane as the scalar statement in `reference`) and spread over the thread pool by
//! (token, KV head).
//!
//! Why exact: every quantized matmul after attention re-quantizes its input to q8 blocks, so a
//! one-ulp difference in an attention output can flip a rounding and move the logits by ~1e-2
//! (measured on SmolLM2: layer sums agreed to 1e-7 for 27 layers, then one such flip).
//! Matching llama.cpp token for token needs the same dot-product order:
//! - one new token: `ggml_vec_dot_f16` — 4 accumulators of 16 lanes over steps of 64, folded
//!   (a0+a2)+(a1+a3), a 16-lane tree sum, and the tail (n % 64) added in f64;
//! - several new tokens: llamafile's tinyBLAS — 16 lanes accumulated over chunks of 16, then
//!   the 16-lane tree sum;
//! - softmax: ggml's vector `expf`, per-16 tree sums accumulated in f64, scaled by
//!   `(float)(1/sum)`; probabilities rounded to f16 before meeting V (as ggml converts them
//!   to the f16 cache's dot type).

#[cfg(target_arch = "x86_64")]
pub mod avx512;
mod dots;
#[cfg(test)]
mod reference;

use half::f16;

use self::dots::{dot_f16_single, dot_f16_single_paged, dot_f16_tiled, dot_f16_tiled_paged};
use crate::cache::{PagedView, BLOCK_SIZE};
use crate::kernels::cpu::blocks::reduce16;
use crate::kernels::cpu::expf::{exp_variant, ggml_expf, ExpVariant};
use crate::kernels::cpu::feats::fast;
use crate::runtime::pool::{self, SyncPtr};

/// `x` rounded to f16 and back (the query as ggml converts it to the cache's type).
fn round_to_f16(x: &[f32], out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if avx512::available() {
        // Safety: AVX-512 F checked.
        return unsafe { avx512::round_to_f16(x, out) };
    }
    for (o, &v) in out.iter_mut().zip(x) {
        *o = f16::from_f32(v).to_f32();
    }
}

/// Attention weights as llama.cpp's CPU `soft_max` makes them, rounded to f16 for the V
/// product: `p = expf(w − max w)` over whole 16-chunks (masked −∞ → exactly 0), summed one
/// `_mm512_reduce_add_ps` tree per chunk in f64, then `p·(1/Σ)`.
fn softmax_f16(w: &[f32], p: &mut [f32], var: ExpVariant) {
    #[cfg(target_arch = "x86_64")]
    if var == ExpVariant::Avx512 {
        // Safety: `Avx512` is only detected with AVX-512 F and DQ.
        return unsafe { avx512::softmax_f16(w, p) };
    }
    let max = w.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0f64;
    for (pc, wc) in p.chunks_mut(16).zip(w.chunks(16)) {
        let mut lanes = [0f32; 16];
        for ((e, &x), l) in pc.iter_mut().zip(wc).zip(lanes.iter_mut()) {
            *e = ggml_expf(x - max, var);
            *l = *e;
        }
        sum += reduce16(&lanes) as f64;
    }
    let inv = (1.0 / sum) as f32;
    for e in p.iter_mut() {
        *e = f16::from_f32(*e * inv).to_f32();
    }
}

/// `$out[..n] = $f::<N>(args…, [$x(0), …, $x(n − 1)])` for N = `n` in 1..=6.
#[cfg(target_arch = "x86_64")]
macro_rules! by_count {
    ($m:ident::$f:ident, $n:expr, $x:expr, $out:ident, $($arg:expr),*) => {{
        let x = $x;
        match $n {
            1 => $out[..1].copy_from_slice(&$m::$f::<1>($($arg),*, [x(0)])),
            2 => $out[..2].copy_from_slice(&$m::$f::<2>($($arg),*, [x(0), x(1)])),
            3 => $out[..3].copy_from_slice(&$m::$f::<3>($($arg),*, [x(0), x(1), x(2)])),
            4 => $out[..4].copy_from_slice(&$m::$f::<4>($($arg),*, [x(0), x(1), x(2), x(3)])),
            5 => $out[..5].copy_from_slice(&$m::$f::<5>($($arg),*, [x(0), x(1), x(2), x(3), x(4)])),
            _ => $out[..6].copy_from_slice(&$m::$f::<6>($($arg),*, [x(0), x(1), x(2), x(3), x(4), x(5)])),
        }
    }};
}

/// Asks for `data`'s cache lines ahead of use.
#[inline(always)]
/// Into L2, not L1: a chunk ahead is 32 lines, and T0 prefetches of that many hold the L1's
/// miss buffers until they land, stalling the loads in use (a step's KV from DRAM, 96-layer
/// bench: 97 µs per layer with T0, 76 with none, 63 with T1).
fn prefetch(data: &[f16]) {
    #[cfg(target_arch = "x86_64")]
    for line in data.chunks(32) {
        // Safety: a prefetch of a valid address has no effect on memory.
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T1 }>(line.as_ptr() as *const i8)
        };
    }
}

/// Sixteen scores `s` of positions `t..t + 16` into `w` (the row's slice from `t`), scaled; those
/// outside the query's positions `lo..hi` stay masked.
#[inline(always)]
fn put_scores(w: &mut [f32], s: &[f32; 16], t: usize, (lo, hi): (usize, usize), scale: f32) {
    if lo <= t && t + 16 <= hi {
        for (wl, v) in w[..16].iter_mut().zip(s) {
            *wl = v * scale;
        }
    } else {
        for (l, v) in s.iter().enumerate() {
            if (lo..hi).contains(&(t + l)) {
                w[l] = v * scale;
            }
        }
    }
}

/// One sequence's part of a layer's attention: its new tokens' queries `[len, n_head, hd]`
/// for positions `pos0..pos0+len`, and its paged KV (already holding those positions).
pub struct SeqAttn<'a> {
    pub q: &'a [f32],
    pub kv: &'a PagedView<'a>,
    pub len: usize,
    pub pos0: usize,
}

/// One layer's attention for one sequence, the arithmetic of
/// `reference::attend_reference`. Returns `[len, n_head·hd]`.
pub fn attend(
    q: &[f32],
    kv: &PagedView<'_>,
    len: usize,
    pos0: usize,
    n_head: usize,
    scale: f32,
    window: Option<usize>,
) -> Vec<f32> {
    attend_many(&[SeqAttn { q, kv, len, pos0 }], n_head, scale, window)
}

/// Scratch of one `attend_many` pass at most (more only when a wave of 4 tasks per thread needs it).
const SCRATCH_BYTES: usize = 8 << 20;

/// New tokens of one sequence per task in the multi-token AVX-512 path: the query heads of
/// all of them share each K and V load (a 16k-token prompt streamed its K/V from DRAM once per
/// token and head before, 3/4 of its prefill time).
const TILE: usize = 8;

/// Scratch that one wave of tiles may hold in all (a tile's scores and weights are its queries ×
/// its positions): past it tiles shrink, so a 128k-token prompt on 16 threads holds what one-token
/// tasks held (128 MB) rather than eight times that.
const TILE_SCRATCH_BYTES: usize = 64 << 20;

/// `attend` for every sequence of a step at once: one pass over the pool with a task per
/// (sequence, tile of new tokens, KV head), so that a step of many one-token sequences keeps
/// both cores busy. Returns the sequences' outputs one after another (`[Σ len, n_head·hd]`).
pub fn attend_many(seqs: &[SeqAttn<'_>], n_head: usize, scale: f32, window: Option<usize>) -> Vec<f32> {
    attend_many_in(seqs, n_head, scale, window, SCRATCH_BYTES)
}

/// `attend_many` with at most `scratch_bytes` of scratch (the tests shrink it to run many waves).
pub(crate) fn attend_many_in(
    seqs: &[SeqAttn<'_>],
    n_head: usize,
    scale: f32,
    window: Option<usize>,
    scratch_bytes: usize,
) -> Vec<f32> {
    let Some(first) = seqs.first() else { return Vec::new() };
    let var = exp_variant();
    let (n_kv, hd) = (first.kv.n_kv_head, first.kv.head_dim);
    let group = n_head / n_kv;
    let threads = pool::global().threads();
    #[cfg(target_arch = "x86_64")]
    let wide_tiles = hd.is_multiple_of(16) && avx512::available();
    #[cfg(not(target_arch = "x86_64"))]
    let wide_tiles = false;
    // Tokens per task of each sequence: a tile in the multi-token AVX-512 path (smaller when a
    // short prompt would otherwise leave threads without work), one otherwise.
    let longest = seqs.iter().map(|s| s.pos0 + s.len).max().unwrap_or(0).div_ceil(16) * 16;
    let per_token = group * (hd + 2 * longest);
    let most = TILE_SCRATCH_BYTES / 4 / (4 * threads) / per_token.max(1);
    let tile: Vec<usize> = seqs
        .iter()
        .map(|s| {
            if s.len > 1 && wide_tiles {
                (s.len * n_kv / (4 * threads)).min(most).clamp(1, TILE)
            } else {
                1
            }
        })
        .collect();
    // Task index where each sequence's tasks (one per tile and KV head) start, and the output
    // row of its first token.
    let mut starts = Vec::with_capacity(seqs.len());
    let mut row0 = Vec::with_capacity(seqs.len());
    let (mut n_tasks, mut n_rows) = (0, 0);
    for (s, &t) in seqs.iter().zip(&tile) {
        starts.push(n_tasks);
        row0.push(n_rows);
        n_tasks += s.len.div_ceil(t) * n_kv;
        n_rows += s.len;
    }
    let mut out: Vec<f32> = Vec::with_capacity(n_rows * n_head * hd);
    let op = SyncPtr(out.as_mut_ptr());
    // Every task's scratch, in one allocation: q (as f16, the cache's dot type in ggml), the
    // scores and the weights of each of its queries; each part is written before use.
    let per_task = tile.iter().max().unwrap_or(&1) * per_token;
    // Tasks run in waves that share one scratch slot each: a scratch per task would be
    // len² · n_kv · group values for a long prompt in one pass (34 GB at 16k tokens of LFM2-350M).
    let wave = (scratch_bytes / 4 / per_task.max(1)).max(4 * threads).clamp(1, n_tasks.max(1));
    let mut scratch_all: Vec<f32> = Vec::with_capacity(wave * per_task);
    let sp = SyncPtr(scratch_all.as_mut_ptr());
    // A KV group's query heads, at most four per kernel call.
    let all_heads: Vec<usize> = (0..group).collect();
    let head_chunks: Vec<&[usize]> = all_heads.chunks(4).collect();
    // A task's sequence, its tokens within it, and its KV head.
    let locate = |task: usize| {
        let si = starts.partition_point(|&s| s <= task) - 1;
        let (k, t) = ((task - starts[si]) / n_kv, tile[si]);
        (si, k * t..(k * t + t).min(seqs[si].len), (task - starts[si]) % n_kv)
    };
    // One new token against one KV head: the query heads that share it.
    let one_token = |si: usize, i: usize, g: usize, scratch: &mut [f32]| {
        fast(
            #[inline(always)]
            || {
                let SeqAttn { q, kv, len, pos0 } = seqs[si];
                let tiled = len > 1;
                // One new token: sixteen `ggml_vec_dot_f16`-order dots at a time.
                #[cfg(target_arch = "x86_64")]
                let wide_single = !tiled && hd.is_multiple_of(64) && avx512::available();
                let t_len = pos0 + i + 1;
                let padded = t_len.div_ceil(16) * 16;
                let heads = g * group..(g + 1) * group;
                let (q16, rest) = scratch[..group * (hd + 2 * padded)].split_at_mut(group * hd);
                let (w, p16) = rest.split_at_mut(group * padded);
                for (h, qd) in heads.clone().zip(q16.chunks_exact_mut(hd)) {
                    round_to_f16(&q[(i * n_head + h) * hd..][..hd], qd);
                }
                let q16 = &*q16;
                let qs = |h: usize| &q16[h * hd..(h + 1) * hd];
                // Sliding-window layers see the last `window` positions; the others are masked to
                // -inf, i.e. they add exact zeros, as in llama.cpp's SWA mask.
                let t0 = window.map_or(0, |w| t_len.saturating_sub(w));
                w.fill(f32::NEG_INFINITY);
                // Sixteen positions at a time from a multiple of 16 (those before t0 stay masked).
                let mut t = t0 & !15;
                // Kernel results for up to four heads, sized for `by_count!`'s widest arm (set
                // once: the kernels fill what is read).
                #[cfg(target_arch = "x86_64")]
                let (mut scores, mut outs) = ([[0f32; 16]; 6], [[0f32; 16]; 6]);
                #[cfg(target_arch = "x86_64")]
                if wide_single {
                    // The last chunk too: its keys past `t_len` are stored (blocks are whole
                    // chunks), their scores are not used, and each score is its own dot.
                    while t < t_len {
                        // The next sixteen keys stream in while these are used (a step's KV
                        // comes from DRAM: too scattered for the hardware prefetcher).
                        if t + 16 < t_len {
                            prefetch(kv.keys(g, t + 16, 16));
                        }
                        for (c, hs) in head_chunks.iter().enumerate() {
                            // Safety: AVX-512 checked; hd a multiple of 64; t of 16.
                            unsafe {
                                by_count!(
                                    avx512::kq16_single,
                                    hs.len(),
                                    |k: usize| qs(hs[k]),
                                    scores,
                                    kv,
                                    g,
                                    t
                                )
                            };
                            for (k, s) in scores.iter().take(hs.len()).enumerate() {
                                put_scores(&mut w[(4 * c + k) * padded + t..], s, t, (t0, t_len), scale);
                            }
                        }
                        t += 16;
                    }
                }
                let t = t.max(t0);
                for (h, wh) in w.chunks_exact_mut(padded).enumerate() {
                    for (tt, wt) in wh.iter_mut().enumerate().take(t_len).skip(t) {
                        let kt = kv.key(g, tt);
                        let dot = if tiled && hd.is_multiple_of(16) {
                            dot_f16_tiled(kt, qs(h))
                        } else {
                            dot_f16_single(kt, qs(h), hd)
                        };
                        *wt = dot * scale;
                    }
                }
                #[cfg(target_arch = "x86_64")]
                if wide_single {
                    for j in 0..t_len.div_ceil(BLOCK_SIZE) {
                        prefetch(kv.values(g, 0, hd.min(16), j));
                    }
                }
                for (wh, ph) in w.chunks_exact(padded).zip(p16.chunks_exact_mut(padded)) {
                    softmax_f16(wh, ph, var);
                }
                let p16 = &*p16;
                let ps = |h: usize| &p16[h * padded..h * padded + t_len];
                // Safety: this task alone writes its heads' slices of this output row.
                let orow = unsafe {
                    std::slice::from_raw_parts_mut(op.get().add((row0[si] + i) * n_head * hd), n_head * hd)
                };
                let mut d0 = 0;
                #[cfg(target_arch = "x86_64")]
                if wide_single {
                    while d0 + 16 <= hd {
                        if d0 + 32 <= hd {
                            for j in 0..t_len.div_ceil(BLOCK_SIZE) {
                                prefetch(kv.values(g, d0 + 16, 16, j));
                            }
                        }
                        for (c, hs) in head_chunks.iter().enumerate() {
                            // Safety: AVX-512 checked.
                            unsafe {
                                by_count!(
                                    avx512::pv16_single,
                                    hs.len(),
                                    |k: usize| ps(hs[k]),
                                    outs,
                                    kv,
                                    g,
                                    d0
                                )
                            };
                            for (k, o) in outs.iter().take(hs.len()).enumerate() {
                                let h = g * group + 4 * c + k;
                                orow[h * hd + d0..h * hd + d0 + 16].copy_from_slice(o);
                            }
                        }
                        d0 += 16;
                    }
                }
                for (k, h) in heads.enumerate() {
                    for d in d0..hd {
                        let run = |j: usize| kv.value_run(g, d, j);
                        // The KV length ggml multiplies is padded to 256 cells: always 16-aligned.
                        orow[h * hd + d] = if tiled {
                            dot_f16_tiled_paged(run, ps(k))
                        } else {
                            dot_f16_single_paged(run, ps(k), padded.div_ceil(64) * 64)
                        };
                    }
                }
            },
        )
    };
    // New tokens `tokens` of a sequence against KV head `g`, AVX-512 (`wide_tiles`): the
    // queries of all of them (the group's heads of each token) share every K and V load, six
    // at a time through the tile kernels; each output sees the fmas of `one_token`'s
    // tinyBLAS order.
    #[cfg(target_arch = "x86_64")]
    let tile_of_tokens = |si: usize, tokens: std::ops::Range<usize>, g: usize, scratch: &mut [f32]| {
        fast(
            #[inline(always)]
            || {
                let SeqAttn { q, kv, pos0, .. } = seqs[si];
                let (i0, nq) = (tokens.start, tokens.len() * group);
                // Query `qi` is head `g·group + qi % group` of token `i0 + qi / group`.
                let t_len = |qi: usize| pos0 + i0 + qi / group + 1;
                let t0 = |qi: usize| window.map_or(0, |w| t_len(qi).saturating_sub(w));
                let t_hi = pos0 + tokens.end;
                let row = t_hi.div_ceil(16) * 16;
                let (q16, rest) = scratch[..nq * (hd + 2 * row)].split_at_mut(nq * hd);
                let (w, p16) = rest.split_at_mut(nq * row);
                for (qi, qd) in q16.chunks_exact_mut(hd).enumerate() {
                    let (i, h) = (i0 + qi / group, g * group + qi % group);
                    round_to_f16(&q[(i * n_head + h) * hd..][..hd], qd);
                }
                let q16 = &*q16;
                let qs = |qi: usize| &q16[qi * hd..(qi + 1) * hd];
                w.fill(f32::NEG_INFINITY);
                let mut block = [[0f32; 16]; 6];
                // From the first query's window start (the earliest); each query keeps its own range.
                let mut t = t0(0) & !15;
                while t < t_hi {
                    if t + 16 < t_hi {
                        prefetch(kv.keys(g, t + 16, 16));
                    }
                    for c0 in (0..nq).step_by(6) {
                        let n = (nq - c0).min(6);
                        // Safety: AVX-512 checked (`wide_tiles`); hd a multiple of 16; t of 16 and the
                        // chunk's keys are stored (blocks are whole chunks).
                        unsafe { by_count!(avx512::kq16_tile, n, |k: usize| qs(c0 + k), block, kv, g, t) };
                        for (k, s) in block.iter().take(n).enumerate() {
                            let qi = c0 + k;
                            put_scores(&mut w[qi * row + t..], s, t, (t0(qi), t_len(qi)), scale);
                        }
                    }
                    t += 16;
                }
                for (qi, (wq, pq)) in w.chunks_exact(row).zip(p16.chunks_exact_mut(row)).enumerate() {
                    let own = t_len(qi).div_ceil(16) * 16;
                    softmax_f16(&wq[..own], &mut pq[..own], var);
                    // Past its own positions a row weighs the tile's later tokens by exact zeros (their
                    // values are stored and finite), which leaves every sum as its own positions make it.
                    pq[own..].fill(0.0);
                }
                let p16 = &*p16;
                let ps = |qi: usize| &p16[qi * row..qi * row + t_hi];
                for d0 in (0..hd).step_by(16) {
                    for c0 in (0..nq).step_by(6) {
                        let n = (nq - c0).min(6);
                        // Safety: AVX-512 checked; the view holds positions `0..t_hi`, dims to `hd`.
                        unsafe { by_count!(avx512::pv16_tile, n, |k: usize| ps(c0 + k), block, kv, g, d0) };
                        for (k, o) in block.iter().take(n).enumerate() {
                            let qi = c0 + k;
                            let (i, h) = (i0 + qi / group, g * group + qi % group);
                            // Safety: this task alone writes its queries' slices of these rows.
                            let dst = unsafe {
                                std::slice::from_raw_parts_mut(
                                    op.get().add(((row0[si] + i) * n_head + h) * hd + d0),
                                    16,
                                )
                            };
                            dst.copy_from_slice(o);
                        }
                    }
                }
            },
        )
    };
    let task = |task: usize, slot: usize| {
        let (si, tokens, g) = locate(task);
        // Safety: the task in `slot` of its wave alone uses that slot's `per_task` values, and
        // writes each before reading it.
        let scratch = unsafe { std::slice::from_raw_parts_mut(sp.get().add(slot * per_task), per_task) };
        #[cfg(target_arch = "x86_64")]
        if seqs[si].len > 1 && wide_tiles {
            return tile_of_tokens(si, tokens, g, scratch);
        }
        for i in tokens {
            one_token(si, i, g, scratch);
        }
    };
    // Longest first (by positions attended), so no long task is left for the end of the pass
    // while the other cores idle: sequences of a step sit at very different positions.
    let mut order: Vec<u32> = (0..n_tasks as u32).collect();
    let t_len_of = |task: usize| {
        let (si, tokens, _) = locate(task);
        seqs[si].pos0 + tokens.end
    };
    order.sort_by_key(|&t| std::cmp::Reverse(t_len_of(t as usize)));
    for w0 in (0..n_tasks).step_by(wave) {
        pool::run(wave.min(n_tasks - w0), &|it| {
            fast(
                #[inline(always)]
                || task(order[w0 + it] as usize, it),
            )
        });
    }
    // Safety: the tasks wrote every value: each (token, KV head) all `hd` outputs of its
    // group's heads (the tile kernels in steps of 16, or the wide loop up to a multiple of 16
    // and the scalar loop the rest).
    unsafe { out.set_len(n_rows * n_head * hd) };
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn register_tree_sum_is_the_scalar_one() {
        if !avx512::available() {
            return;
        }
        let mut s = 3u32;
        for _ in 0..1000 {
            let a: [f32; 16] = std::array::from_fn(|_| {
                s = s.wrapping_mul(1664525).wrapping_add(1013904223);
                ((s >> 8) as f32 / (1 << 24) as f32 - 0.5) * 1e3
            });
            // Safety: AVX-512 checked.
            let v = unsafe { avx512::reduce16(std::arch::x86_64::_mm512_loadu_ps(a.as_ptr())) };
            assert_eq!(v.to_bits(), reduce16(&a).to_bits());
        }
    }
}
