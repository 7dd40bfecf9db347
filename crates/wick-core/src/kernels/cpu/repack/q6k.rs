//! Q6_K panels (AVX-512 only: elsewhere Q6_K weights stay on `k_quants`' row kernel).
//!
//! `ggml_vec_dot_q6_K_q8_K` keeps 8 float lanes per output, so here a 512-bit register holds
//! a pair of columns × 8 lanes. A panel is its 8 column pairs one after the other (each
//! streamed through whole before the next); per block of 256 inputs a pair holds: the quant bytes as 6 groups of 64 (`[n][ql lo | ql hi | qh][column][32]`,
//! n = half of the block), both columns' 16 scales (32 bytes) and their `d` as f32 (8 bytes).
//!
//! Per output and block, as `quants::dot_q6k`: lane l gets the exact integer
//! `Σ_c s·Σ q·y − 32·(Σ bsum·s)` (chunks c of 32 values, 4 values per lane), then
//! `acc_l = fma(dy·dx, float(lane), acc_l)`; at the end ggml's 8-lane tree sum.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

use candle_core::quantized::GgmlDType;

use super::panel::PANEL;
#[cfg(target_arch = "x86_64")]
use super::panel::{next_panel, prefetch_next_panel, prefetch_stream, STREAM_ROWS};
#[cfg(target_arch = "x86_64")]
use super::row_slices;
use super::{PanelType, TileFn};
use crate::error::{Result, WickError};
use crate::kernels::cpu::blocks::{f16_at, Q6K, QK_K};
use crate::kernels::cpu::feats::Isa;
use crate::kernels::cpu::matmul::RowPos;
#[cfg(target_arch = "x86_64")]
use crate::kernels::cpu::q8::{quantize_q8k, quantize_rows, Act256};

const PAIR_QUANTS: usize = 6 * 64;
const PAIR_BYTES: usize = PAIR_QUANTS + 32 + 8;
/// Bytes of one block of one panel.
pub const BLOCK_BYTES: usize = PANEL / 2 * PAIR_BYTES;

/// GGUF Q6_K rows (`n` rows of `k / 256` blocks of 210 bytes: ql[128], qh[64], scales[16], d)
/// → panels.
fn pack(raw: &[u8], n: usize, k: usize, out: &mut [u8]) {
    let nb = k / QK_K;
    super::panel::pack_blocks(raw, n, k, QK_K, Q6K::BYTES, BLOCK_BYTES, out, |panel, b, c, blk| {
        let pair = &mut panel[((c / 2) * nb + b) * PAIR_BYTES..][..PAIR_BYTES];
        let side = c % 2;
        for h in 0..2 {
            let srcs = [
                &blk[Q6K::QL + 64 * h..][..32],
                &blk[Q6K::QL + 64 * h + 32..][..32],
                &blk[Q6K::QH + 32 * h..][..32],
            ];
            for (g, src) in srcs.into_iter().enumerate() {
                pair[(3 * h + g) * 64 + 32 * side..][..32].copy_from_slice(src);
            }
        }
        pair[PAIR_QUANTS + 16 * side..][..16].copy_from_slice(&blk[Q6K::SCALES..Q6K::D]);
        let d = f16_at(blk, Q6K::D);
        pair[PAIR_QUANTS + 32 + 4 * side..][..4].copy_from_slice(&d.to_le_bytes());
    })
}

/// Column `c`'s GGUF block `b` back out of a panel of `nb` blocks (`pack`'s inverse; `d` was
/// widened from f16, so it narrows back exactly).
fn unpack(panel: &[u8], nb: usize, b: usize, c: usize, blk: &mut [u8]) {
    let pair = &panel[((c / 2) * nb + b) * PAIR_BYTES..][..PAIR_BYTES];
    let side = c % 2;
    for h in 0..2 {
        let dsts = [Q6K::QL + 64 * h, Q6K::QL + 64 * h + 32, Q6K::QH + 32 * h];
        for (g, dst) in dsts.into_iter().enumerate() {
            blk[dst..][..32].copy_from_slice(&pair[(3 * h + g) * 64 + 32 * side..][..32]);
        }
    }
    blk[Q6K::SCALES..Q6K::D].copy_from_slice(&pair[PAIR_QUANTS + 16 * side..][..16]);
    let d = f32::from_le_bytes(pair[PAIR_QUANTS + 32 + 4 * side..][..4].try_into().unwrap_or_default());
    blk[Q6K::D..Q6K::D + 2].copy_from_slice(&half::f16::from_f32(d).to_le_bytes());
}

/// Q6_K's entry of `super::TYPES`: AVX-512 only (elsewhere the row kernel is as fast).
pub(super) const TYPE: PanelType = PanelType {
    dtype: GgmlDType::Q6K,
    qk: QK_K,
    block_bytes: BLOCK_BYTES,
    packs_on: |isa| isa == Isa::Avx512Vnni,
    pack,
    unpack,
    tiles,
};

/// Activations as q8_K blocks, and the AVX-512 tile over them.
#[cfg_attr(not(target_arch = "x86_64"), allow(unused_variables))]
fn tiles(isa: Isa, xs: &[f32], k: usize, _: &[RowPos]) -> Result<Box<TileFn>> {
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx512Vnni {
        let acts = quantize_rows(xs, k, quantize_q8k);
        return Ok(Box::new(move |panel, r0, rows, out, ldo| {
            let a = row_slices(&acts[r0..r0 + rows]);
            // SAFETY: AVX-512 checked above (`isa` comes from `feats::isa()`); rows of k/256
            // blocks; the driver owns out[r·ldo..+16] for each row.
            unsafe { tile(panel, &a[..rows], out, ldo) }
        }));
    }
    Err(WickError::Internal("Q6_K panels need AVX-512".into()))
}

/// Outputs of `acts.len()` (≤ 8) rows × 16 columns into `out[r·ldo + c]`.
///
/// # Safety
/// Needs AVX-512 F/BW (`feats::isa()` ≥ `Avx512Vnni`); every activation row has
/// `panel.len() / BLOCK_BYTES` blocks; the caller owns out[r·ldo..+16] for each row.
#[cfg(target_arch = "x86_64")]
unsafe fn tile(panel: &[u8], acts: &[&[Act256]], out: *mut f32, ldo: usize) {
    let nb = panel.len() / BLOCK_BYTES;
    by_rows!(tile_avx512, acts, panel, nb, out, ldo)
}

/// ggml's `hsum_float_8` on each 256-bit half.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn hsum8(v: __m256) -> f32 {
    let r = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
    let r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    _mm_cvtss_f32(_mm_add_ss(r, _mm_movehdup_ps(r)))
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")]
unsafe fn tile_avx512<const R: usize>(
    acts: [&[Act256]; R],
    panel: &[u8],
    nb: usize,
    out: *mut f32,
    ldo: usize,
) {
    let (m15, m3) = (_mm512_set1_epi8(15), _mm512_set1_epi8(3));
    // Lanes of chunk c's scale vector: s[2c] for each column's first 16 values, s[2c+1] next.
    let idx: [__m512i; 8] = std::array::from_fn(|c| {
        let v: [i16; 32] = std::array::from_fn(|i| (16 * (i / 16) + 2 * c + (i % 16) / 8) as i16);
        _mm512_loadu_si512(v.as_ptr() as *const _)
    });
    let d_idx = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
    for pair in 0..PANEL / 2 {
        let mut acc = [_mm512_setzero_ps(); R];
        for b in 0..nb {
            let p = panel.as_ptr().add((pair * nb + b) * PAIR_BYTES);
            if R <= STREAM_ROWS {
                prefetch_stream(p, PAIR_BYTES);
            }
            // Column pairs lie one after another, so the next pair's block is `nb` pairs on.
            prefetch_next_panel(p, PAIR_BYTES, next_panel(0, R, nb, PAIR_BYTES));
            let mut q = [_mm512_setzero_si512(); 8];
            for h in 0..2 {
                let l1 = _mm512_loadu_si512(p.add(3 * h * 64) as *const _);
                let l2 = _mm512_loadu_si512(p.add((3 * h + 1) * 64) as *const _);
                let hb = _mm512_loadu_si512(p.add((3 * h + 2) * 64) as *const _);
                // 16-bit shifts leak the neighbour byte's bits only above the masks.
                let top = |v: __m512i| _mm512_slli_epi16(_mm512_and_si512(v, m3), 4);
                q[4 * h] = _mm512_or_si512(_mm512_and_si512(l1, m15), top(hb));
                q[4 * h + 1] = _mm512_or_si512(_mm512_and_si512(l2, m15), top(_mm512_srli_epi16(hb, 2)));
                q[4 * h + 2] = _mm512_or_si512(
                    _mm512_and_si512(_mm512_srli_epi16(l1, 4), m15),
                    top(_mm512_srli_epi16(hb, 4)),
                );
                q[4 * h + 3] = _mm512_or_si512(
                    _mm512_and_si512(_mm512_srli_epi16(l2, 4), m15),
                    top(_mm512_srli_epi16(hb, 6)),
                );
            }
            let sc16 = _mm512_cvtepi8_epi16(_mm256_loadu_si256(p.add(PAIR_QUANTS) as *const __m256i));
            let mut scv_v = [_mm512_setzero_si512(); 8];
            for c in 0..8 {
                scv_v[c] = _mm512_permutexvar_epi16(idx[c], sc16);
            }
            let scv = scv_v;
            let dx = _mm512_permutexvar_ps(
                d_idx,
                _mm512_castps128_ps512(_mm_castsi128_ps(_mm_loadl_epi64(
                    p.add(PAIR_QUANTS + 32) as *const __m128i
                ))),
            );
            for r in 0..R {
                let y = acts[r].get_unchecked(b);
                let mut sumi = _mm512_setzero_si512();
                for c in 0..8 {
                    let yv = _mm512_broadcast_i64x4(_mm256_loadu_si256(
                        y.qs.as_ptr().add(32 * c) as *const __m256i
                    ));
                    // 63·127·2 fits the i16 pairs of maddubs.
                    sumi = _mm512_add_epi32(sumi, _mm512_madd_epi16(scv[c], _mm512_maddubs_epi16(q[c], yv)));
                }
                let bs = _mm512_broadcast_i64x4(_mm256_loadu_si256(y.bsums.as_ptr() as *const __m256i));
                let off = _mm512_slli_epi32(_mm512_madd_epi16(bs, sc16), 5);
                sumi = _mm512_sub_epi32(sumi, off);
                let d = _mm512_mul_ps(_mm512_set1_ps(y.d), dx);
                acc[r] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(sumi), acc[r]);
            }
        }
        for r in 0..R {
            *out.add(r * ldo + 2 * pair) = hsum8(_mm512_castps512_ps256(acc[r]));
            *out.add(r * ldo + 2 * pair + 1) = hsum8(_mm512_extractf32x8_ps(acc[r], 1));
        }
    }
}
