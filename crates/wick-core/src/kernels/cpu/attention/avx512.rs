//! Sixteen attention dots at once (AVX-512): one 16-lane accumulator per dot in a zmm, the
//! `reduce16` tree of all sixteen done with shuffles across registers. Each result has the bits
//! of the `dots` kernel of its order for its row. Public for the benches (`benches/kernels.rs`).

use std::arch::x86_64::*;

use half::f16;

use crate::cache::{KvType, PagedView, BLOCK_SIZE, QBLOCK};
use crate::kernels::cpu::feats::{isa, Isa};

/// Whether these kernels run here (`feats::isa` at AVX-512 VNNI).
pub fn available() -> bool {
    isa() == Isa::Avx512Vnni
}

/// The tree's first level for one accumulator: high half + low half.
#[inline(always)]
unsafe fn halve(a: __m512) -> __m256 {
    _mm256_add_ps(_mm512_extractf32x8_ps::<1>(a), _mm512_castps512_ps256(a))
}

/// The first two levels of `reduce16` for four accumulators at once (halves, then quarters):
/// dot `u`'s four partial sums in lanes `4u..4u + 4`.
#[inline(always)]
unsafe fn quarters4(a: &[__m512; 4]) -> __m512 {
    // Lanes i + (i + 8) of two accumulators side by side: [a.lo + a.hi | b.lo + b.hi].
    let pair = |a: __m512, b: __m512| {
        _mm512_add_ps(_mm512_shuffle_f32x4::<0x44>(a, b), _mm512_shuffle_f32x4::<0xEE>(a, b))
    };
    let (p, q) = (pair(a[0], a[1]), pair(a[2], a[3]));
    // Lanes i + (i + 4) of each of the four.
    _mm512_add_ps(_mm512_shuffle_f32x4::<0x88>(p, q), _mm512_shuffle_f32x4::<0xDD>(p, q))
}

/// `reduce16` of sixteen accumulators from their `quarters4` (dots `4k..4k + 4` in `r[k]`):
/// pairs, then the last level; dot `i` in lane `i`.
#[inline(always)]
unsafe fn finish16(r: &[__m512; 4]) -> __m512 {
    // Within each 128-bit lane: lanes i + (i + 2), then 0 + 1.
    let pairs = |a: __m512, b: __m512| {
        _mm512_add_ps(_mm512_shuffle_ps::<0x44>(a, b), _mm512_shuffle_ps::<0xEE>(a, b))
    };
    let (t, u) = (pairs(r[0], r[1]), pairs(r[2], r[3]));
    let sums = _mm512_add_ps(_mm512_shuffle_ps::<0x88>(t, u), _mm512_shuffle_ps::<0xDD>(t, u));
    // Lane 4j + m holds dot j + 4m.
    let order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    _mm512_permutexvar_ps(order, sums)
}

/// `reduce16` of sixteen accumulators from each one's `halve`: quarters, then pairs (all
/// additions between the same operands as the scalar tree).
#[inline(always)]
unsafe fn reduce_halves(t: &[__m256; 16]) -> [f32; 16] {
    let mut u = [_mm256_setzero_ps(); 8];
    for k in 0..8 {
        let lo = _mm256_permute2f128_ps::<0x20>(t[2 * k], t[2 * k + 1]);
        let hi = _mm256_permute2f128_ps::<0x31>(t[2 * k], t[2 * k + 1]);
        u[k] = _mm256_add_ps(hi, lo);
    }
    let mut v = [_mm256_setzero_ps(); 4];
    for k in 0..4 {
        let p = _mm256_shuffle_ps::<0x44>(u[2 * k], u[2 * k + 1]);
        let q = _mm256_shuffle_ps::<0xEE>(u[2 * k], u[2 * k + 1]);
        v[k] = _mm256_add_ps(p, q);
    }
    let mut out = [0f32; 16];
    for k in 0..2 {
        let w1 = _mm256_shuffle_ps::<0x88>(v[2 * k], v[2 * k + 1]);
        let w2 = _mm256_shuffle_ps::<0xDD>(v[2 * k], v[2 * k + 1]);
        let mut r = [0f32; 8];
        _mm256_storeu_ps(r.as_mut_ptr(), _mm256_add_ps(w1, w2));
        for (lane, &dot) in [0, 2, 4, 6, 1, 3, 5, 7].iter().enumerate() {
            out[8 * k + dot] = r[lane];
        }
    }
    out
}

/// Several new tokens' scores at positions `t0..t0 + 16` (one block) for `Q` f16-rounded
/// queries of KV head `g` (tinyBLAS order: one 16-lane accumulator per dot over chunks of 16,
/// then the tree). Four keys by `Q` queries are in flight at once, so each key chunk converted
/// from f16 serves every query and each query chunk loaded serves four keys.
///
/// # Safety
/// AVX-512 (`available()`); `t0 + 16` positions lie in the view, in one block; every `q.len()`
/// is the head size, a multiple of 16.
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")]
pub unsafe fn kq16_tile<const Q: usize>(
    kv: &PagedView<'_>,
    g: usize,
    t0: usize,
    qs: [&[f32]; Q],
) -> [[f32; 16]; Q] {
    let hd = qs[0].len();
    let keys = kv.keys(g, t0, 16).as_ptr();
    let mut quarters = [[_mm512_setzero_ps(); 4]; Q];
    for k0 in (0..16).step_by(4) {
        let mut acc = [[_mm512_setzero_ps(); Q]; 4];
        for c in (0..hd).step_by(16) {
            let kx: [__m512; 4] = std::array::from_fn(|u| {
                _mm512_cvtph_ps(_mm256_loadu_si256(keys.add((k0 + u) * hd + c) as *const __m256i))
            });
            for qi in 0..Q {
                let y = _mm512_loadu_ps(qs[qi].as_ptr().add(c));
                for u in 0..4 {
                    acc[u][qi] = _mm512_fmadd_ps(kx[u], y, acc[u][qi]);
                }
            }
        }
        for qi in 0..Q {
            quarters[qi][k0 / 4] = quarters4(&[acc[0][qi], acc[1][qi], acc[2][qi], acc[3][qi]]);
        }
    }
    std::array::from_fn(|qi| {
        let mut out = [0f32; 16];
        _mm512_storeu_ps(out.as_mut_ptr(), finish16(&quarters[qi]));
        out
    })
}

/// Several new tokens' outputs `d0..d0 + 16` of Σ_t p[t]·V[t] over positions `0..n` for `Q`
/// weight rows of KV head `g` (tinyBLAS order; lanes past `n`, the rows' common length, keep
/// their sums). Four dimensions by `Q` rows are in flight at once.
///
/// # Safety
/// AVX-512 (`available()`); the view holds positions `0..n` and dimensions `d0..d0 + 16`.
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")]
pub unsafe fn pv16_tile<const Q: usize>(
    kv: &PagedView<'_>,
    g: usize,
    d0: usize,
    ps: [&[f32]; Q],
) -> [[f32; 16]; Q] {
    const { assert!(BLOCK_SIZE.is_multiple_of(16)) };
    let n = ps[0].len();
    let mut quarters = [[_mm512_setzero_ps(); 4]; Q];
    for i0 in (0..16).step_by(4) {
        let mut acc = [[_mm512_setzero_ps(); Q]; 4];
        for j in 0..n.div_ceil(BLOCK_SIZE) {
            let run = kv.values(g, d0 + i0, 4, j).as_ptr();
            for off in (0..BLOCK_SIZE.min(n - j * BLOCK_SIZE)).step_by(16) {
                let c = j * BLOCK_SIZE + off;
                let lanes = (n - c).min(16);
                let v = |u: usize| run.add(u * BLOCK_SIZE + off);
                if lanes == 16 {
                    let vx: [__m512; 4] =
                        std::array::from_fn(|u| _mm512_cvtph_ps(_mm256_loadu_si256(v(u) as *const __m256i)));
                    for qi in 0..Q {
                        let y = _mm512_loadu_ps(ps[qi].as_ptr().add(c));
                        for u in 0..4 {
                            acc[u][qi] = _mm512_fmadd_ps(vx[u], y, acc[u][qi]);
                        }
                    }
                } else {
                    let m: __mmask16 = ((1u32 << lanes) - 1) as u16;
                    let vx: [__m512; 4] = std::array::from_fn(|u| {
                        _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, v(u) as *const i16))
                    });
                    for qi in 0..Q {
                        let y = _mm512_maskz_loadu_ps(m, ps[qi].as_ptr().add(c));
                        for u in 0..4 {
                            acc[u][qi] = _mm512_mask3_fmadd_ps(vx[u], y, acc[u][qi], m);
                        }
                    }
                }
            }
        }
        for qi in 0..Q {
            quarters[qi][i0 / 4] = quarters4(&[acc[0][qi], acc[1][qi], acc[2][qi], acc[3][qi]]);
        }
    }
    std::array::from_fn(|qi| {
        let mut out = [0f32; 16];
        _mm512_storeu_ps(out.as_mut_ptr(), finish16(&quarters[qi]));
        out
    })
}

/// (a0+a2)+(a1+a3); `Halves` finishes the tree.
#[inline(always)]
unsafe fn fold(a: &[__m512; 4]) -> __m512 {
    _mm512_add_ps(_mm512_add_ps(a[0], a[2]), _mm512_add_ps(a[1], a[3]))
}

/// Each head's sixteen folded and halved dots (`Halves::set`), summed up.
struct Halves<const H: usize>([[std::mem::MaybeUninit<__m256>; 16]; H]);

impl<const H: usize> Halves<H> {
    /// Uninitialised: zeroing 16·H vectors per call was a 3 KB memset, a visible share of
    /// attention (benches/RESULTS.md).
    #[inline(always)]
    fn new() -> Self {
        Self([[std::mem::MaybeUninit::uninit(); 16]; H])
    }
    #[inline(always)]
    unsafe fn set(&mut self, h: usize, i: usize, a: &[__m512; 4]) {
        self.0[h][i].write(halve(fold(a)));
    }
    /// SAFETY: `set` was called for every (head, dot).
    #[inline(always)]
    unsafe fn reduce(&self) -> [[f32; 16]; H] {
        let mut out = [std::mem::MaybeUninit::<[f32; 16]>::uninit(); H];
        for (o, t) in out.iter_mut().zip(&self.0) {
            o.write(reduce_halves(&*(t.as_ptr() as *const [__m256; 16])));
        }
        // SAFETY: every head's row was written just above.
        std::mem::transmute_copy(&out)
    }
}

/// One new token's scores at positions `t0..t0 + 16` for `H` query heads that share KV
/// head `g` (`dot_f16_single` order; `t0` a multiple of 16, each `q.len()` of 64): each
/// key is converted from f16 once for all of them.
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")]
///
/// # Safety
/// AVX-512 (`available()`); `t0 + 16` positions lie in the view, in one block.
pub unsafe fn kq16_single<const H: usize>(
    kv: &PagedView<'_>,
    g: usize,
    t0: usize,
    qs: [&[f32]; H],
) -> [[f32; 16]; H] {
    let hd = qs[0].len();
    let keys = kv.keys(g, t0, 16).as_ptr();
    let mut folded = Halves::<H>::new();
    // Two keys per round: each key's dots end in a chain of adds, and two independent
    // chains side by side overlap better (even on one thread).
    for i in (0..16).step_by(2) {
        let mut a = [[[_mm512_setzero_ps(); 4]; H]; 2];
        for s in (0..hd).step_by(64) {
            for (u, a) in a.iter_mut().enumerate() {
                let k = keys.add((i + u) * hd + s);
                let kx: [__m512; 4] = std::array::from_fn(|j| {
                    _mm512_cvtph_ps(_mm256_loadu_si256(k.add(16 * j) as *const __m256i))
                });
                for h in 0..H {
                    for j in 0..4 {
                        a[h][j] =
                            _mm512_fmadd_ps(kx[j], _mm512_loadu_ps(qs[h].as_ptr().add(s + 16 * j)), a[h][j]);
                    }
                }
            }
        }
        for (u, a) in a.iter().enumerate() {
            for h in 0..H {
                folded.set(h, i + u, &a[h]);
            }
        }
    }
    folded.reduce()
}

/// One new token's outputs `d0..d0 + 16` of Σ_t p[t]·V[t] for `H` query heads sharing KV
/// head `g` (`dot_f16_single_paged` order: a 64-step is one KV block; positions past
/// `p.len()` count as zero; all `ps` one length).
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")]
///
/// # Safety
/// AVX-512 (`available()`); the view holds the positions of `ps` and dimensions `d0..d0 + 16`.
pub unsafe fn pv16_single<const H: usize>(
    kv: &PagedView<'_>,
    g: usize,
    d0: usize,
    ps: [&[f32]; H],
) -> [[f32; 16]; H] {
    // Dimensions per pass over the positions: each weight vector loaded serves that many
    // dimensions (it was loaded once per dimension: at 4k positions the V product read its
    // weights 16 times per 16 dimensions and ran far longer than the K product over the
    // same bytes). 4·D·H accumulators stay within the 32 registers.
    match H {
        1 => pv16_single_d::<H, 4>(kv, g, d0, ps),
        2 => pv16_single_d::<H, 2>(kv, g, d0, ps),
        _ => pv16_single_d::<H, 1>(kv, g, d0, ps),
    }
}

/// `pv16_single` over `D` dimensions at a time: every accumulator sees the same fmas in the
/// same order as one dimension at a time, so the sums are the same bits.
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")]
#[inline]
unsafe fn pv16_single_d<const H: usize, const D: usize>(
    kv: &PagedView<'_>,
    g: usize,
    d0: usize,
    ps: [&[f32]; H],
) -> [[f32; 16]; H] {
    const { assert!(BLOCK_SIZE == 64) };
    const { assert!(16 % D == 0) };
    let n = ps[0].len();
    let (full, rem) = (n / 64, n % 64);
    let masks: [__mmask16; 4] = std::array::from_fn(|j| {
        let lanes = rem.saturating_sub(16 * j).min(16);
        ((1u32 << lanes) - 1) as u16
    });
    let mut folded = Halves::<H>::new();
    for i0 in (0..16).step_by(D) {
        let mut a = [[[_mm512_setzero_ps(); 4]; H]; D];
        for j in 0..full + usize::from(rem > 0) {
            // A plain loop (not `array::from_fn`): nothing in this loop may stay a call, or
            // the accumulators are spilled around it.
            let mut vs = [std::ptr::null::<f16>(); D];
            for (di, v) in vs.iter_mut().enumerate() {
                *v = kv.value_run(g, d0 + i0 + di, j).as_ptr();
            }
            let m = if j < full { None } else { Some(masks) };
            for jj in 0..4 {
                // Sixteen positions past the end add exact zeros to a sum that is never −0
                // (it starts at +0): skipping them changes nothing.
                if matches!(m, Some(m) if m[jj] == 0) {
                    continue;
                }
                let pv: [__m512; H] = std::array::from_fn(|h| {
                    let p = ps[h].as_ptr().add(64 * j + 16 * jj);
                    match m {
                        None => _mm512_loadu_ps(p),
                        Some(m) => _mm512_maskz_loadu_ps(m[jj], p),
                    }
                });
                for di in 0..D {
                    let v = vs[di].add(16 * jj);
                    let vx = match m {
                        None => _mm512_cvtph_ps(_mm256_loadu_si256(v as *const __m256i)),
                        Some(m) => _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m[jj], v as *const i16)),
                    };
                    for h in 0..H {
                        a[di][h][jj] = _mm512_fmadd_ps(vx, pv[h], a[di][h][jj]);
                    }
                }
            }
        }
        for (di, ad) in a.iter().enumerate() {
            for h in 0..H {
                folded.set(h, i0 + di, &ad[h]);
            }
        }
    }
    folded.reduce()
}

/// `blocks::reduce16` in registers (the same additions).
#[inline(always)]
pub(super) unsafe fn reduce16(x: __m512) -> f32 {
    let t = _mm256_add_ps(_mm512_extractf32x8_ps::<1>(x), _mm512_castps512_ps256(x));
    let u = _mm_add_ps(_mm256_extractf128_ps::<1>(t), _mm256_castps256_ps128(t));
    // Lanes 0, 1: u0 + u2, u1 + u3; then their sum.
    let v = _mm_add_ps(u, _mm_movehl_ps(u, u));
    _mm_cvtss_f32(_mm_add_ss(v, _mm_movehdup_ps(v)))
}

/// `super::softmax_f16` for the AVX-512 `expf` (lengths are whole 16-chunks).
#[target_feature(enable = "avx512f,avx512dq,f16c")]
pub(super) unsafe fn softmax_f16(w: &[f32], p: &mut [f32]) {
    let mut m = _mm512_set1_ps(f32::NEG_INFINITY);
    for c in (0..p.len()).step_by(16) {
        m = _mm512_max_ps(m, _mm512_loadu_ps(w.as_ptr().add(c)));
    }
    let m = _mm512_set1_ps(_mm512_reduce_max_ps(m));
    let mut sum = 0f64;
    for c in (0..p.len()).step_by(16) {
        let e = crate::kernels::cpu::expf::expf16(_mm512_sub_ps(_mm512_loadu_ps(w.as_ptr().add(c)), m));
        _mm512_storeu_ps(p.as_mut_ptr().add(c), e);
        sum += reduce16(e) as f64;
    }
    let inv = _mm512_set1_ps((1.0 / sum) as f32);
    for c in (0..p.len()).step_by(16) {
        let x = _mm512_mul_ps(_mm512_loadu_ps(p.as_ptr().add(c)), inv);
        let h = _mm512_cvtps_ph::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(x);
        _mm512_storeu_ps(p.as_mut_ptr().add(c), _mm512_cvtph_ps(h));
    }
}

/// Σ_t p_h[t]·v[t] over positions `0..t_len` for `H` weight rows `ps` of KV head `g`'s
/// quantized value rows (`ty`: Q8_0 or Q4_0), dimensions `d0..d0 + 64` (two blocks): per output
/// one fma per position in position order, positions weighing exactly 0 skipped — the bits of
/// `quant_kv`'s portable loop.
///
/// # Safety
/// AVX-512 (`available()`); the view holds positions `0..t_len` with rows of at least
/// `d0 + 64` values; every `ps[h]` has `t_len` weights.
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx512vnni,f16c")]
pub unsafe fn pv64_quant<const H: usize>(
    kv: &PagedView<'_>,
    g: usize,
    ty: KvType,
    t_len: usize,
    d0: usize,
    ps: [&[f32]; H],
) -> [[f32; 64]; H] {
    let mut acc = [[_mm512_setzero_ps(); 4]; H];
    let (bytes, b0) = (if ty == KvType::Q8_0 { 34 } else { 18 }, d0 / QBLOCK);
    let row_bytes = ty.row_bytes(kv.head_dim);
    // Block by block: a block's rows lie one after another (the next block's are asked for
    // ahead: blocks are scattered, too far apart for the hardware prefetcher).
    for t0 in (0..t_len).step_by(BLOCK_SIZE) {
        let n = (t_len - t0).min(BLOCK_SIZE);
        if t0 + BLOCK_SIZE < t_len {
            let next = kv.value_rows(g, t0 + BLOCK_SIZE, (t_len - t0 - BLOCK_SIZE).min(BLOCK_SIZE));
            for line in next.chunks(64) {
                _mm_prefetch::<_MM_HINT_T1>(line.as_ptr() as *const i8);
            }
        }
        let rows = kv.value_rows(g, t0, n).as_ptr();
        for t in t0..t0 + n {
            let row = rows.add((t - t0) * row_bytes);
            let mut v = [_mm512_setzero_ps(); 4];
            for b in 0..2 {
                let blk = row.add((b0 + b) * bytes);
                let bits = u16::from_le_bytes([*blk, *blk.add(1)]) as i32;
                let d = _mm512_set1_ps(_mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits))));
                let (lo, hi) = match ty {
                    KvType::Q8_0 => (
                        _mm512_cvtepi8_epi32(_mm_loadu_si128(blk.add(2) as *const __m128i)),
                        _mm512_cvtepi8_epi32(_mm_loadu_si128(blk.add(18) as *const __m128i)),
                    ),
                    _ => {
                        let q = _mm512_cvtepu8_epi32(_mm_loadu_si128(blk.add(2) as *const __m128i));
                        let (m, eight) = (_mm512_set1_epi32(0x0F), _mm512_set1_epi32(8));
                        (
                            _mm512_sub_epi32(_mm512_and_si512(q, m), eight),
                            _mm512_sub_epi32(_mm512_and_si512(_mm512_srli_epi32(q, 4), m), eight),
                        )
                    }
                };
                v[2 * b] = _mm512_mul_ps(d, _mm512_cvtepi32_ps(lo));
                v[2 * b + 1] = _mm512_mul_ps(d, _mm512_cvtepi32_ps(hi));
            }
            for h in 0..H {
                let pt = *ps[h].get_unchecked(t);
                if pt == 0.0 {
                    continue;
                }
                let pv = _mm512_set1_ps(pt);
                for c in 0..4 {
                    acc[h][c] = _mm512_fmadd_ps(pv, v[c], acc[h][c]);
                }
            }
        }
    }
    let mut out = [[0f32; 64]; H];
    for h in 0..H {
        for c in 0..4 {
            _mm512_storeu_ps(out[h].as_mut_ptr().add(16 * c), acc[h][c]);
        }
    }
    out
}
