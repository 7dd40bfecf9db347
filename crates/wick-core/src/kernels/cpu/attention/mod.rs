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
//!
//! aarch64 follows llama.cpp's NEON build (armv8.2-a+dotprod, no FP16 arithmetic): `K·Q`
//! always in `ggml_vec_dot_f16`'s NEON order (4 accumulators of 4 lanes over steps of 16,
//! folded (a0+a2)+(a1+a3), `vaddvq_f32`, the n % 16 tail in f64); softmax with the 4-lane
//! `expf`, one `vaddvq_f32` per 4 in f64; `V·P` for one new token in that NEON order on f16
//! weights, for several in tinyBLAS's NEON order (4 lanes over chunks of 4, `vaddvq_f32`) on
//! the f32 weights unrounded (`p_in_f16`, `kq_tiled`).
//!
//! Layout (as ggml's `ops.cpp` has one-chunk and tiled flash attention): `Plan` here decides a
//! pass's tasks (paths, tiles, scratch, order); `single.rs` runs one new token per task,
//! `tiled.rs` a tile of new tokens per task (AVX-512); `dots.rs` and `avx512.rs` hold the dots.

#[cfg(target_arch = "x86_64")]
pub mod avx512;
mod bidirectional;
mod dots;
#[cfg(target_arch = "aarch64")]
mod neon_dots;
#[cfg(test)]
mod reference;

use std::ops::Range;

use half::f16;

pub use self::bidirectional::attention as bidirectional;
use crate::cache::PagedView;
use crate::kernels::cpu::blocks::reduce16;
use crate::kernels::cpu::expf::{exp_variant, ggml_expf, vector_sum, ExpVariant};
use crate::kernels::cpu::feats::with_avx2_codegen;
use crate::runtime::pool::{self, SyncPtr};

/// `x` rounded to f16 and back (the query as ggml converts it to the cache's type).
use crate::kernels::cpu::float_dots::round_to_f16_into as round_to_f16;

/// Attention weights as llama.cpp's CPU `soft_max` makes them, rounded to f16 for the V
/// product where ggml's V product takes f16 (`p_in_f16`): `p = expf(w − max w)` over whole
/// vectors (masked −∞ → exactly 0), summed one horizontal sum per vector in f64
/// (`_mm512_reduce_add_ps` trees of 16 on x86, `vaddvq_f32` of 4 on aarch64), then `p·(1/Σ)`.
fn softmax_f16(w: &[f32], p: &mut [f32], var: ExpVariant, round: bool) {
    #[cfg(target_arch = "x86_64")]
    if var == ExpVariant::Avx512 {
        // SAFETY: `Avx512` is only detected with AVX-512 F and DQ.
        return unsafe { avx512::softmax_f16(w, p) };
    }
    let max = w.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0f64;
    let width = if var == ExpVariant::Neon { 4 } else { 16 };
    for (pc, wc) in p.chunks_mut(width).zip(w.chunks(width)) {
        let mut lanes = [0f32; 16];
        for ((e, &x), l) in pc.iter_mut().zip(wc).zip(lanes.iter_mut()) {
            *e = ggml_expf(x - max, var);
            *l = *e;
        }
        sum += if var == ExpVariant::Neon { vector_sum(var, &lanes) } else { reduce16(&lanes) } as f64;
    }
    let inv = (1.0 / sum) as f32;
    for e in p.iter_mut() {
        *e *= inv;
        if round {
            *e = f16::from_f32(*e).to_f32();
        }
    }
}

/// Whether ggml's V product takes the attention weights as f16 (`tiled`: several new tokens).
/// x86: always (`ggml_vec_dot_f16`, and tinyBLAS's F16 kernels take f16 operands); aarch64
/// without FP16 arithmetic: for one new token, while several go through tinyBLAS's
/// f16 × f32 kernel on the f32 weights as they are.
#[inline(always)]
fn p_in_f16(tiled: bool) -> bool {
    !(cfg!(target_arch = "aarch64") && tiled)
}

/// Whether `K·Q` of several new tokens (`tiled`) takes tinyBLAS's order. x86: yes. aarch64: no,
/// `ggml_vec_dot_f16`'s as for one token — the permuted queries are not contiguous, so ggml
/// converts them to f16 first, and tinyBLAS there has no f16 × f16 kernel without FP16
/// arithmetic.
#[inline(always)]
fn kq_tiled(tiled: bool) -> bool {
    tiled && !cfg!(target_arch = "aarch64")
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

mod quant_kv;
mod single;
#[cfg(target_arch = "x86_64")]
mod tiled;

/// Asks for `data`'s cache lines ahead of use.
/// Into L2, not L1: a chunk ahead is 32 lines, and T0 prefetches of that many hold the L1's
/// miss buffers until they land, stalling the loads in use (a step's KV from DRAM: T1 beat
/// both T0 and no prefetch on the 96-layer bench, benches/RESULTS.md).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn prefetch(data: &[f16]) {
    for line in data.chunks(32) {
        // SAFETY: a prefetch of a valid address has no effect on memory.
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T1 }>(line.as_ptr() as *const i8)
        };
    }
}

/// Sixteen scores `s` of positions `t..t + 16` into `w` (the row's slice from `t`), scaled; those
/// outside the query's positions `lo..hi` stay masked.
#[cfg(target_arch = "x86_64")]
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
    /// Each new token sees the positions up to its own (else all of the step's: a
    /// bidirectional embedding model, whose whole input is one step).
    pub causal: bool,
}

impl<'a> SeqAttn<'a> {
    /// A causal sequence's part.
    pub fn causal(q: &'a [f32], kv: &'a PagedView<'a>, len: usize, pos0: usize) -> Self {
        Self { q, kv, len, pos0, causal: true }
    }

    /// Positions new token `i` attends.
    #[inline(always)]
    fn seen(&self, i: usize) -> usize {
        if self.causal {
            self.pos0 + i + 1
        } else {
            self.pos0 + self.len
        }
    }
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
    attend_many(&[SeqAttn::causal(q, kv, len, pos0)], n_head, scale, window)
}

/// Scratch of one `attend_many` pass at most (more only when a wave of 4 tasks per thread needs it).
const SCRATCH_BYTES: usize = 8 << 20;

/// New tokens of one sequence per task in the multi-token AVX-512 path: the query heads of
/// all of them share each K and V load (a long prompt streamed its K/V from DRAM once per
/// token and head before, most of its prefill time).
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
    run_plan(Plan::new(seqs, n_head, scale, window, scratch_bytes, true))
}

/// `attend_many` with one new token per task on every path (no tiles): what the tiles must
/// reproduce bit for bit.
#[cfg(test)]
pub(crate) fn attend_one_token_tasks(
    seqs: &[SeqAttn<'_>],
    n_head: usize,
    scale: f32,
    window: Option<usize>,
) -> Vec<f32> {
    run_plan(Plan::new(seqs, n_head, scale, window, SCRATCH_BYTES, false))
}

fn run_plan(plan: Option<Plan<'_, '_>>) -> Vec<f32> {
    let Some(plan) = plan else { return Vec::new() };
    let n_head = plan.n_head;
    let mut out: Vec<f32> = Vec::with_capacity(plan.n_rows * n_head * plan.hd);
    let op = SyncPtr(out.as_mut_ptr());
    // Tasks run in waves that share one scratch slot each (`Plan::wave`).
    let mut scratch_all: Vec<f32> = Vec::with_capacity(plan.wave * plan.per_task);
    let sp = SyncPtr(scratch_all.as_mut_ptr());
    let order = plan.order();
    for w0 in (0..plan.n_tasks).step_by(plan.wave) {
        pool::run(plan.wave.min(plan.n_tasks - w0), &|it| {
            with_avx2_codegen(
                #[inline(always)]
                || plan.run_task(order[w0 + it] as usize, it, sp, op),
            )
        });
    }
    // SAFETY: the tasks wrote every value: each (token, KV head) all `hd` outputs of its
    // group's heads (the tile kernels in steps of 16, or the wide loop up to a multiple of 16
    // and the scalar loop the rest), and `out` was allocated for `n_rows · n_head · hd`.
    unsafe { out.set_len(plan.n_rows * n_head * plan.hd) };
    out
}

/// What one `attend_many` pass runs, decided before any task starts: which path each
/// sequence takes (tiles of new tokens through the AVX-512 tile kernels, or one token per
/// task), where each sequence's tasks and output rows start, and how much scratch a task and
/// a wave of tasks hold.
struct Plan<'s, 'a> {
    seqs: &'s [SeqAttn<'a>],
    n_head: usize,
    n_kv: usize,
    hd: usize,
    /// Query heads per KV head.
    group: usize,
    scale: f32,
    window: Option<usize>,
    var: ExpVariant,
    /// Multi-token sequences take `tile_of_tokens` (AVX-512, `hd` a multiple of 16).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    wide_tiles: bool,
    /// Tokens per task of each sequence.
    tile: Vec<usize>,
    /// Task index where each sequence's tasks (one per tile and KV head) start.
    starts: Vec<usize>,
    /// Output row of each sequence's first token.
    row0: Vec<usize>,
    n_tasks: usize,
    n_rows: usize,
    /// Scratch values of one task: q (as f16, the cache's dot type in ggml), the scores and
    /// the weights of each of its queries; each part is written before use.
    per_task: usize,
    /// Tasks per wave, each with its own `per_task` slot: a scratch per task would be
    /// len² · n_kv · group values for a long prompt in one pass (34 GB at 16k tokens of LFM2-350M).
    wave: usize,
    /// A KV group's query heads `0..group`, taken four per kernel call (the AVX-512 paths).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    all_heads: Vec<usize>,
}

impl<'s, 'a> Plan<'s, 'a> {
    fn new(
        seqs: &'s [SeqAttn<'a>],
        n_head: usize,
        scale: f32,
        window: Option<usize>,
        scratch_bytes: usize,
        tiles: bool,
    ) -> Option<Self> {
        let first = seqs.first()?;
        let var = exp_variant();
        let (n_kv, hd) = (first.kv.n_kv_head, first.kv.head_dim);
        let group = n_head / n_kv;
        let threads = pool::global().threads();
        #[cfg(target_arch = "x86_64")]
        let wide_tiles = tiles && hd.is_multiple_of(16) && avx512::available();
        #[cfg(not(target_arch = "x86_64"))]
        let wide_tiles = {
            let _ = tiles; // the tiles are AVX-512 kernels
            false
        };
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
        let mut starts = Vec::with_capacity(seqs.len());
        let mut row0 = Vec::with_capacity(seqs.len());
        let (mut n_tasks, mut n_rows) = (0, 0);
        for (s, &t) in seqs.iter().zip(&tile) {
            starts.push(n_tasks);
            row0.push(n_rows);
            n_tasks += s.len.div_ceil(t) * n_kv;
            n_rows += s.len;
        }
        let per_task = tile.iter().max().unwrap_or(&1) * per_token;
        let wave = (scratch_bytes / 4 / per_task.max(1)).max(4 * threads).clamp(1, n_tasks.max(1));
        Some(Plan {
            seqs,
            n_head,
            n_kv,
            hd,
            group,
            scale,
            window,
            var,
            wide_tiles,
            tile,
            starts,
            row0,
            n_tasks,
            n_rows,
            per_task,
            wave,
            all_heads: (0..group).collect(),
        })
    }

    /// A task's sequence, its tokens within it, and its KV head.
    #[inline(always)]
    fn locate(&self, task: usize) -> (usize, Range<usize>, usize) {
        let si = self.starts.partition_point(|&s| s <= task) - 1;
        let (k, t) = ((task - self.starts[si]) / self.n_kv, self.tile[si]);
        (si, k * t..(k * t + t).min(self.seqs[si].len), (task - self.starts[si]) % self.n_kv)
    }

    /// Tasks longest first (by positions attended), so no long task is left for the end of the
    /// pass while the other cores idle: sequences of a step sit at very different positions.
    fn order(&self) -> Vec<u32> {
        let mut order: Vec<u32> = (0..self.n_tasks as u32).collect();
        order.sort_by_key(|&t| {
            let (si, tokens, _) = self.locate(t as usize);
            std::cmp::Reverse(self.seqs[si].seen(tokens.end - 1))
        });
        order
    }

    /// Task `task` with scratch slot `slot` of its wave, writing into the output at `op`.
    #[inline(always)]
    fn run_task(&self, task: usize, slot: usize, sp: SyncPtr<f32>, op: SyncPtr<f32>) {
        let (si, tokens, g) = self.locate(task);
        // SAFETY: the scratch holds `wave · per_task` values and `slot < wave`; the task in
        // `slot` of its wave alone uses that slot's `per_task` values, and writes each before
        // reading it.
        let scratch =
            unsafe { std::slice::from_raw_parts_mut(sp.get().add(slot * self.per_task), self.per_task) };
        #[cfg(target_arch = "x86_64")]
        if self.seqs[si].len > 1 && self.wide_tiles {
            return self.tile_of_tokens(si, tokens, g, scratch, op);
        }
        for i in tokens {
            self.one_token(si, i, g, scratch, op);
        }
    }
}

/// What the attention tests share: random numbers and a pool filled with them.
#[cfg(test)]
pub(crate) mod testing {
    use candle_core::Device;

    use crate::cache::{KvPool, KvTypes, LayerKind, SeqCache, BLOCK_SIZE};
    use crate::runtime::device::Placement;

    pub fn rng(seed: u32) -> impl FnMut() -> f32 {
        let mut s = seed;
        move || {
            s = s.wrapping_mul(1664525).wrapping_add(1013904223);
            (s >> 8) as f32 / (1 << 24) as f32 - 0.5
        }
    }

    /// A pool stored as `types` holding `t` random positions for one sequence, its blocks out
    /// of order, and NaN in the rest of its last block (what a block's earlier owner may have
    /// left: positions past the sequence must not reach its outputs).
    pub fn filled(
        types: KvTypes,
        n_kv: usize,
        hd: usize,
        t: usize,
        r: &mut impl FnMut() -> f32,
    ) -> (KvPool, SeqCache) {
        let layout = [LayerKind::Attention { n_kv_head: n_kv, head_dim: hd }];
        let cpu = Placement::for_device(&Device::Cpu);
        let mut pool = KvPool::new_on(&layout, t.div_ceil(BLOCK_SIZE) + 2, true, &cpu, types).unwrap();
        let mut spacer = pool.new_seq();
        pool.reserve(&mut spacer, 1).unwrap();
        let mut seq = pool.new_seq();
        let whole = t.div_ceil(BLOCK_SIZE) * BLOCK_SIZE;
        pool.reserve(&mut seq, whole).unwrap();
        let val = |i: usize, x: f32| if i < t * n_kv * hd { x } else { f32::NAN };
        let k: Vec<f32> = (0..whole * n_kv * hd).map(|i| val(i, r() * 3.0)).collect();
        let v: Vec<f32> = (0..whole * n_kv * hd).map(|i| val(i, r())).collect();
        pool.write(0, &seq, 0, &k, &v).unwrap();
        (pool, seq)
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;

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
            // SAFETY: AVX-512 checked.
            let v = unsafe { avx512::reduce16(std::arch::x86_64::_mm512_loadu_ps(a.as_ptr())) };
            assert_eq!(v.to_bits(), reduce16(&a).to_bits());
        }
    }
}
