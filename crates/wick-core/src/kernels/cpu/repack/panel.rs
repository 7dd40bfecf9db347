//! What every panel layout shares: the panel width, how GGUF blocks are laid into panels, and
//! the register and prefetch helpers of the tile kernels.

/// Output columns per panel.
pub const PANEL: usize = 16;

/// Most independent integer accumulator chains per row (see `chains`).
#[cfg(target_arch = "x86_64")]
pub const CHAINS: usize = 4;

/// Accumulator chains per row for `R`-row tiles: enough independent `vpdpbusd`s in flight to
/// cover its latency (≈ 4–5 cycles at one per cycle), without running out of registers.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub const fn chains<const R: usize>() -> usize {
    match R {
        1 => 4,
        2 => 2,
        _ => 1,
    }
}

/// Tiles of at most this many rows prefetch their weights (`prefetch_stream`: Q8_0, Q4_K,
/// Q6_K): one-token decode streams every weight from memory once per step, where the hardware
/// prefetcher alone fell well short of the bandwidth on those layouts; wider tiles re-read
/// panels from L2, where prefetching only evicts. Q4_0's small blocks stream best without
/// (LFM2-350M shapes; figures in benches/RESULTS.md).
#[cfg(target_arch = "x86_64")]
pub const STREAM_ROWS: usize = 2;

/// Prefetches the `len` bytes `STREAM_AHEAD` bytes past `p` as non-temporal (into L1, kept out
/// of the outer caches: each line is read once), for the streamed tiles of at most
/// `STREAM_ROWS` rows (Q8_0, Q4_K, Q6_K; Q4_K one line per step, spread over the block).
/// In paired runs of LFM2.5-1.2B decode: Q8_0 ×1.12–1.18 over none (weights on anonymous
/// 2 MiB pages), ×1.04–1.07 mapped from the pack cache; Q4_K_M ×1.05–1.11 over the T0/T1
/// prefetch 8 KiB ahead it replaced (the 8B-A1B MoE ×0.96–1.04). A plain read of this
/// machine's memory gains 0–12 % the same way (`kernel_timing -- memory`; benches/RESULTS.md).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub unsafe fn prefetch_stream(p: *const u8, len: usize) {
    use std::arch::x86_64::*;
    const STREAM_AHEAD: usize = 4096;
    for l in (0..len).step_by(64) {
        _mm_prefetch::<_MM_HINT_NTA>(p.wrapping_add(STREAM_AHEAD + l) as *const i8);
    }
}

/// For tiles of more rows than `STREAM_ROWS`, which go over a panel several times (a row
/// chunk each) at compute speed: the first chunk pulls the same block of the next panel
/// (`next` bytes on) into L2 as it goes, so the next panel's first pass does not wait on DRAM.
/// Spread over the blocks, as a burst of prefetches stalls the load queue.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub unsafe fn prefetch_next_panel(block: *const u8, block_bytes: usize, next: usize) {
    use std::arch::x86_64::*;
    if next != 0 {
        for l in (0..block_bytes).step_by(64) {
            _mm_prefetch::<_MM_HINT_T1>(block.wrapping_add(next + l) as *const i8);
        }
    }
}

/// Bytes to the next panel for `prefetch_next_panel` (0 = none), for row chunk `chunk` of a
/// tile of `rows` rows over `nb` blocks.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub fn next_panel(chunk: usize, rows: usize, nb: usize, block_bytes: usize) -> usize {
    if chunk == 0 && rows > STREAM_ROWS {
        nb * block_bytes
    } else {
        0
    }
}

/// Sixteen f16 scales at `p` as f32.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub unsafe fn load_f16x16(p: *const u8) -> std::arch::x86_64::__m512 {
    use std::arch::x86_64::*;
    _mm512_cvtph_ps(_mm256_loadu_si256(p as *const __m256i))
}

/// Eight f16 scales at `p` as f32 (F16C).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub unsafe fn load_f16x8(p: *const u8) -> std::arch::x86_64::__m256 {
    use std::arch::x86_64::*;
    _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i))
}

/// Four activation bytes as one i32, for a `vpdpbusd` broadcast operand.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub unsafe fn bcast4(p: *const i8) -> i32 {
    std::ptr::read_unaligned(p as *const i32)
}

/// Row r's chains added up (exact: integers).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub unsafe fn sum_chains<const R: usize>(
    acc: &[[std::arch::x86_64::__m512i; R]; CHAINS],
    r: usize,
) -> std::arch::x86_64::__m512i {
    use std::arch::x86_64::*;
    let mut s = acc[0][r];
    for c in acc.iter().take(chains::<R>()).skip(1) {
        s = _mm512_add_epi32(s, c[r]);
    }
    s
}

/// Fills `out` (zeroed, `n.div_ceil(PANEL)` panels long) with the panels of an `[n, k]` weight,
/// calling `put(panel, b, c, src)` for each GGUF block `src` (`src_bytes` long, `qk` inputs) of
/// column `c` < 16 of each panel, block `b`. Columns past `n` stay zero. Panels are filled on
/// the pool: packing load time is mostly this.
#[allow(clippy::too_many_arguments)]
pub fn pack_blocks(
    raw: &[u8],
    n: usize,
    k: usize,
    qk: usize,
    src_bytes: usize,
    block_bytes: usize,
    out: &mut [u8],
    put: impl Fn(&mut [u8], usize, usize, &[u8]) + Sync,
) {
    use crate::runtime::pool::{self, SyncPtr};
    let nb = k / qk;
    let row_bytes = nb * src_bytes;
    let panel_bytes = nb * block_bytes;
    let out = &mut out[..n.div_ceil(PANEL) * panel_bytes];
    let base = SyncPtr(out.as_mut_ptr());
    pool::run(n.div_ceil(PANEL), &|p| {
        // SAFETY: panel p is bytes p·panel_bytes.. of `out` (in bounds: sliced above), written
        // by this task alone.
        let panel = unsafe { std::slice::from_raw_parts_mut(base.get().add(p * panel_bytes), panel_bytes) };
        for b in 0..nb {
            for c in 0..PANEL.min(n - p * PANEL) {
                put(panel, b, c, &raw[(p * PANEL + c) * row_bytes + b * src_bytes..][..src_bytes]);
            }
        }
    });
}
