//! Q4_K's x86 tiles (AVX-512 VNNI and AVX2; the layout and the order they follow: `super`).

use std::arch::x86_64::*;

use super::super::panel::{
    bcast4, chains, load_f16x16, load_f16x8, next_panel, prefetch_next_panel, prefetch_stream, sum_chains,
    CHAINS, STREAM_ROWS,
};
use super::{quants_at, scales_at, BLOCK_BYTES, PANEL};
use crate::kernels::cpu::q8::Act256;

/// Numbers the matmul passes, so that a thread's unpacked scales are never taken for another
/// pass's panel at the same address.
pub(super) static PASSES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// One block's scales and mins unpacked: per pair, `v` in order.
type Unpacked = [[u8; 64]; 4];

/// The unpacked blocks of the panel at `at` in pass `pass`.
struct UnpackedPanel {
    pass: u64,
    at: usize,
    blocks: Vec<Unpacked>,
}

thread_local! {
    /// The panel this thread last ran more than four rows of.
    static UNPACKED: std::cell::RefCell<UnpackedPanel> =
        const { std::cell::RefCell::new(UnpackedPanel { pass: 0, at: 0, blocks: Vec::new() }) };
}

/// `Kernels::vnni` for more than four rows, whose groups of four would each unpack every
/// block's scales again: they are unpacked once per panel, pass and thread (a pass of more than
/// `MAX_ROWS` rows meets each panel once per `MAX_ROWS` rows). Safety: as `Kernels::vnni`.
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")]
pub(super) unsafe fn vnni_unpacked(
    pass: u64,
    panel: &[u8],
    acts: &[&[Act256]],
    pairs: &[bool],
    out: *mut f32,
    ldo: usize,
) {
    let nb = panel.len() / BLOCK_BYTES;
    UNPACKED.with_borrow_mut(|u| {
        let at = panel.as_ptr() as usize;
        if (u.pass, u.at) != (pass, at) {
            u.blocks.clear();
            u.blocks.reserve(nb);
            unpack_into(panel, nb, u.blocks.as_mut_ptr());
            // SAFETY: `unpack_into` wrote the first `nb` entries, within the capacity reserved.
            u.blocks.set_len(nb);
            (u.pass, u.at) = (pass, at);
        }
        for (i, four) in acts.chunks(4).enumerate() {
            let next = next_panel(i, acts.len(), nb, BLOCK_BYTES);
            let wide = Some(&u.blocks[..]);
            by_rows!(tile_vnni, four, &pairs[4 * i..], panel, nb, out.add(4 * i * ldo), ldo, next, wide)
        }
    })
}

/// Every block's scales and mins of `panel` unpacked to `dst[..nb]`. Safety: AVX-512BW is
/// present and `dst` has room for `nb` entries.
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl")]
unsafe fn unpack_into(panel: &[u8], nb: usize, dst: *mut Unpacked) {
    for b in 0..nb {
        for q in 0..4 {
            let e = expand_avx512(panel.as_ptr().add(b * BLOCK_BYTES + scales_at(q)));
            _mm512_storeu_si512((*dst.add(b))[q].as_mut_ptr() as *mut _, e);
        }
    }
}

/// A pair's 64 scales and mins (`v`, in order) from its 48 bytes at `s`: the low nibbles split,
/// each 16-value lane's top bits shifted down from their place in the last 16 bytes.
#[inline(always)]
unsafe fn expand_avx512(s: *const u8) -> __m512i {
    let low4 = _mm256_set1_epi8(0x0F);
    let nib = _mm256_loadu_si256(s as *const __m256i);
    let lo = _mm256_and_si256(nib, low4);
    let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(nib), low4);
    let tops = _mm512_broadcast_i32x4(_mm_loadu_si128(s.add(32) as *const __m128i));
    // Lane q (values 16q..16q+16) takes bits 2q, 2q+1: a word shift, whose spill from the
    // next byte lands above the two bits kept.
    let w = |n: i64| n * 0x0001_0001_0001_0001;
    let by = _mm512_set_epi64(w(6), w(6), w(4), w(4), w(2), w(2), 0, 0);
    let top = _mm512_and_si512(_mm512_srlv_epi16(tops, by), _mm512_set1_epi8(0x03));
    let low = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi);
    _mm512_or_si512(low, _mm512_slli_epi16::<4>(top))
}

/// `expand_avx512` on AVX2: (v[0..32], v[32..64]).
#[inline(always)]
unsafe fn expand_avx2(s: *const u8) -> (__m256i, __m256i) {
    let low4 = _mm256_set1_epi8(0x0F);
    let nib = _mm256_loadu_si256(s as *const __m256i);
    let tops = _mm256_broadcastsi128_si256(_mm_loadu_si128(s.add(32) as *const __m128i));
    // As in `expand_avx512`, with a dword shift (AVX2 has no word one) per 16-value lane.
    let top = |a: i32, b: i32| {
        let t = _mm256_srlv_epi32(tops, _mm256_set_epi32(b, b, b, b, a, a, a, a));
        _mm256_slli_epi16::<4>(_mm256_and_si256(t, _mm256_set1_epi8(0x03)))
    };
    let lo = _mm256_and_si256(nib, low4);
    let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(nib), low4);
    (_mm256_or_si256(lo, top(0, 2)), _mm256_or_si256(hi, top(4, 6)))
}

/// `wide`: the panel's blocks' scales unpacked already (else each pair's are unpacked here).
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn tile_vnni<const R: usize>(
    acts: [&[Act256]; R],
    pairs: &[bool],
    panel: &[u8],
    nb: usize,
    out: *mut f32,
    ldo: usize,
    next: usize,
    wide: Option<&[Unpacked]>,
) {
    let mask = _mm512_set1_epi8(0x0F);
    let mut acc = [_mm512_setzero_ps(); R];
    let mut acc_min = [_mm512_setzero_ps(); R];
    for b in 0..nb {
        let blk = panel.as_ptr().add(b * BLOCK_BYTES);
        let mut ys = [acts[0].get_unchecked(b); R];
        for r in 1..R {
            ys[r] = acts[r].get_unchecked(b);
        }
        let d = load_f16x16(blk);
        let dmin = load_f16x16(blk.add(2 * PANEL));
        let mut dd_v = [_mm512_setzero_ps(); R];
        for r in 0..R {
            dd_v[r] = _mm512_mul_ps(d, _mm512_set1_ps(ys[r].d));
        }
        let dd = dd_v;
        let mut dm_v = [_mm512_setzero_ps(); R];
        for r in 0..R {
            dm_v[r] = _mm512_mul_ps(dmin, _mm512_set1_ps(ys[r].d));
        }
        let dm = dm_v;
        let mut is_tot = [_mm512_setzero_si512(); R];
        let mut im_tot = [_mm512_setzero_si512(); R];
        for p in 0..4 {
            // Independent accumulator chains so few rows do not wait on `vpdpbusd` latency.
            let mut even = [[_mm512_setzero_si512(); R]; CHAINS];
            let mut odd = [[_mm512_setzero_si512(); R]; CHAINS];
            for t in 0..8 {
                let ch = t % chains::<R>();
                // Spread over the block's steps (a burst of 40 stalls the load queue).
                if R <= STREAM_ROWS {
                    prefetch_stream(blk.add(BLOCK_BYTES / 32 * (8 * p + t)), 64);
                }
                prefetch_next_panel(blk.add(BLOCK_BYTES / 32 * (8 * p + t)), 64, next);
                let raw = _mm512_loadu_si512(blk.add(quants_at(8 * p + t)) as *const _);
                let lo = _mm512_and_si512(raw, mask);
                // High nibbles in place (16·q): one op fewer per step, divided out below.
                let hi = _mm512_andnot_si512(mask, raw);
                for r in 0..R {
                    let q = ys[r].qs.as_ptr().add(64 * p + 4 * t);
                    even[ch][r] = _mm512_dpbusd_epi32(even[ch][r], lo, _mm512_set1_epi32(bcast4(q)));
                    odd[ch][r] = _mm512_dpbusd_epi32(odd[ch][r], hi, _mm512_set1_epi32(bcast4(q.add(32))));
                }
            }
            let mut even_v = [_mm512_setzero_si512(); R];
            for r in 0..R {
                even_v[r] = sum_chains::<R>(&even, r);
            }
            let even = even_v;
            let mut odd_v = [_mm512_setzero_si512(); R];
            for r in 0..R {
                // Σ 16·q·y is a multiple of 16: the arithmetic shift is exact.
                odd_v[r] = _mm512_srai_epi32::<4>(sum_chains::<R>(&odd, r));
            }
            let odd = odd_v;
            let v = match wide {
                Some(w) => _mm512_loadu_si512(w.get_unchecked(b)[p].as_ptr() as *const _),
                None => expand_avx512(blk.add(scales_at(p))),
            };
            let s_even = _mm512_cvtepu8_epi32(_mm512_castsi512_si128(v));
            let s_odd = _mm512_cvtepu8_epi32(_mm512_extracti32x4_epi32::<1>(v));
            let mins = _mm512_cvtepu8_epi16(_mm512_extracti64x4_epi64::<1>(v));
            for r in 0..R {
                let isum =
                    _mm512_add_epi32(_mm512_mullo_epi32(even[r], s_even), _mm512_mullo_epi32(odd[r], s_odd));
                let imin = _mm512_madd_epi16(mins, _mm512_set1_epi32(ys[r].pair_sums[p]));
                if *pairs.get_unchecked(r) {
                    acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), dd[r], acc[r]);
                    acc_min[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(imin), dm[r], acc_min[r]);
                } else {
                    is_tot[r] = _mm512_add_epi32(is_tot[r], isum);
                    im_tot[r] = _mm512_add_epi32(im_tot[r], imin);
                }
            }
        }
        for r in 0..R {
            if !*pairs.get_unchecked(r) {
                acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is_tot[r]), dd[r], acc[r]);
                acc_min[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(im_tot[r]), dm[r], acc_min[r]);
            }
        }
    }
    for r in 0..R {
        _mm512_storeu_ps(out.add(r * ldo), _mm512_sub_ps(acc[r], acc_min[r]));
    }
}

/// AVX2: each 32-byte half of a group is 8 columns; `maddubs` pairs (≤ 2·15·127) summed over
/// a sub-block's 8 steps stay within i16 (≤ 30480), one `madd` per sub-block makes them i32.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn tile_avx2<const R: usize>(
    acts: [&[Act256]; R],
    pairs: &[bool],
    panel: &[u8],
    nb: usize,
    out: *mut f32,
    ldo: usize,
) {
    let mask = _mm256_set1_epi8(0x0F);
    let ones = _mm256_set1_epi16(1);
    let mut acc = [[_mm256_setzero_ps(); 2]; R];
    let mut acc_min = [[_mm256_setzero_ps(); 2]; R];
    for b in 0..nb {
        let blk = panel.as_ptr().add(b * BLOCK_BYTES);
        let mut ys = [acts[0].get_unchecked(b); R];
        for r in 1..R {
            ys[r] = acts[r].get_unchecked(b);
        }
        for half in 0..2 {
            let d = load_f16x8(blk.add(16 * half));
            let dmin = load_f16x8(blk.add(2 * PANEL + 16 * half));
            let mut dd_v = [_mm256_setzero_ps(); R];
            for r in 0..R {
                dd_v[r] = _mm256_mul_ps(d, _mm256_set1_ps(ys[r].d));
            }
            let dd = dd_v;
            let mut dm_v = [_mm256_setzero_ps(); R];
            for r in 0..R {
                dm_v[r] = _mm256_mul_ps(dmin, _mm256_set1_ps(ys[r].d));
            }
            let dm = dm_v;
            let mut is_tot = [_mm256_setzero_si256(); R];
            let mut im_tot = [_mm256_setzero_si256(); R];
            for p in 0..4 {
                let mut even = [_mm256_setzero_si256(); R];
                let mut odd = [_mm256_setzero_si256(); R];
                for t in 0..8 {
                    // As the AVX-512 tile: without it the streamed one-row GEMV over this layout
                    // took 107 µs against the byte layout's 67 (`kernel_timing -- packed`,
                    // WICK_ISA=avx2); with it 52.
                    if R <= STREAM_ROWS && half == 0 {
                        prefetch_stream(blk.add(BLOCK_BYTES / 32 * (8 * p + t)), 64);
                    }
                    let raw = _mm256_loadu_si256(blk.add(quants_at(8 * p + t) + 32 * half) as *const __m256i);
                    let lo = _mm256_and_si256(raw, mask);
                    let hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), mask);
                    for r in 0..R {
                        let q = ys[r].qs.as_ptr().add(64 * p + 4 * t);
                        even[r] =
                            _mm256_add_epi16(even[r], _mm256_maddubs_epi16(lo, _mm256_set1_epi32(bcast4(q))));
                        odd[r] = _mm256_add_epi16(
                            odd[r],
                            _mm256_maddubs_epi16(hi, _mm256_set1_epi32(bcast4(q.add(32)))),
                        );
                    }
                }
                // This half's 8 columns: bytes 8·half.. of each scale row, 16·half.. of the mins.
                let (scales, mins) = expand_avx2(blk.add(scales_at(p)));
                let cols = |x: __m128i| if half == 0 { x } else { _mm_srli_si128::<8>(x) };
                let s_even = _mm256_cvtepu8_epi32(cols(_mm256_castsi256_si128(scales)));
                let s_odd = _mm256_cvtepu8_epi32(cols(_mm256_extracti128_si256::<1>(scales)));
                let mins = _mm256_cvtepu8_epi16(match half {
                    0 => _mm256_castsi256_si128(mins),
                    _ => _mm256_extracti128_si256::<1>(mins),
                });
                for r in 0..R {
                    let e = _mm256_mullo_epi32(_mm256_madd_epi16(even[r], ones), s_even);
                    let o = _mm256_mullo_epi32(_mm256_madd_epi16(odd[r], ones), s_odd);
                    let isum = _mm256_add_epi32(e, o);
                    let imin = _mm256_madd_epi16(mins, _mm256_set1_epi32(ys[r].pair_sums[p]));
                    let (a, am) = (&mut acc[r][half], &mut acc_min[r][half]);
                    if *pairs.get_unchecked(r) {
                        *a = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), dd[r], *a);
                        *am = _mm256_fmadd_ps(_mm256_cvtepi32_ps(imin), dm[r], *am);
                    } else {
                        is_tot[r] = _mm256_add_epi32(is_tot[r], isum);
                        im_tot[r] = _mm256_add_epi32(im_tot[r], imin);
                    }
                }
            }
            for r in 0..R {
                if !*pairs.get_unchecked(r) {
                    let (a, am) = (&mut acc[r][half], &mut acc_min[r][half]);
                    *a = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is_tot[r]), dd[r], *a);
                    *am = _mm256_fmadd_ps(_mm256_cvtepi32_ps(im_tot[r]), dm[r], *am);
                }
            }
        }
    }
    for r in 0..R {
        _mm256_storeu_ps(out.add(r * ldo), _mm256_sub_ps(acc[r][0], acc_min[r][0]));
        _mm256_storeu_ps(out.add(r * ldo + 8), _mm256_sub_ps(acc[r][1], acc_min[r][1]));
    }
}
