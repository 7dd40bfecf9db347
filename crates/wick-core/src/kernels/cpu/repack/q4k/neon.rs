//! Q4_K's NEON tiles (the layout and the order they follow: `super`).

use std::arch::aarch64::*;

use super::{mins_at, quants_at, scale_at, BLOCK_BYTES, PANEL};
use crate::kernels::cpu::q8::Act256;

/// NEON: four columns (one register) at a time over the whole panel, two rows at a time, in the
/// order of ggml's aarch64 Q4_K repack (`block_q4_Kx8`, 8x4 with dotprod; `super::fold`): every
/// row, GEMV or GEMM, folds each sub-block pair's sum by fma and subtracts the block's mins once. `pair_dots(block, p, q, rows)` gives each row's exact
/// `Σ q·y` of sub-blocks 2p (even) and 2p+1 (odd) for columns 4q..4q+4.
#[inline(always)]
unsafe fn tile_quads<const R: usize>(
    acts: [&[Act256]; R],
    _pairs: &[bool],
    panel: &[u8],
    nb: usize,
    out: *mut f32,
    ldo: usize,
    pair_dots: impl Fn(*const u8, usize, usize, &[&Act256; R]) -> [[int32x4_t; R]; 2],
) {
    use crate::kernels::cpu::arm::{load_f16x4, widen4_u8, widen_low4_u8};
    let zero = vdupq_n_s32(0);
    for q in 0..4 {
        let mut acc = [vdupq_n_f32(0.0); R];
        for b in 0..nb {
            let blk = panel.as_ptr().add(b * BLOCK_BYTES);
            let mut ys = [acts[0].get_unchecked(b); R];
            for r in 1..R {
                ys[r] = acts[r].get_unchecked(b);
            }
            let (d, dmin) = (load_f16x4(blk.add(8 * q)), load_f16x4(blk.add(2 * PANEL + 8 * q)));
            let (mut dd, mut dm) = ([d; R], [dmin; R]);
            for r in 0..R {
                dd[r] = vmulq_n_f32(d, ys[r].d);
                dm[r] = vmulq_n_f32(dmin, ys[r].d);
            }
            let mut im_tot = [zero; R];
            for p in 0..4 {
                let [even, odd] = pair_dots(blk, p, q, &ys);
                let (s0, s1) = (
                    widen4_u8(blk.add(scale_at(2 * p) + 4 * q)),
                    widen4_u8(blk.add(scale_at(2 * p + 1) + 4 * q)),
                );
                // (m[2p], m[2p+1]) byte pairs of the four columns, split.
                let mins = vld1_u8(blk.add(mins_at(p) + 8 * q));
                let (m0, m1) = (widen_low4_u8(vuzp1_u8(mins, mins)), widen_low4_u8(vuzp2_u8(mins, mins)));
                for r in 0..R {
                    let isum = vmlaq_s32(vmulq_s32(s0, even[r]), s1, odd[r]);
                    let sums = &ys[r].sums;
                    let imin = vmlaq_n_s32(vmulq_n_s32(m0, sums[2 * p]), m1, sums[2 * p + 1]);
                    // ggml's 8x4 GEMV and GEMM alike: each pair folded by fma, the mins summed.
                    acc[r] = vfmaq_f32(acc[r], vcvtq_f32_s32(isum), dd[r]);
                    im_tot[r] = vaddq_s32(im_tot[r], imin);
                }
            }
            for r in 0..R {
                // `acc − float(Σ mins)·(dmin·dy)`: a rounded product, then the subtraction.
                acc[r] = vsubq_f32(acc[r], vmulq_f32(vcvtq_f32_s32(im_tot[r]), dm[r]));
            }
        }
        for r in 0..R {
            vst1q_f32(out.add(r * ldo + 4 * q), acc[r]);
        }
    }
}

/// `tile_quads` with `dot4`: a register is four columns × 4 bytes of one step t.
#[inline(always)]
pub(super) unsafe fn tile_neon<const R: usize, const DOT: bool>(
    acts: [&[Act256]; R],
    pairs: &[bool],
    panel: &[u8],
    nb: usize,
    out: *mut f32,
    ldo: usize,
) {
    use crate::kernels::cpu::arm::{bcast4, dot4};
    let mask = vdupq_n_u8(0x0F);
    tile_quads(
        acts,
        pairs,
        panel,
        nb,
        out,
        ldo,
        #[inline(always)]
        |blk, p, q, ys: &[&Act256; R]| {
            let zero = vdupq_n_s32(0);
            let (mut even, mut odd) = ([zero; R], [zero; R]);
            for t in 0..8 {
                let raw = vld1q_u8(blk.add(quants_at(8 * p + t) + 16 * q));
                let lo = vreinterpretq_s8_u8(vandq_u8(raw, mask));
                let hi = vreinterpretq_s8_u8(vshrq_n_u8::<4>(raw));
                for r in 0..R {
                    let y = ys[r].qs.as_ptr().add(64 * p + 4 * t);
                    even[r] = dot4::<DOT>(even[r], lo, bcast4(y));
                    odd[r] = dot4::<DOT>(odd[r], hi, bcast4(y.add(32)));
                }
            }
            [even, odd]
        },
    )
}

/// `tile_quads` for a row pair with `smmla`: steps t and t+1 hold 8 consecutive values of each
/// column, zipped into column pairs against both rows' 8 values (Q4_0's `tile_i8mm` layout).
#[inline(always)]
pub(super) unsafe fn tile_i8mm(
    acts: [&[Act256]; 2],
    pairs: &[bool],
    panel: &[u8],
    nb: usize,
    out: *mut f32,
    ldo: usize,
) {
    use crate::kernels::cpu::arm::smmla;
    let mask = vdupq_n_u8(0x0F);
    tile_quads(
        acts,
        pairs,
        panel,
        nb,
        out,
        ldo,
        #[inline(always)]
        |blk, p, q, ys: &[&Act256; 2]| {
            let zero = vdupq_n_s32(0);
            let rows = |at: usize| {
                vcombine_s8(vld1_s8(ys[0].qs.as_ptr().add(at)), vld1_s8(ys[1].qs.as_ptr().add(at)))
            };
            // [column pair][even, odd], lanes (r0·cA, r0·cB, r1·cA, r1·cB).
            let mut mm = [[zero; 2]; 2];
            for t in [0, 2, 4, 6] {
                let g0 = vreinterpretq_u32_u8(vld1q_u8(blk.add(quants_at(8 * p + t) + 16 * q)));
                let g1 = vreinterpretq_u32_u8(vld1q_u8(blk.add(quants_at(8 * p + t + 1) + 16 * q)));
                let (ye, yo) = (rows(64 * p + 4 * t), rows(64 * p + 32 + 4 * t));
                for (j, cols) in [vzip1q_u32(g0, g1), vzip2q_u32(g0, g1)].into_iter().enumerate() {
                    let raw = vreinterpretq_u8_u32(cols);
                    mm[j][0] = smmla(mm[j][0], ye, vreinterpretq_s8_u8(vandq_u8(raw, mask)));
                    mm[j][1] = smmla(mm[j][1], yo, vreinterpretq_s8_u8(vshrq_n_u8::<4>(raw)));
                }
            }
            // Back to one register of four columns per row.
            let per_row = |a: int32x4_t, c: int32x4_t| {
                let (a, c) = (vreinterpretq_s64_s32(a), vreinterpretq_s64_s32(c));
                [vreinterpretq_s32_s64(vzip1q_s64(a, c)), vreinterpretq_s32_s64(vzip2q_s64(a, c))]
            };
            [per_row(mm[0][0], mm[1][0]), per_row(mm[0][1], mm[1][1])]
        },
    )
}
