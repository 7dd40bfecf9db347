//! Q8_0 panels, as compact as GGUF (34 bytes per column and block). Per block of 32 inputs, a
//! panel holds the 16 columns' scales as f16 (32 bytes), then eight 64-byte groups: group l has, for column c, bytes 4c..4c+4 = the block's quants
//! 4l..4l+4 with the sign bit flipped (`q + 128` as u8, the unsigned operand of `vpdpbusd`).
//! One group is one of ggml's 8 lanes for 16 columns (`vpdpbusd` lanes = columns).
//!
//! Per output, as `quants::dot_q8_0` (`ggml_vec_dot_q8_0_q8_0`): 8 float lanes, lane l
//! of block b gets `acc_l = fma(dw·dy, float(Σ_{t<4} q[4l+t]·y[4l+t]), acc_l)`, then ggml's
//! 8-lane tree sum. The integer lane sums are exact: with unsigned weights,
//! `Σ (q+128)·y − 128·Σ y`, the second term precomputed per activation block and lane
//! (`Act::off`) and used as the `vpdpbusd` accumulator's starting value. On aarch64 each
//! output follows ggml's Q8_0 repack there instead (`block_q8_0x4`, armv8.2 dotprod: every Q8_0
//! weight of 4k rows, a tied output head included): per block the exact Σ of all 32, `dw·dy`,
//! GEMV rows `fma(float(Σ), d, acc)`, GEMM rows (groups of four) `acc + d·float(Σ)`, as
//! `quants::dot_q8_0_repacked`; Q5_0 is not packed there (ggml does not repack it on ARM).

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

use candle_core::quantized::GgmlDType;

use super::panel::PANEL;
#[cfg(not(target_arch = "aarch64"))]
use super::quantized_tiles;
use super::{every_isa, PanelType, TileFn, TileKernels};
use crate::error::Result;
#[cfg(not(target_arch = "aarch64"))]
use crate::kernels::cpu::blocks::hsum8;
use crate::kernels::cpu::blocks::{f16_at, u32_at, Q5_0, Q8_0, QK};
use crate::kernels::cpu::feats::Isa;
use crate::kernels::cpu::matmul::RowPos;
use crate::kernels::cpu::q8::{quantize_q8, Act32};

/// Bytes of one block of one panel.
pub const BLOCK_BYTES: usize = QUANTS + 8 * 64;
const QUANTS: usize = 2 * PANEL;

/// A q8_0 activation block with `off[l] = −128·Σ_{t<4} y[4l+t]` (x86: the `vpdpbusd`
/// accumulators' start; the NEON kernels take signed weights and need none).
pub struct Act {
    pub a: Act32,
    #[cfg(target_arch = "x86_64")]
    pub off: [i32; 8],
}

/// One activation row (`k` values) → q8_0 blocks with their lane offsets.
fn quantize(x: &[f32]) -> Vec<Act> {
    quantize_q8(x)
        .into_iter()
        .map(|a| {
            #[cfg(target_arch = "x86_64")]
            let off =
                std::array::from_fn(|l| -128 * a.qs[4 * l..4 * l + 4].iter().map(|&q| q as i32).sum::<i32>());
            Act {
                a,
                #[cfg(target_arch = "x86_64")]
                off,
            }
        })
        .collect()
}

/// GGUF Q5_0 blocks (f16 d, u32 high bits, 16 nibble bytes) as Q8_0 blocks of their values
/// `q − 16`: `ggml_vec_dot_q5_0_q8_0` rounds exactly as the Q8_0 dot does on those values, so
/// Q5_0 weights run on these panels (at 36 bytes per 32 weights instead of 22).
fn q5_0_as_q8_0(raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(raw.len() / Q5_0::BYTES * Q8_0::BYTES);
    for blk in raw.chunks_exact(Q5_0::BYTES) {
        let qh = u32_at(blk, Q5_0::QH);
        out.extend_from_slice(&blk[Q5_0::D..Q5_0::D + 2]);
        let qs = &blk[Q5_0::QS..];
        for i in 0..32 {
            let nib = if i < 16 { qs[i] & 0x0F } else { qs[i - 16] >> 4 };
            out.push(((nib | (((qh >> i) & 1) as u8) << 4) as i8 - 16) as u8);
        }
    }
    out
}

/// GGUF Q8_0 rows (`n` rows of `k / 32` blocks of 34 bytes) → panels.
fn pack(raw: &[u8], n: usize, k: usize, out: &mut [u8]) {
    super::panel::pack_blocks(raw, n, k, QK, Q8_0::BYTES, BLOCK_BYTES, out, |panel, b, c, blk| {
        let dst = &mut panel[b * BLOCK_BYTES..][..BLOCK_BYTES];
        dst[2 * c..2 * c + 2].copy_from_slice(&blk[Q8_0::D..Q8_0::D + 2]);
        for l in 0..8 {
            for t in 0..4 {
                dst[QUANTS + 64 * l + 4 * c + t] = blk[Q8_0::QS + 4 * l + t] ^ 0x80;
            }
        }
    })
}

/// Column `c`'s GGUF Q8_0 block `b` back out of a panel (`pack`'s inverse).
fn unpack(panel: &[u8], _nb: usize, b: usize, c: usize, blk: &mut [u8]) {
    let src = &panel[b * BLOCK_BYTES..][..BLOCK_BYTES];
    blk[Q8_0::D..Q8_0::D + 2].copy_from_slice(&src[2 * c..2 * c + 2]);
    for l in 0..8 {
        for t in 0..4 {
            blk[Q8_0::QS + 4 * l + t] = src[QUANTS + 64 * l + 4 * c + t] ^ 0x80;
        }
    }
}

/// Q8_0's entry of `super::TYPES`.
pub(super) const TYPE: PanelType = PanelType {
    dtype: GgmlDType::Q8_0,
    qk: QK,
    block_bytes: BLOCK_BYTES,
    packs_on: every_isa,
    pack,
    unpack,
    tiles,
};

/// Q5_0 weights on Q8_0 panels (`q5_0_as_q8_0`): rows come back as Q8_0. Not on aarch64,
/// where Q8_0 panels sum as ggml's Q8_0 repack and Q5_0 (not repacked there) as its row dot.
pub(super) const FROM_Q5_0: PanelType = PanelType {
    pack: |raw, n, k, out| pack(&q5_0_as_q8_0(raw), n, k, out),
    packs_on: |_| !cfg!(target_arch = "aarch64"),
    ..TYPE
};

/// Activations as q8_0 blocks with their lane offsets, and the tile over them (on aarch64 with
/// each row's GEMM-or-GEMV flag: ggml's Q8_0 repack there sums the two differently).
fn tiles(isa: Isa, xs: &[f32], k: usize, rows: &[RowPos]) -> Result<Box<TileFn>> {
    #[cfg(target_arch = "aarch64")]
    {
        let acts = super::quantize_rows(xs, k, quantize);
        let gemm: Vec<bool> = rows.iter().map(|p| p.in_gemm_group()).collect();
        Ok(Box::new(move |panel, r0, n_rows, out, ldo| {
            let a = super::row_slices(&acts[r0..r0 + n_rows]);
            super::tile::<Kernels>(isa, panel, &a[..n_rows], &gemm[r0..r0 + n_rows], out, ldo)
        }))
    }
    #[cfg(not(target_arch = "aarch64"))]
    {
        let _ = rows;
        quantized_tiles::<Kernels>(isa, xs, k, quantize)
    }
}

/// Q8_0's tile kernels.
struct Kernels;

impl TileKernels for Kernels {
    type Act = Act;
    const BLOCK_BYTES: usize = BLOCK_BYTES;

    /// Three rows at a time: 24 accumulators, 3 scales, a weight group and temporaries in 32 zmm.
    #[inline(always)]
    #[cfg(target_arch = "x86_64")]
    unsafe fn vnni(panel: &[u8], nb: usize, acts: &[&[Act]], _: &[bool], out: *mut f32, ldo: usize) {
        // A tile of few rows streams its panel from memory once; wider ones re-read it from L2.
        let stream = acts.len() <= STREAM_ROWS;
        for (i, a) in acts.chunks(3).enumerate() {
            let o = out.add(3 * i * ldo);
            let next = super::panel::next_panel(i, acts.len(), nb, BLOCK_BYTES);
            match a.len() {
                1 => tile_vnni::<1>([a[0]], panel, nb, o, ldo, next, stream),
                2 => tile_vnni::<2>([a[0], a[1]], panel, nb, o, ldo, next, stream),
                _ => tile_vnni::<3>([a[0], a[1], a[2]], panel, nb, o, ldo, next, stream),
            }
        }
    }

    #[inline(always)]
    #[cfg(target_arch = "x86_64")]
    unsafe fn avx2(panel: &[u8], nb: usize, acts: &[&[Act]], _: &[bool], out: *mut f32, ldo: usize) {
        for (r, a) in acts.iter().enumerate() {
            for half in 0..2 {
                tile_avx2(a, panel, nb, half, out.add(r * ldo + 8 * half))
            }
        }
    }

    /// Two rows at a time, each with its GEMM-or-GEMV flag.
    #[cfg(target_arch = "aarch64")]
    #[inline(always)]
    unsafe fn neon<const DOT: bool>(
        panel: &[u8],
        nb: usize,
        acts: &[&[Act]],
        gemm: &[bool],
        out: *mut f32,
        ldo: usize,
    ) {
        crate::kernels::cpu::arm::with_dot::<DOT, _>(
            #[inline(always)]
            || {
                for (i, two) in acts.chunks(2).enumerate() {
                    let (o, g) = (out.add(2 * i * ldo), &gemm[2 * i..]);
                    match two.len() {
                        1 => tile_neon::<1, DOT>([two[0]], [g[0]], panel, nb, o, ldo),
                        _ => tile_neon::<2, DOT>([two[0], two[1]], [g[0], g[1]], panel, nb, o, ldo),
                    }
                }
            },
        )
    }

    fn scalar(panel: &[u8], nb: usize, acts: &[&[Act]], gemm: &[bool], out: *mut f32, ldo: usize) {
        tile_scalar(panel, nb, acts, gemm, out, ldo)
    }
}

/// Column `c`'s eight 4-value lane sums of one block (`l`: elements 4l..4l+4).
#[inline(always)]
fn lane_sums(blk: &[u8], c: usize, y: &Act32) -> [i32; 8] {
    let mut lanes = [0i32; 8];
    for (l, s) in lanes.iter_mut().enumerate() {
        for t in 0..4 {
            let q = (blk[QUANTS + 64 * l + 4 * c + t] ^ 0x80) as i8;
            *s += q as i32 * y.qs[4 * l + t] as i32;
        }
    }
    lanes
}

#[cfg(not(target_arch = "aarch64"))]
fn tile_scalar(panel: &[u8], nb: usize, acts: &[&[Act]], _: &[bool], out: *mut f32, ldo: usize) {
    for (r, a) in acts.iter().enumerate() {
        let mut acc = [[0f32; 8]; PANEL];
        for (b, blk) in panel.chunks_exact(BLOCK_BYTES).take(nb).enumerate() {
            let y = &a[b].a;
            for (c, acc) in acc.iter_mut().enumerate() {
                let d = f16_at(blk, 2 * c) * y.d;
                for (acc, s) in acc.iter_mut().zip(lane_sums(blk, c, y)) {
                    *acc = d.mul_add(s as f32, *acc);
                }
            }
        }
        for (c, lanes) in acc.into_iter().enumerate() {
            // SAFETY: the caller owns out[r·ldo..r·ldo + 16].
            unsafe { *out.add(r * ldo + c) = hsum8(lanes) };
        }
    }
}

/// aarch64: ggml's Q8_0 repack (`block_q8_0x4`) per column, as `quants::dot_q8_0_repacked`:
/// per block the exact Σ and `d = dw·dy`, GEMV rows `fma(float(Σ), d, acc)`, GEMM rows (`gemm`)
/// `acc + d·float(Σ)`.
#[cfg(target_arch = "aarch64")]
fn tile_scalar(panel: &[u8], nb: usize, acts: &[&[Act]], gemm: &[bool], out: *mut f32, ldo: usize) {
    for (r, a) in acts.iter().enumerate() {
        let mut acc = [0f32; PANEL];
        for (b, blk) in panel.chunks_exact(BLOCK_BYTES).take(nb).enumerate() {
            let y = &a[b].a;
            for (c, acc) in acc.iter_mut().enumerate() {
                let s = lane_sums(blk, c, y).iter().sum::<i32>() as f32;
                let d = f16_at(blk, 2 * c) * y.d;
                *acc = if gemm[r] { *acc + d * s } else { s.mul_add(d, *acc) };
            }
        }
        for (c, v) in acc.into_iter().enumerate() {
            // SAFETY: the caller owns out[r·ldo..r·ldo + 16].
            unsafe { *out.add(r * ldo + c) = v };
        }
    }
}

#[cfg(target_arch = "x86_64")]
use super::panel::{bcast4, load_f16x16, load_f16x8, prefetch_next_panel, prefetch_stream, STREAM_ROWS};

/// The 8-lane tree sum of `acc[0..8]`, one zmm lane per column.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn hsum_lanes(acc: &[__m512; 8]) -> __m512 {
    let mut h_v = [_mm512_setzero_ps(); 4];
    for i in 0..4 {
        h_v[i] = _mm512_add_ps(acc[4 + i], acc[i]);
    }
    let h = h_v;
    _mm512_add_ps(_mm512_add_ps(h[0], h[2]), _mm512_add_ps(h[1], h[3]))
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")]
unsafe fn tile_vnni<const R: usize>(
    acts: [&[Act]; R],
    panel: &[u8],
    nb: usize,
    out: *mut f32,
    ldo: usize,
    next: usize,
    stream: bool,
) {
    let mut acc = [[_mm512_setzero_ps(); 8]; R];
    for b in 0..nb {
        let p = panel.as_ptr().add(b * BLOCK_BYTES);
        prefetch_next_panel(p, BLOCK_BYTES, next);
        if stream {
            prefetch_stream(p, BLOCK_BYTES);
        }
        let mut ys = [acts[0].get_unchecked(b); R];
        for r in 1..R {
            ys[r] = acts[r].get_unchecked(b);
        }
        let dw = load_f16x16(p);
        let mut d_v = [_mm512_setzero_ps(); R];
        for r in 0..R {
            d_v[r] = _mm512_mul_ps(dw, _mm512_set1_ps(ys[r].a.d));
        }
        let d = d_v;
        for l in 0..8 {
            let w = _mm512_loadu_si512(p.add(QUANTS + 64 * l) as *const _);
            for r in 0..R {
                // Σ (q+128)·y − 128·Σ y per column: |(q+128)·y| ≤ 255·128, exact in i32.
                let y = _mm512_set1_epi32(bcast4(ys[r].a.qs.as_ptr().add(4 * l)));
                let s = _mm512_dpbusd_epi32(_mm512_set1_epi32(ys[r].off[l]), w, y);
                acc[r][l] = _mm512_fmadd_ps(d[r], _mm512_cvtepi32_ps(s), acc[r][l]);
            }
        }
    }
    for r in 0..R {
        _mm512_storeu_ps(out.add(r * ldo), hsum_lanes(&acc[r]));
    }
}

/// AVX2, one row and 8 columns (`half` of the panel): 8 lane accumulators. The weights get
/// their sign back and the products go through ggml's `|q| · sign(y, q)` (pairs ≤ 2·128·127,
/// within i16 for `maddubs`).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn tile_avx2(a: &[Act], panel: &[u8], nb: usize, half: usize, out: *mut f32) {
    let flip = _mm256_set1_epi8(0x80u8 as i8);
    let ones = _mm256_set1_epi16(1);
    let mut acc = [_mm256_setzero_ps(); 8];
    for b in 0..nb {
        let p = panel.as_ptr().add(b * BLOCK_BYTES);
        let y = &a.get_unchecked(b).a;
        let d = _mm256_mul_ps(load_f16x8(p.add(16 * half)), _mm256_set1_ps(y.d));
        for l in 0..8 {
            let q = _mm256_xor_si256(
                _mm256_loadu_si256(p.add(QUANTS + 64 * l + 32 * half) as *const __m256i),
                flip,
            );
            let yv = _mm256_set1_epi32(bcast4(y.qs.as_ptr().add(4 * l)));
            let pairs = _mm256_maddubs_epi16(_mm256_sign_epi8(q, q), _mm256_sign_epi8(yv, q));
            let s = _mm256_madd_epi16(pairs, ones);
            acc[l] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(s), acc[l]);
        }
    }
    let mut h_v = [_mm256_setzero_ps(); 4];
    for i in 0..4 {
        h_v[i] = _mm256_add_ps(acc[4 + i], acc[i]);
    }
    let h = h_v;
    _mm256_storeu_ps(out, _mm256_add_ps(_mm256_add_ps(h[0], h[2]), _mm256_add_ps(h[1], h[3])));
}

/// NEON: four columns at a time in ggml's Q8_0 repack order (`tile_scalar`): a block's Σ of
/// each column from eight `sdot`s, then one fma (GEMV) or a product and an add (GEMM, `gemm[r]`).
/// The weights get their sign back.
#[cfg(target_arch = "aarch64")]
#[inline(always)]
unsafe fn tile_neon<const R: usize, const DOT: bool>(
    acts: [&[Act]; R],
    gemm: [bool; R],
    panel: &[u8],
    nb: usize,
    out: *mut f32,
    ldo: usize,
) {
    use crate::kernels::cpu::arm::{bcast4, dot4, load_f16x4};
    use std::arch::aarch64::*;
    let flip = vdupq_n_u8(0x80);
    for q in 0..4 {
        let mut acc = [vdupq_n_f32(0.0); R];
        for b in 0..nb {
            let p = panel.as_ptr().add(b * BLOCK_BYTES);
            let dw = load_f16x4(p.add(8 * q));
            let mut sum = [vdupq_n_s32(0); R];
            for l in 0..8 {
                let w = vreinterpretq_s8_u8(veorq_u8(vld1q_u8(p.add(QUANTS + 64 * l + 16 * q)), flip));
                for r in 0..R {
                    sum[r] =
                        dot4::<DOT>(sum[r], w, bcast4(acts[r].get_unchecked(b).a.qs.as_ptr().add(4 * l)));
                }
            }
            for r in 0..R {
                let (s, d) = (vcvtq_f32_s32(sum[r]), vmulq_n_f32(dw, acts[r].get_unchecked(b).a.d));
                acc[r] = if gemm[r] { vaddq_f32(acc[r], vmulq_f32(d, s)) } else { vfmaq_f32(acc[r], s, d) };
            }
        }
        for r in 0..R {
            vst1q_f32(out.add(r * ldo + 4 * q), acc[r]);
        }
    }
}
