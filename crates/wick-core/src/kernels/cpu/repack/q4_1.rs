//! Q4_1 panels, as compact as GGUF (20 bytes per column and block). Per block of 32 inputs, a
//! panel holds the 16 columns' scales `d` and mins `m` as f16 (2 × 32 bytes), then four 64-byte groups as Q4_0's: group h has, for column c,
//! bytes 4c..4c+4 = the block's quant bytes 4h..4h+4 (low nibbles: elements 4h..4h+4, ggml's
//! lane h; high nibbles: elements 16+4h..16+4h+4, lane 4+h).
//!
//! Per output, as `quants::dot_q4_1` (`ggml_vec_dot_q4_1_q8_1`): 8 float lanes, lane l
//! of block b gets `acc_l = fma(dy·dw, float(Σ_{t<4} q[4l+t]·y[4l+t]), acc_l)`, the m·s terms
//! go to `summs = fma(m, s, summs)`, and the output is ggml's 8-lane tree sum plus `summs`.
//! The nibbles are unsigned, so `vpdpbusd` takes them as they are. On aarch64 each output
//! follows llama.cpp's NEON `ggml_vec_dot_q4_1_q8_1` instead (`blocks::PairOrder`), as
//! `quants::dot_q4_1` does there (ggml does not repack Q4_1 on ARM).

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

use candle_core::quantized::GgmlDType;

use super::panel::PANEL;
use super::{every_isa, quantized_tiles, PanelType, TileFn, TileKernels};
use crate::error::Result;
use crate::kernels::cpu::blocks::{f16_at, Q4_1, QK};
use crate::kernels::cpu::feats::Isa;
use crate::kernels::cpu::matmul::RowPos;
use crate::kernels::cpu::q8::{quantize_q8, Act32};

/// Bytes of one block of one panel.
pub const BLOCK_BYTES: usize = QUANTS + 4 * 64;
const QUANTS: usize = 4 * PANEL;

/// GGUF Q4_1 rows (`n` rows of `k / 32` blocks of 20 bytes) → panels.
fn pack(raw: &[u8], n: usize, k: usize, out: &mut [u8]) {
    super::panel::pack_blocks(raw, n, k, QK, Q4_1::BYTES, BLOCK_BYTES, out, |panel, b, c, blk| {
        let dst = &mut panel[b * BLOCK_BYTES..][..BLOCK_BYTES];
        dst[2 * c..2 * c + 2].copy_from_slice(&blk[Q4_1::D..Q4_1::D + 2]);
        dst[2 * PANEL + 2 * c..2 * PANEL + 2 * c + 2].copy_from_slice(&blk[Q4_1::M..Q4_1::M + 2]);
        for h in 0..4 {
            dst[QUANTS + 64 * h + 4 * c..][..4].copy_from_slice(&blk[Q4_1::QS + 4 * h..][..4]);
        }
    })
}

/// Column `c`'s GGUF block `b` back out of a panel (`pack`'s inverse).
fn unpack(panel: &[u8], _nb: usize, b: usize, c: usize, blk: &mut [u8]) {
    let src = &panel[b * BLOCK_BYTES..][..BLOCK_BYTES];
    blk[Q4_1::D..Q4_1::D + 2].copy_from_slice(&src[2 * c..2 * c + 2]);
    blk[Q4_1::M..Q4_1::M + 2].copy_from_slice(&src[2 * PANEL + 2 * c..2 * PANEL + 2 * c + 2]);
    for h in 0..4 {
        blk[Q4_1::QS + 4 * h..][..4].copy_from_slice(&src[QUANTS + 64 * h + 4 * c..][..4]);
    }
}

/// Q4_1's entry of `super::TYPES`.
pub(super) const TYPE: PanelType = PanelType {
    dtype: GgmlDType::Q4_1,
    qk: QK,
    block_bytes: BLOCK_BYTES,
    packs_on: every_isa,
    pack,
    unpack,
    tiles,
};

/// Activations as q8_1-style blocks (with their sums), and the tile over them.
fn tiles(isa: Isa, xs: &[f32], k: usize, _: &[RowPos]) -> Result<Box<TileFn>> {
    quantized_tiles::<Kernels>(isa, xs, k, quantize_q8)
}

/// Q4_1's tile kernels.
struct Kernels;

impl TileKernels for Kernels {
    type Act = Act32;
    const BLOCK_BYTES: usize = BLOCK_BYTES;

    /// Two rows at a time: 16 lane accumulators, 2 m·s sums, 2 scales, the unpacked nibbles
    /// and temporaries in 32 zmm.
    #[inline(always)]
    #[cfg(target_arch = "x86_64")]
    unsafe fn vnni(panel: &[u8], nb: usize, acts: &[&[Act32]], _: &[bool], out: *mut f32, ldo: usize) {
        for (i, rows) in acts.chunks(2).enumerate() {
            let o = out.add(2 * i * ldo);
            let next = super::panel::next_panel(i, acts.len(), nb, BLOCK_BYTES);
            match rows.len() {
                1 => tile_vnni::<1>([rows[0]], panel, nb, o, ldo, next),
                _ => tile_vnni::<2>([rows[0], rows[1]], panel, nb, o, ldo, next),
            }
        }
    }

    #[inline(always)]
    #[cfg(target_arch = "x86_64")]
    unsafe fn avx2(panel: &[u8], nb: usize, acts: &[&[Act32]], _: &[bool], out: *mut f32, ldo: usize) {
        for (r, a) in acts.iter().enumerate() {
            for half in 0..2 {
                tile_avx2(a, panel, nb, half, out.add(r * ldo + 8 * half))
            }
        }
    }

    #[cfg(target_arch = "aarch64")]
    neon_in_row_pairs!(Act32);

    fn scalar(panel: &[u8], nb: usize, acts: &[&[Act32]], _: &[bool], out: *mut f32, ldo: usize) {
        tile_scalar(panel, nb, acts, out, ldo)
    }
}

/// Column `c`'s eight 4-value lane sums of one block (`l`: elements 4l..4l+4).
#[inline(always)]
fn lane_sums(blk: &[u8], c: usize, y: &Act32) -> [i32; 8] {
    let mut lanes = [0i32; 8];
    for (l, s) in lanes.iter_mut().enumerate() {
        for t in 0..4 {
            let byte = blk[QUANTS + 64 * (l % 4) + 4 * c + t];
            let q = if l < 4 { byte & 0x0F } else { byte >> 4 };
            *s += q as i32 * y.qs[4 * l + t] as i32;
        }
    }
    lanes
}

#[cfg(not(target_arch = "aarch64"))]
fn tile_scalar(panel: &[u8], nb: usize, acts: &[&[Act32]], out: *mut f32, ldo: usize) {
    for (r, a) in acts.iter().enumerate() {
        let mut acc = [[0f32; 8]; PANEL];
        let mut summs = [0f32; PANEL];
        for (b, blk) in panel.chunks_exact(BLOCK_BYTES).take(nb).enumerate() {
            let y = &a[b];
            for c in 0..PANEL {
                summs[c] = f16_at(blk, 2 * PANEL + 2 * c).mul_add(y.s, summs[c]);
                let d = y.d * f16_at(blk, 2 * c);
                for (acc, s) in acc[c].iter_mut().zip(lane_sums(blk, c, y)) {
                    *acc = d.mul_add(s as f32, *acc);
                }
            }
        }
        for c in 0..PANEL {
            let a = acc[c];
            let h = [a[4] + a[0], a[5] + a[1], a[6] + a[2], a[7] + a[3]];
            // SAFETY: the caller owns out[r·ldo..r·ldo + 16].
            unsafe { *out.add(r * ldo + c) = ((h[0] + h[2]) + (h[1] + h[3])) + summs[c] };
        }
    }
}

/// aarch64: llama.cpp's NEON order per column (`blocks::PairOrder`, as `quants::dot_q4_1`).
#[cfg(target_arch = "aarch64")]
fn tile_scalar(panel: &[u8], nb: usize, acts: &[&[Act32]], out: *mut f32, ldo: usize) {
    use crate::kernels::cpu::blocks::{neon_lanes, Mins, PairOrder};
    for (r, a) in acts.iter().enumerate() {
        let mut o = [PairOrder::new(Mins::Paired, nb); PANEL];
        for (b, blk) in panel.chunks_exact(BLOCK_BYTES).take(nb).enumerate() {
            let y = &a[b];
            for (c, o) in o.iter_mut().enumerate() {
                let m = f16_at(blk, 2 * PANEL + 2 * c);
                o.block(neon_lanes(lane_sums(blk, c, y)), f16_at(blk, 2 * c) * y.d, (m, y.s));
            }
        }
        for (c, o) in o.into_iter().enumerate() {
            // SAFETY: the caller owns out[r·ldo..r·ldo + 16].
            unsafe { *out.add(r * ldo + c) = o.finish() };
        }
    }
}

#[cfg(target_arch = "x86_64")]
use super::panel::{bcast4, load_f16x16, load_f16x8, prefetch_next_panel};

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")]
unsafe fn tile_vnni<const R: usize>(
    acts: [&[Act32]; R],
    panel: &[u8],
    nb: usize,
    out: *mut f32,
    ldo: usize,
    next: usize,
) {
    let mask = _mm512_set1_epi8(0x0F);
    let mut acc = [[_mm512_setzero_ps(); 8]; R];
    let mut summs = [_mm512_setzero_ps(); R];
    for b in 0..nb {
        let p = panel.as_ptr().add(b * BLOCK_BYTES);
        prefetch_next_panel(p, BLOCK_BYTES, next);
        let mut ys = [acts[0].get_unchecked(b); R];
        for r in 1..R {
            ys[r] = acts[r].get_unchecked(b);
        }
        let dw = load_f16x16(p);
        let mw = load_f16x16(p.add(2 * PANEL));
        let mut d = [_mm512_setzero_ps(); R];
        for r in 0..R {
            summs[r] = _mm512_fmadd_ps(mw, _mm512_set1_ps(ys[r].s), summs[r]);
            d[r] = _mm512_mul_ps(_mm512_set1_ps(ys[r].d), dw);
        }
        for h in 0..4 {
            let raw = _mm512_loadu_si512(p.add(QUANTS + 64 * h) as *const _);
            for (l, q) in
                [(h, _mm512_and_si512(raw, mask)), (4 + h, _mm512_and_si512(_mm512_srli_epi16(raw, 4), mask))]
            {
                for r in 0..R {
                    // 4 products ≤ 15·128 each: exact in i32.
                    let y = _mm512_set1_epi32(bcast4(ys[r].qs.as_ptr().add(4 * l)));
                    let s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q, y);
                    acc[r][l] = _mm512_fmadd_ps(d[r], _mm512_cvtepi32_ps(s), acc[r][l]);
                }
            }
        }
    }
    for r in 0..R {
        let a = &acc[r];
        let mut h_v = [_mm512_setzero_ps(); 4];
        for i in 0..4 {
            h_v[i] = _mm512_add_ps(a[4 + i], a[i]);
        }
        let h = h_v;
        let sum = _mm512_add_ps(_mm512_add_ps(h[0], h[2]), _mm512_add_ps(h[1], h[3]));
        _mm512_storeu_ps(out.add(r * ldo), _mm512_add_ps(sum, summs[r]));
    }
}

/// AVX2, one row and 8 columns (`half` of the panel): 8 lane accumulators. `maddubs` pairs
/// (≤ 2·15·128) fit i16; one `madd` per lane turns them into the lane's i32 sum.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn tile_avx2(a: &[Act32], panel: &[u8], nb: usize, half: usize, out: *mut f32) {
    let mask = _mm256_set1_epi8(0x0F);
    let ones = _mm256_set1_epi16(1);
    let mut acc = [_mm256_setzero_ps(); 8];
    let mut summs = _mm256_setzero_ps();
    for b in 0..nb {
        let p = panel.as_ptr().add(b * BLOCK_BYTES);
        let y = a.get_unchecked(b);
        let mw = load_f16x8(p.add(2 * PANEL + 16 * half));
        summs = _mm256_fmadd_ps(mw, _mm256_set1_ps(y.s), summs);
        let d = _mm256_mul_ps(_mm256_set1_ps(y.d), load_f16x8(p.add(16 * half)));
        for h in 0..4 {
            let raw = _mm256_loadu_si256(p.add(QUANTS + 64 * h + 32 * half) as *const __m256i);
            for (l, q) in
                [(h, _mm256_and_si256(raw, mask)), (4 + h, _mm256_and_si256(_mm256_srli_epi16(raw, 4), mask))]
            {
                let yv = _mm256_set1_epi32(bcast4(y.qs.as_ptr().add(4 * l)));
                let s = _mm256_madd_epi16(_mm256_maddubs_epi16(q, yv), ones);
                acc[l] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(s), acc[l]);
            }
        }
    }
    let mut h_v = [_mm256_setzero_ps(); 4];
    for i in 0..4 {
        h_v[i] = _mm256_add_ps(acc[4 + i], acc[i]);
    }
    let h = h_v;
    let sum = _mm256_add_ps(_mm256_add_ps(h[0], h[2]), _mm256_add_ps(h[1], h[3]));
    _mm256_storeu_ps(out, _mm256_add_ps(sum, summs));
}

/// NEON: four columns at a time in llama.cpp's NEON order (`arm::PairOrder4`): lane h of a
/// block is `sdot(sdot(0, lo, y[4h..]), hi, y[16 + 4h..])`, column by column.
#[cfg(target_arch = "aarch64")]
#[inline(always)]
unsafe fn tile_neon<const R: usize, const DOT: bool>(
    acts: [&[Act32]; R],
    panel: &[u8],
    nb: usize,
    out: *mut f32,
    ldo: usize,
) {
    use crate::kernels::cpu::arm::{bcast4, dot4, load_f16x4, PairOrder4};
    use crate::kernels::cpu::blocks::Mins;
    use std::arch::aarch64::*;
    let mask = vdupq_n_u8(0x0F);
    for q in 0..4 {
        let mut o = [PairOrder4::new(Mins::Paired, nb); R];
        for b in 0..nb {
            let p = panel.as_ptr().add(b * BLOCK_BYTES);
            let (dw, mw) = (load_f16x4(p.add(8 * q)), load_f16x4(p.add(2 * PANEL + 8 * q)));
            let mut lanes = [[vdupq_n_s32(0); 4]; R];
            for h in 0..4 {
                let raw = vld1q_u8(p.add(QUANTS + 64 * h + 16 * q));
                let lo = vreinterpretq_s8_u8(vandq_u8(raw, mask));
                let hi = vreinterpretq_s8_u8(vshrq_n_u8::<4>(raw));
                for r in 0..R {
                    let qs = acts[r].get_unchecked(b).qs.as_ptr();
                    let s = dot4::<DOT>(vdupq_n_s32(0), lo, bcast4(qs.add(4 * h)));
                    lanes[r][h] = dot4::<DOT>(s, hi, bcast4(qs.add(16 + 4 * h)));
                }
            }
            for r in 0..R {
                let y = acts[r].get_unchecked(b);
                o[r].block(lanes[r], vmulq_n_f32(dw, y.d), mw, y.s);
            }
        }
        for r in 0..R {
            vst1q_f32(out.add(r * ldo + 4 * q), o[r].finish());
        }
    }
}
