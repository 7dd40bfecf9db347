//! Q4_0 panels, as compact as GGUF (18 bytes per column and block). Per block of 32 inputs, a
//! panel holds the 16 columns' scales as f16 (32 bytes), then four 64-byte groups: group h has, for column c, bytes 4c..4c+4 = the block's quant
//! bytes 4h..4h+4 (low nibbles: elements 4h..4h+4, high nibbles: elements 16+4h..16+4h+4).
//! One group thus feeds two 4-element steps of 16 columns (`vpdpbusd` lanes = columns).
//!
//! Per output and block, as ggml's repacked Q4_0 kernels and `quants::dot_q4_0`:
//! `isum = Σ q·y − 8·Σy` (exact), `acc = fma(float(isum), dw·dy, acc)`.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

use candle_core::quantized::GgmlDType;

use super::panel::PANEL;
use super::{every_isa, quantized_tiles, PanelType, TileFn, TileKernels};
use crate::error::Result;
use crate::kernels::cpu::blocks::{f16_at, Q4_0, QK};
use crate::kernels::cpu::feats::Isa;
use crate::kernels::cpu::matmul::RowPos;
use crate::kernels::cpu::q8::{quantize_q8, Act32};

/// Bytes of one block of one panel.
pub const BLOCK_BYTES: usize = QUANTS + 4 * 64;
const QUANTS: usize = 2 * PANEL;

/// GGUF Q4_0 rows (`n` rows of `k / 32` blocks of 18 bytes) → panels.
fn pack(raw: &[u8], n: usize, k: usize, out: &mut [u8]) {
    super::panel::pack_blocks(raw, n, k, QK, Q4_0::BYTES, BLOCK_BYTES, out, |panel, b, c, blk| {
        let dst = &mut panel[b * BLOCK_BYTES..][..BLOCK_BYTES];
        dst[2 * c..2 * c + 2].copy_from_slice(&blk[Q4_0::D..Q4_0::D + 2]);
        for h in 0..4 {
            dst[QUANTS + 64 * h + 4 * c..][..4].copy_from_slice(&blk[Q4_0::QS + 4 * h..][..4]);
        }
    })
}

/// Column `c`'s GGUF block `b` back out of a panel (`pack`'s inverse).
fn unpack(panel: &[u8], _nb: usize, b: usize, c: usize, blk: &mut [u8]) {
    let src = &panel[b * BLOCK_BYTES..][..BLOCK_BYTES];
    blk[Q4_0::D..Q4_0::D + 2].copy_from_slice(&src[2 * c..2 * c + 2]);
    for h in 0..4 {
        blk[Q4_0::QS + 4 * h..][..4].copy_from_slice(&src[QUANTS + 64 * h + 4 * c..][..4]);
    }
}

/// Q4_0's entry of `super::TYPES`.
pub(super) const TYPE: PanelType = PanelType {
    dtype: GgmlDType::Q4_0,
    qk: QK,
    block_bytes: BLOCK_BYTES,
    packs_on: every_isa,
    pack,
    unpack,
    tiles,
};

/// Activations as q8_0 blocks (with their sums), and the tile over them.
fn tiles(isa: Isa, xs: &[f32], k: usize, _: &[RowPos]) -> Result<Box<TileFn>> {
    quantized_tiles::<Kernels>(isa, xs, k, quantize_q8)
}

/// Q4_0's tile kernels.
struct Kernels;

impl TileKernels for Kernels {
    type Act = Act32;
    const BLOCK_BYTES: usize = BLOCK_BYTES;

    #[inline(always)]
    #[cfg(target_arch = "x86_64")]
    unsafe fn vnni(panel: &[u8], nb: usize, acts: &[&[Act32]], _: &[bool], out: *mut f32, ldo: usize) {
        by_rows!(tile_vnni, acts, panel, nb, out, ldo)
    }

    #[inline(always)]
    #[cfg(target_arch = "x86_64")]
    unsafe fn avx2(panel: &[u8], nb: usize, acts: &[&[Act32]], _: &[bool], out: *mut f32, ldo: usize) {
        for (i, four) in acts.chunks(4).enumerate() {
            by_rows!(tile_avx2, four, panel, nb, out.add(4 * i * ldo), ldo)
        }
    }

    #[cfg(target_arch = "aarch64")]
    neon_in_row_pairs!(Act32);

    /// Row pairs through `smmla` (half the dot-product instructions), an odd last row through
    /// the dot-product tile.
    #[inline(always)]
    #[cfg(target_arch = "aarch64")]
    unsafe fn i8mm(panel: &[u8], nb: usize, acts: &[&[Act32]], _: &[bool], out: *mut f32, ldo: usize) {
        crate::kernels::cpu::arm::with_i8mm(
            #[inline(always)]
            || {
                for (i, two) in acts.chunks(2).enumerate() {
                    let o = out.add(2 * i * ldo);
                    match two.len() {
                        1 => tile_neon::<1, true>([two[0]], panel, nb, o, ldo),
                        _ => tile_i8mm([two[0], two[1]], panel, nb, o, ldo),
                    }
                }
            },
        )
    }

    fn scalar(panel: &[u8], nb: usize, acts: &[&[Act32]], _: &[bool], out: *mut f32, ldo: usize) {
        tile_scalar(panel, nb, acts, out, ldo)
    }
}

fn tile_scalar(panel: &[u8], nb: usize, acts: &[&[Act32]], out: *mut f32, ldo: usize) {
    for (r, a) in acts.iter().enumerate() {
        let mut acc = [0f32; PANEL];
        for (b, blk) in panel.chunks_exact(BLOCK_BYTES).take(nb).enumerate() {
            let y = &a[b];
            for (c, acc) in acc.iter_mut().enumerate() {
                let mut isum = 0i32;
                for h in 0..4 {
                    for t in 0..4 {
                        let q = blk[QUANTS + 64 * h + 4 * c + t];
                        isum += (q & 0x0F) as i32 * y.qs[4 * h + t] as i32;
                        isum += (q >> 4) as i32 * y.qs[16 + 4 * h + t] as i32;
                    }
                }
                isum -= 8 * y.qsum;
                let dw = f16_at(blk, 2 * c);
                *acc = (isum as f32).mul_add(dw * y.d, *acc);
            }
        }
        for (c, v) in acc.into_iter().enumerate() {
            // SAFETY: the caller owns out[r·ldo..r·ldo + 16].
            unsafe { *out.add(r * ldo + c) = v };
        }
    }
}

#[cfg(target_arch = "x86_64")]
use super::panel::{bcast4, load_f16x16, load_f16x8};

#[cfg(target_arch = "x86_64")]
use super::panel::{chains, next_panel, prefetch_next_panel, sum_chains, CHAINS};

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")]
unsafe fn tile_vnni<const R: usize>(acts: [&[Act32]; R], panel: &[u8], nb: usize, out: *mut f32, ldo: usize) {
    let mask = _mm512_set1_epi8(0x0F);
    let mut acc = [_mm512_setzero_ps(); R];
    let next = next_panel(0, R, nb, BLOCK_BYTES);
    for b in 0..nb {
        let p = panel.as_ptr().add(b * BLOCK_BYTES);
        prefetch_next_panel(p, BLOCK_BYTES, next);
        let mut ys = [acts[0].get_unchecked(b); R];
        for r in 1..R {
            ys[r] = acts[r].get_unchecked(b);
        }
        // Independent accumulator chains so few rows do not wait on `vpdpbusd` latency.
        let mut lo_sum = [[_mm512_setzero_si512(); R]; CHAINS];
        let mut hi_sum = [[_mm512_setzero_si512(); R]; CHAINS];
        for h in 0..4 {
            let ch = h % chains::<R>();
            let raw = _mm512_loadu_si512(p.add(QUANTS + 64 * h) as *const _);
            let lo = _mm512_and_si512(raw, mask);
            // High nibbles in place (16·q): one op fewer per step, divided out below.
            let hi = _mm512_andnot_si512(mask, raw);
            for r in 0..R {
                let q = ys[r].qs.as_ptr();
                lo_sum[ch][r] =
                    _mm512_dpbusd_epi32(lo_sum[ch][r], lo, _mm512_set1_epi32(bcast4(q.add(4 * h))));
                hi_sum[ch][r] =
                    _mm512_dpbusd_epi32(hi_sum[ch][r], hi, _mm512_set1_epi32(bcast4(q.add(16 + 4 * h))));
            }
        }
        let mut isum_v = [_mm512_setzero_si512(); R];
        for r in 0..R {
            isum_v[r] = _mm512_add_epi32(
                sum_chains::<R>(&lo_sum, r),
                _mm512_srai_epi32::<4>(sum_chains::<R>(&hi_sum, r)),
            );
        }
        let isum = isum_v;
        let dw = load_f16x16(p);
        for r in 0..R {
            let s = _mm512_sub_epi32(isum[r], _mm512_set1_epi32(8 * ys[r].qsum));
            let d = _mm512_mul_ps(dw, _mm512_set1_ps(ys[r].d));
            acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), d, acc[r]);
        }
    }
    for r in 0..R {
        _mm512_storeu_ps(out.add(r * ldo), acc[r]);
    }
}

/// AVX2: each 32-byte half of a group is 8 columns. `maddubs` pairs (≤ 2·15·128) summed over
/// the block's 8 steps stay within i16, so one `madd` per block turns them into i32.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn tile_avx2<const R: usize>(acts: [&[Act32]; R], panel: &[u8], nb: usize, out: *mut f32, ldo: usize) {
    let mask = _mm256_set1_epi8(0x0F);
    let ones = _mm256_set1_epi16(1);
    let mut acc = [[_mm256_setzero_ps(); 2]; R];
    for b in 0..nb {
        let p = panel.as_ptr().add(b * BLOCK_BYTES);
        let mut ys = [acts[0].get_unchecked(b); R];
        for r in 1..R {
            ys[r] = acts[r].get_unchecked(b);
        }
        for half in 0..2 {
            let mut pairs = [_mm256_setzero_si256(); R];
            for h in 0..4 {
                let raw = _mm256_loadu_si256(p.add(QUANTS + 64 * h + 32 * half) as *const __m256i);
                let lo = _mm256_and_si256(raw, mask);
                let hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), mask);
                for r in 0..R {
                    let q = ys[r].qs.as_ptr();
                    let ylo = _mm256_set1_epi32(bcast4(q.add(4 * h)));
                    let yhi = _mm256_set1_epi32(bcast4(q.add(16 + 4 * h)));
                    pairs[r] = _mm256_add_epi16(pairs[r], _mm256_maddubs_epi16(lo, ylo));
                    pairs[r] = _mm256_add_epi16(pairs[r], _mm256_maddubs_epi16(hi, yhi));
                }
            }
            let dw = load_f16x8(p.add(16 * half));
            for r in 0..R {
                let isum =
                    _mm256_sub_epi32(_mm256_madd_epi16(pairs[r], ones), _mm256_set1_epi32(8 * ys[r].qsum));
                let d = _mm256_mul_ps(dw, _mm256_set1_ps(ys[r].d));
                acc[r][half] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), d, acc[r][half]);
            }
        }
    }
    for r in 0..R {
        _mm256_storeu_ps(out.add(r * ldo), acc[r][0]);
        _mm256_storeu_ps(out.add(r * ldo + 8), acc[r][1]);
    }
}

/// NEON: a register is 4 columns × one 4-byte step (`dot4` lanes = columns), so a group is four
/// registers; two rows at a time (16 integer and float accumulators).
#[cfg(target_arch = "aarch64")]
#[inline(always)]
unsafe fn tile_neon<const R: usize, const DOT: bool>(
    acts: [&[Act32]; R],
    panel: &[u8],
    nb: usize,
    out: *mut f32,
    ldo: usize,
) {
    use crate::kernels::cpu::arm::{bcast4, dot4, load_f16x4};
    use std::arch::aarch64::*;
    let mask = vdupq_n_u8(0x0F);
    let mut acc = [[vdupq_n_f32(0.0); 4]; R];
    for b in 0..nb {
        let p = panel.as_ptr().add(b * BLOCK_BYTES);
        let mut ys = [acts[0].get_unchecked(b); R];
        for r in 1..R {
            ys[r] = acts[r].get_unchecked(b);
        }
        let mut isum = [[vdupq_n_s32(0); 4]; R];
        for h in 0..4 {
            let mut ylo = [vdupq_n_s8(0); R];
            let mut yhi = [vdupq_n_s8(0); R];
            for r in 0..R {
                ylo[r] = bcast4(ys[r].qs.as_ptr().add(4 * h));
                yhi[r] = bcast4(ys[r].qs.as_ptr().add(16 + 4 * h));
            }
            for q in 0..4 {
                let raw = vld1q_u8(p.add(QUANTS + 64 * h + 16 * q));
                let lo = vreinterpretq_s8_u8(vandq_u8(raw, mask));
                let hi = vreinterpretq_s8_u8(vshrq_n_u8::<4>(raw));
                for r in 0..R {
                    isum[r][q] = dot4::<DOT>(dot4::<DOT>(isum[r][q], lo, ylo[r]), hi, yhi[r]);
                }
            }
        }
        for q in 0..4 {
            let dw = load_f16x4(p.add(8 * q));
            for r in 0..R {
                let s = vsubq_s32(isum[r][q], vdupq_n_s32(8 * ys[r].qsum));
                acc[r][q] = vfmaq_f32(acc[r][q], vcvtq_f32_s32(s), vmulq_n_f32(dw, ys[r].d));
            }
        }
    }
    for r in 0..R {
        for q in 0..4 {
            vst1q_f32(out.add(r * ldo + 4 * q), acc[r][q]);
        }
    }
}

/// Two rows with `smmla`: groups h and h+1 hold elements 4h..4h+8 of each column, so zipping
/// their 4-byte column words gives two columns × 8 values, against the two rows' 8 values.
/// Accumulator j holds columns 2j, 2j+1 of both rows; the block's integers are the same as the
/// dot-product tile's (exact), and so is everything after them.
#[cfg(target_arch = "aarch64")]
#[inline(always)]
unsafe fn tile_i8mm(acts: [&[Act32]; 2], panel: &[u8], nb: usize, out: *mut f32, ldo: usize) {
    use crate::kernels::cpu::arm::{load_f16x4, smmla};
    use std::arch::aarch64::*;
    let mask = vdupq_n_u8(0x0F);
    let mut acc = [[vdupq_n_f32(0.0); 4]; 2];
    for b in 0..nb {
        let p = panel.as_ptr().add(b * BLOCK_BYTES);
        let ys = [acts[0].get_unchecked(b), acts[1].get_unchecked(b)];
        let rows =
            |at: usize| vcombine_s8(vld1_s8(ys[0].qs.as_ptr().add(at)), vld1_s8(ys[1].qs.as_ptr().add(at)));
        let mut isum = [vdupq_n_s32(0); 8];
        for h in [0, 2] {
            let (ylo, yhi) = (rows(4 * h), rows(16 + 4 * h));
            for q in 0..4 {
                let g0 = vreinterpretq_u32_u8(vld1q_u8(p.add(QUANTS + 64 * h + 16 * q)));
                let g1 = vreinterpretq_u32_u8(vld1q_u8(p.add(QUANTS + 64 * (h + 1) + 16 * q)));
                for (j, cols) in [vzip1q_u32(g0, g1), vzip2q_u32(g0, g1)].into_iter().enumerate() {
                    let raw = vreinterpretq_u8_u32(cols);
                    let lo = vreinterpretq_s8_u8(vandq_u8(raw, mask));
                    let hi = vreinterpretq_s8_u8(vshrq_n_u8::<4>(raw));
                    let k = 2 * q + j;
                    isum[k] = smmla(smmla(isum[k], ylo, lo), yhi, hi);
                }
            }
        }
        for q in 0..4 {
            let (a, c) = (vreinterpretq_s64_s32(isum[2 * q]), vreinterpretq_s64_s32(isum[2 * q + 1]));
            let per_row = [vreinterpretq_s32_s64(vzip1q_s64(a, c)), vreinterpretq_s32_s64(vzip2q_s64(a, c))];
            let dw = load_f16x4(p.add(8 * q));
            for r in 0..2 {
                let s = vsubq_s32(per_row[r], vdupq_n_s32(8 * ys[r].qsum));
                acc[r][q] = vfmaq_f32(acc[r][q], vcvtq_f32_s32(s), vmulq_n_f32(dw, ys[r].d));
            }
        }
    }
    for r in 0..2 {
        for q in 0..4 {
            vst1q_f32(out.add(r * ldo + 4 * q), acc[r][q]);
        }
    }
}
