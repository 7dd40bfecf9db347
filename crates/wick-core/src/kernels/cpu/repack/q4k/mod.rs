//! Q4_K panels: on x86 as compact as the GGUF blocks (2304 bytes per block of 16 columns, the
//! 16 × 144 of GGUF; decode streams every byte once, so size is speed). Per block of 256 inputs
//! (8 sub-blocks of 32), a panel holds for its 16 columns `d` and `dmin` as f16 (64 bytes), then
//! the scales and mins of each sub-block pair p (`SCALES` bytes each, below), then 32 groups of
//! 64 bytes, each 64-byte aligned: group 8p + t has, for column c, bytes 4c..4c+4 = the block's
//! quant bytes 32p+4t..+4 (low nibbles: sub-block 2p elements 4t..4t+4; high: sub-block 2p+1).
//!
//! Pair p's scales and mins are 64 six-bit values v: v[c] the scale of sub-block 2p for column
//! c, v[16 + c] that of 2p+1, v[32 + 2c + h] column c's min of sub-block 2p + h. On x86 they
//! take 48 bytes, as in GGUF: byte i < 32 holds the low four bits of v[i] (low nibble) and of
//! v[32 + i] (high nibble); byte 32 + k the top two bits of v[k], v[16 + k], v[32 + k] and
//! v[48 + k] at bits 0, 2, 4 and 6. A few vector ops unpack them (`expand_avx512`,
//! `expand_avx2`); AVX-512 tiles of more than four rows unpack a panel's once per pass
//! (`vnni_unpacked`). aarch64 keeps the 64 values as bytes: its tiles read four columns at a
//! time, where unpacking would cost more than the 64 bytes a block it saves.
//!
//! Per output and block, as `quants::dot_q4k` (ggml's repacked Q4_K GEMM / GEMV):
//! `isum_j = s_j·Σ q·y`, `imin_j = m_j·Σ y` over sub-block j (exact); the GEMM rows fold each
//! pair of sub-blocks with `acc = fma(float(isum), d·dy, acc)` (and the same for the mins with
//! dmin), the GEMV rows the whole block at once; the output is `acc − acc_min`. On aarch64
//! (ggml's 8x4 repack with dotprod, GEMV and GEMM alike) every row folds each pair into `acc`
//! by fma and subtracts the block's `float(Σ imin)·(dmin·dy)` once (`fold`).

use candle_core::quantized::GgmlDType;

#[cfg(target_arch = "aarch64")]
mod neon;
#[cfg(target_arch = "x86_64")]
mod x86;
#[cfg(target_arch = "x86_64")]
use x86::{tile_avx2, tile_vnni, vnni_unpacked, PASSES};

use super::panel::PANEL;
use super::{every_isa, row_slices, tile, PanelType, TileFn, TileKernels};
use crate::error::Result;
use crate::kernels::cpu::blocks::{f16_at, scale_min, Q4K, QK_K};
use crate::kernels::cpu::feats::Isa;
use crate::kernels::cpu::matmul::RowPos;
use crate::kernels::cpu::q8::{quantize_q8k, quantize_rows, Act256};

/// `d` and `dmin` (f16) of the 16 columns.
const HEAD: usize = 2 * 2 * PANEL;
/// Bytes of one sub-block pair's 64 scales and mins.
#[cfg(not(target_arch = "aarch64"))]
const SCALES: usize = 48;
#[cfg(target_arch = "aarch64")]
const SCALES: usize = 64;
/// Bytes of one block of one panel.
pub const BLOCK_BYTES: usize = HEAD + 4 * SCALES + 32 * 64;

/// Where pair p's scales and mins start.
const fn scales_at(p: usize) -> usize {
    HEAD + SCALES * p
}
/// Sub-block j's 16 scales (aarch64's byte layout).
#[cfg(target_arch = "aarch64")]
const fn scale_at(j: usize) -> usize {
    scales_at(j / 2) + PANEL * (j % 2)
}
/// Pair p's 16 (min, min) byte pairs (aarch64's byte layout).
#[cfg(target_arch = "aarch64")]
const fn mins_at(p: usize) -> usize {
    scales_at(p) + 2 * PANEL
}
/// Quant group g (of 32; pair g / 8, step g % 8).
const fn quants_at(g: usize) -> usize {
    HEAD + 4 * SCALES + 64 * g
}

/// Value i of a pair's scales and mins (`s`: its `SCALES` bytes).
#[inline(always)]
fn scale_get(s: &[u8], i: usize) -> u8 {
    if cfg!(target_arch = "aarch64") {
        return s[i];
    }
    let low = (s[i % 32] >> (4 * (i / 32))) & 0x0F;
    let top = (s[32 + i % 16] >> (2 * (i / 16))) & 0x03;
    low | top << 4
}

/// Sets value i of a pair's scales and mins to `v` (< 64), leaving the others.
fn scale_put(s: &mut [u8], i: usize, v: u8) {
    if cfg!(target_arch = "aarch64") {
        s[i] = v;
        return;
    }
    let (at, shift) = (i % 32, 4 * (i / 32));
    s[at] = (s[at] & !(0x0F << shift)) | (v & 0x0F) << shift;
    let (at, shift) = (32 + i % 16, 2 * (i / 16));
    s[at] = (s[at] & !(0x03 << shift)) | (v >> 4 & 0x03) << shift;
}

/// GGUF Q4_K rows (`n` rows of `k / 256` blocks of 144 bytes) → panels.
fn pack(raw: &[u8], n: usize, k: usize, out: &mut [u8]) {
    super::panel::pack_blocks(raw, n, k, QK_K, Q4K::BYTES, BLOCK_BYTES, out, |panel, b, c, blk| {
        let dst = &mut panel[b * BLOCK_BYTES..][..BLOCK_BYTES];
        dst[2 * c..2 * c + 2].copy_from_slice(&blk[Q4K::D..Q4K::D + 2]);
        dst[2 * PANEL + 2 * c..2 * PANEL + 2 * c + 2].copy_from_slice(&blk[Q4K::DMIN..Q4K::DMIN + 2]);
        let sm: [(u8, u8); 8] = std::array::from_fn(|j| scale_min(&blk[Q4K::SCALES..Q4K::QS], j));
        for p in 0..4 {
            let s = &mut dst[scales_at(p)..][..SCALES];
            for h in 0..2 {
                scale_put(s, PANEL * h + c, sm[2 * p + h].0);
                scale_put(s, 2 * PANEL + 2 * c + h, sm[2 * p + h].1);
            }
        }
        for g in 0..32 {
            dst[quants_at(g) + 4 * c..][..4].copy_from_slice(&blk[Q4K::QS + 4 * g..][..4]);
        }
    })
}

/// Column `c`'s GGUF block `b` back out of a panel (`pack`'s inverse; the 6-bit scales and
/// mins packed again as ggml's 12 bytes, every bit of which they fill).
fn unpack(panel: &[u8], _nb: usize, b: usize, c: usize, blk: &mut [u8]) {
    let src = &panel[b * BLOCK_BYTES..][..BLOCK_BYTES];
    blk[Q4K::D..Q4K::D + 2].copy_from_slice(&src[2 * c..2 * c + 2]);
    blk[Q4K::DMIN..Q4K::DMIN + 2].copy_from_slice(&src[2 * PANEL + 2 * c..2 * PANEL + 2 * c + 2]);
    let pair = |j: usize| &src[scales_at(j / 2)..][..SCALES];
    let s = |j: usize| scale_get(pair(j), PANEL * (j % 2) + c);
    let m = |j: usize| scale_get(pair(j), 2 * PANEL + 2 * c + j % 2);
    let sc = &mut blk[Q4K::SCALES..Q4K::QS];
    for j in 0..4 {
        sc[j] = s(j) | ((s(j + 4) >> 4) << 6);
        sc[j + 4] = m(j) | ((m(j + 4) >> 4) << 6);
        sc[j + 8] = (s(j + 4) & 0x0F) | ((m(j + 4) & 0x0F) << 4);
    }
    for g in 0..32 {
        blk[Q4K::QS + 4 * g..][..4].copy_from_slice(&src[quants_at(g) + 4 * c..][..4]);
    }
}

/// Q4_K's entry of `super::TYPES`.
pub(super) const TYPE: PanelType = PanelType {
    dtype: GgmlDType::Q4K,
    qk: QK_K,
    block_bytes: BLOCK_BYTES,
    packs_on: every_isa,
    pack,
    unpack,
    tiles,
};

/// Activations as q8_K blocks, and the tile over them. ggml's repacked Q4_K runs rows in
/// groups of four through its GEMM (per sub-block pair) and the remaining `len % 4` through
/// its GEMV (per block).
fn tiles(isa: Isa, xs: &[f32], k: usize, rows: &[RowPos]) -> Result<Box<TileFn>> {
    let acts = quantize_rows(xs, k, quantize_q8k);
    let pairs: Vec<bool> = rows.iter().map(|p| p.in_gemm_group()).collect();
    #[cfg(target_arch = "x86_64")]
    let pass = PASSES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    Ok(Box::new(move |panel, r0, n_rows, out, ldo| {
        let (a, g) = (row_slices(&acts[r0..r0 + n_rows]), &pairs[r0..r0 + n_rows]);
        #[cfg(target_arch = "x86_64")]
        if isa == Isa::Avx512Vnni && n_rows > 4 {
            // SAFETY: as in `tile`: `isa` says AVX-512 VNNI is present, every row was quantized
            // from the weight's `k` inputs, and the driver owns out[r·ldo..+16] for each row.
            return unsafe { vnni_unpacked(pass, panel, &a[..n_rows], g, out, ldo) };
        }
        tile::<Kernels>(isa, panel, &a[..n_rows], g, out, ldo)
    }))
}

/// Q4_K's tile kernels; `pairs[r]`: whether row r folds per sub-block pair (ggml's GEMM) or
/// per block (GEMV).
struct Kernels;

impl TileKernels for Kernels {
    type Act = Act256;
    const BLOCK_BYTES: usize = BLOCK_BYTES;

    /// Four rows at a time: each row needs six registers per step.
    #[inline(always)]
    #[cfg(target_arch = "x86_64")]
    unsafe fn vnni(panel: &[u8], nb: usize, acts: &[&[Act256]], pairs: &[bool], out: *mut f32, ldo: usize) {
        debug_assert!(pairs.len() == acts.len());
        for (i, four) in acts.chunks(4).enumerate() {
            let next = super::panel::next_panel(i, acts.len(), nb, BLOCK_BYTES);
            by_rows!(tile_vnni, four, &pairs[4 * i..], panel, nb, out.add(4 * i * ldo), ldo, next, None)
        }
    }

    #[inline(always)]
    #[cfg(target_arch = "x86_64")]
    unsafe fn avx2(panel: &[u8], nb: usize, acts: &[&[Act256]], pairs: &[bool], out: *mut f32, ldo: usize) {
        debug_assert!(pairs.len() == acts.len());
        for (i, four) in acts.chunks(4).enumerate() {
            by_rows!(tile_avx2, four, &pairs[4 * i..], panel, nb, out.add(4 * i * ldo), ldo)
        }
    }

    #[inline(always)]
    #[cfg(target_arch = "aarch64")]
    unsafe fn neon<const DOT: bool>(
        panel: &[u8],
        nb: usize,
        acts: &[&[Act256]],
        pairs: &[bool],
        out: *mut f32,
        ldo: usize,
    ) {
        debug_assert!(pairs.len() == acts.len());
        crate::kernels::cpu::arm::with_dot::<DOT, _>(
            #[inline(always)]
            || {
                in_row_pairs!(acts, out, ldo, |rows, o, i| neon::tile_neon::<_, DOT>(
                    rows,
                    &pairs[2 * i..],
                    panel,
                    nb,
                    o,
                    ldo
                ))
            },
        )
    }

    /// Row pairs through `smmla`, an odd last row through the dot-product tile.
    #[inline(always)]
    #[cfg(target_arch = "aarch64")]
    unsafe fn i8mm(panel: &[u8], nb: usize, acts: &[&[Act256]], pairs: &[bool], out: *mut f32, ldo: usize) {
        debug_assert!(pairs.len() == acts.len());
        crate::kernels::cpu::arm::with_i8mm(
            #[inline(always)]
            || {
                for (i, two) in acts.chunks(2).enumerate() {
                    let (o, g) = (out.add(2 * i * ldo), &pairs[2 * i..]);
                    match two.len() {
                        1 => neon::tile_neon::<1, true>([two[0]], g, panel, nb, o, ldo),
                        _ => neon::tile_i8mm([two[0], two[1]], g, panel, nb, o, ldo),
                    }
                }
            },
        )
    }

    fn scalar(panel: &[u8], nb: usize, acts: &[&[Act256]], pairs: &[bool], out: *mut f32, ldo: usize) {
        debug_assert!(pairs.len() == acts.len());
        tile_scalar(panel, nb, acts, pairs, out, ldo)
    }
}

/// The float steps shared by every instruction set, on one column's integer sums (each
/// argument is one of the sums or scales ggml folds there; a struct would only rename them).
/// x86 (ggml's 8x8 repack): GEMM rows (`pair`) fold each sub-block pair, GEMV rows the block,
/// the mins into their own sum by fma. aarch64 (ggml's 8x4 repack, GEMV and GEMM alike): each
/// pair by fma into `acc`, then `acc − float(Σ mins)·(dmin·dy)` per block (`acc_min` stays 0).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn fold(
    pair: bool,
    isum: [i32; 4],
    imin: [i32; 4],
    d: f32,
    dmin: f32,
    dy: f32,
    acc: &mut f32,
    acc_min: &mut f32,
) {
    if cfg!(target_arch = "aarch64") {
        for s in isum {
            *acc = (s as f32).mul_add(d * dy, *acc);
        }
        *acc -= imin.iter().sum::<i32>() as f32 * (dmin * dy);
    } else if pair {
        for p in 0..4 {
            *acc = (isum[p] as f32).mul_add(d * dy, *acc);
            *acc_min = (imin[p] as f32).mul_add(dmin * dy, *acc_min);
        }
    } else {
        *acc = (isum.iter().sum::<i32>() as f32).mul_add(d * dy, *acc);
        *acc_min = (imin.iter().sum::<i32>() as f32).mul_add(dmin * dy, *acc_min);
    }
}

fn tile_scalar(panel: &[u8], nb: usize, acts: &[&[Act256]], pairs: &[bool], out: *mut f32, ldo: usize) {
    for (r, a) in acts.iter().enumerate() {
        let (mut acc, mut acc_min) = ([0f32; PANEL], [0f32; PANEL]);
        for (b, blk) in panel.chunks_exact(BLOCK_BYTES).take(nb).enumerate() {
            let y = &a[b];
            for c in 0..PANEL {
                let (mut isum, mut imin) = ([0i32; 4], [0i32; 4]);
                for p in 0..4 {
                    let (mut even, mut odd) = (0i32, 0i32);
                    for t in 0..8 {
                        for u in 0..4 {
                            let q = blk[quants_at(8 * p + t) + 4 * c + u];
                            even += (q & 0x0F) as i32 * y.qs[64 * p + 4 * t + u] as i32;
                            odd += (q >> 4) as i32 * y.qs[64 * p + 32 + 4 * t + u] as i32;
                        }
                    }
                    let sc = &blk[scales_at(p)..][..SCALES];
                    let s = |h: usize| scale_get(sc, PANEL * h + c) as i32;
                    isum[p] = s(0) * even + s(1) * odd;
                    let m = |h: usize| scale_get(sc, 2 * PANEL + 2 * c + h) as i32;
                    imin[p] = m(0) * y.sums[2 * p] + m(1) * y.sums[2 * p + 1];
                }
                fold(
                    pairs[r],
                    isum,
                    imin,
                    f16_at(blk, 2 * c),
                    f16_at(blk, 2 * PANEL + 2 * c),
                    y.d,
                    &mut acc[c],
                    &mut acc_min[c],
                );
            }
        }
        for c in 0..PANEL {
            // SAFETY: the caller owns out[r·ldo..r·ldo + 16].
            unsafe { *out.add(r * ldo + c) = acc[c] - acc_min[c] };
        }
    }
}
