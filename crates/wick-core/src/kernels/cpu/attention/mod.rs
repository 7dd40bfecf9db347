//! Attention kernels over the paged f16 KV pool, bit-identical to `models::cpu_attention`'s
//! reference (llama.cpp's CPU order: `ggml_vec_dot_f16` for one new token, tinyBLAS for
//! several; see that file), but vectorised (F16C converts, one fma per lane as the
//! reference) and spread over `ops::pool` by (token, head).

use half::f16;

use super::expf::{exp_variant, ggml_expf, ExpVariant};
use super::pool::{self, SyncPtr};
use crate::cache::{PagedView, BLOCK_SIZE};

/// `_mm512_reduce_add_ps`: halves, then quarters, then pairs.
#[inline(always)]
pub(crate) fn reduce16(a: &[f32; 16]) -> f32 {
    let mut t = [0f32; 8];
    for i in 0..8 {
        t[i] = a[i + 8] + a[i];
    }
    let u = [t[4] + t[0], t[5] + t[1], t[6] + t[2], t[7] + t[3]];
    (u[0] + u[2]) + (u[1] + u[3])
}

fn avx2() -> bool {
    super::simd::has_avx2()
}

/// tinyBLAS order over `x.len()` values (16 lanes, chunks of 16); a last partial chunk counts
/// as zero-padded (lanes past the end keep their sum).
pub fn dot_f16_tiled(x: &[f16], y: &[f32]) -> f32 {
    debug_assert_eq!(x.len(), y.len());
    #[cfg(target_arch = "x86_64")]
    if avx2() {
        // Safety: AVX2/FMA/F16C checked.
        return unsafe { avx::tiled(x, y) };
    }
    let mut acc = [0f32; 16];
    for (xc, yc) in x.chunks(16).zip(y.chunks(16)) {
        for (l, s) in acc.iter_mut().enumerate().take(xc.len()) {
            *s = xc[l].to_f32().mul_add(yc[l], *s);
        }
    }
    reduce16(&acc)
}

/// `ggml_vec_dot_f16` order over `n >= x.len()` values, those past `x.len()` zero: 4×16 lanes
/// over steps of 64, folded (a0+a2)+(a1+a3), tree sum, the `n % 64` tail added in f64.
pub fn dot_f16_single(x: &[f16], y: &[f32], n: usize) -> f32 {
    debug_assert_eq!(x.len(), y.len());
    let np = n & !63;
    #[cfg(target_arch = "x86_64")]
    if avx2() {
        // Safety: AVX2/FMA/F16C checked.
        return unsafe { avx::single(x, y, n) };
    }
    let xv = |i: usize| if i < x.len() { x[i].to_f32() } else { 0.0 };
    let yv = |i: usize| if i < y.len() { y[i] } else { 0.0 };
    let mut acc = [[0f32; 16]; 4];
    for base in (0..np).step_by(64) {
        for (j, a) in acc.iter_mut().enumerate() {
            for (l, s) in a.iter_mut().enumerate() {
                let i = base + 16 * j + l;
                *s = xv(i).mul_add(yv(i), *s);
            }
        }
    }
    let mut folded = [0f32; 16];
    for l in 0..16 {
        folded[l] = (acc[0][l] + acc[2][l]) + (acc[1][l] + acc[3][l]);
    }
    let mut sum = reduce16(&folded) as f64;
    for i in np..n {
        sum += (xv(i) * yv(i)) as f64;
    }
    sum as f32
}

/// `dot_f16_tiled` over positions `0..y.len()` of one value row stored block by block
/// (`run(j)`: block j's `BLOCK_SIZE` values). Blocks are whole 16-chunks, so the lanes carry
/// from block to block exactly as over one contiguous row.
pub fn dot_f16_tiled_paged<'a>(run: impl Fn(usize) -> &'a [f16], y: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if avx2() {
        // Safety: AVX2/FMA/F16C checked.
        return unsafe { avx::tiled_paged(&run, y) };
    }
    dot_f16_tiled(&gather(&run, y.len()), y)
}

/// `dot_f16_single` over positions `0..n` (a multiple of 64) of one value row stored block by
/// block, values at and past `y.len()` zero. Blocks are whole 64-steps.
pub fn dot_f16_single_paged<'a>(run: impl Fn(usize) -> &'a [f16], y: &[f32], n: usize) -> f32 {
    debug_assert!(n.is_multiple_of(64) && n >= y.len());
    #[cfg(target_arch = "x86_64")]
    if avx2() {
        // Safety: AVX2/FMA/F16C checked.
        return unsafe { avx::single_paged(&run, y, n) };
    }
    dot_f16_single(&gather(&run, y.len()), y, n)
}

fn gather<'a>(run: &impl Fn(usize) -> &'a [f16], len: usize) -> Vec<f16> {
    let mut x = Vec::with_capacity(len);
    for j in 0..len.div_ceil(BLOCK_SIZE) {
        let r = run(j);
        x.extend_from_slice(&r[..(len - j * BLOCK_SIZE).min(BLOCK_SIZE)]);
    }
    x
}

#[cfg(target_arch = "x86_64")]
mod avx {
    use std::arch::x86_64::*;

    use half::f16;

    #[inline(always)]
    unsafe fn load_f16(x: *const f16) -> __m256 {
        _mm256_cvtph_ps(_mm_loadu_si128(x as *const __m128i))
    }

    #[inline(always)]
    unsafe fn store16(lo: __m256, hi: __m256) -> [f32; 16] {
        let mut a = [0f32; 16];
        _mm256_storeu_ps(a.as_mut_ptr(), lo);
        _mm256_storeu_ps(a.as_mut_ptr().add(8), hi);
        a
    }

    /// One 64-step of `ggml_vec_dot_f16`: 4×16 lanes (8 vectors) each take one fma.
    #[inline(always)]
    unsafe fn step64(acc: &mut [__m256; 8], x: *const f16, y: *const f32) {
        for (v, a) in acc.iter_mut().enumerate() {
            *a = _mm256_fmadd_ps(load_f16(x.add(8 * v)), _mm256_loadu_ps(y.add(8 * v)), *a);
        }
    }

    /// Accumulator j holds lanes 16j..16j+16 as vectors 2j (low 8) and 2j+1 (high 8): fold
    /// (a0+a2)+(a1+a3), then the 16-lane tree sum.
    #[inline(always)]
    unsafe fn fold64(acc: &[__m256; 8]) -> f32 {
        let f_lo = _mm256_add_ps(_mm256_add_ps(acc[0], acc[4]), _mm256_add_ps(acc[2], acc[6]));
        let f_hi = _mm256_add_ps(_mm256_add_ps(acc[1], acc[5]), _mm256_add_ps(acc[3], acc[7]));
        super::reduce16(&store16(f_lo, f_hi))
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn tiled(x: &[f16], y: &[f32]) -> f32 {
        let n = x.len();
        let full = n & !15;
        let (mut lo, mut hi) = (_mm256_setzero_ps(), _mm256_setzero_ps());
        let (xp, yp) = (x.as_ptr(), y.as_ptr());
        let mut i = 0;
        while i < full {
            lo = _mm256_fmadd_ps(load_f16(xp.add(i)), _mm256_loadu_ps(yp.add(i)), lo);
            hi = _mm256_fmadd_ps(load_f16(xp.add(i + 8)), _mm256_loadu_ps(yp.add(i + 8)), hi);
            i += 16;
        }
        let mut a = store16(lo, hi);
        for (l, s) in a.iter_mut().enumerate().take(n - full) {
            *s = x[full + l].to_f32().mul_add(y[full + l], *s);
        }
        super::reduce16(&a)
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn single(x: &[f16], y: &[f32], n: usize) -> f32 {
        let len = x.len();
        let np = n & !63;
        let mut acc = [_mm256_setzero_ps(); 8];
        let (xp, yp) = (x.as_ptr(), y.as_ptr());
        let mut base = 0;
        // Whole 64-steps inside the data.
        while base + 64 <= np.min(len) {
            step64(&mut acc, xp.add(base), yp.add(base));
            base += 64;
        }
        // A step that runs past the data: zero-padded copies.
        while base < np {
            let mut xb = [f16::ZERO; 64];
            let mut yb = [0f32; 64];
            for t in 0..64 {
                if base + t < len {
                    xb[t] = x[base + t];
                    yb[t] = y[base + t];
                }
            }
            step64(&mut acc, xb.as_ptr(), yb.as_ptr());
            base += 64;
        }
        let mut sum = fold64(&acc) as f64;
        for i in np..n.min(len) {
            sum += (x[i].to_f32() * y[i]) as f64;
        }
        sum as f32
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn tiled_paged<'a>(run: &dyn Fn(usize) -> &'a [f16], y: &[f32]) -> f32 {
        let n = y.len();
        let full = n & !15;
        let bs = super::BLOCK_SIZE;
        let (mut lo, mut hi) = (_mm256_setzero_ps(), _mm256_setzero_ps());
        let yp = y.as_ptr();
        let mut i = 0;
        while i < full {
            let x = run(i / bs).as_ptr();
            let end = (i - i % bs + bs).min(full);
            while i < end {
                let xo = x.add(i % bs);
                lo = _mm256_fmadd_ps(load_f16(xo), _mm256_loadu_ps(yp.add(i)), lo);
                hi = _mm256_fmadd_ps(load_f16(xo.add(8)), _mm256_loadu_ps(yp.add(i + 8)), hi);
                i += 16;
            }
        }
        let mut a = store16(lo, hi);
        if full < n {
            let x = run(full / bs);
            for (l, s) in a.iter_mut().enumerate().take(n - full) {
                *s = x[(full + l) % bs].to_f32().mul_add(y[full + l], *s);
            }
        }
        super::reduce16(&a)
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn single_paged<'a>(run: &dyn Fn(usize) -> &'a [f16], y: &[f32], n: usize) -> f32 {
        let len = y.len();
        let bs = super::BLOCK_SIZE;
        let mut acc = [_mm256_setzero_ps(); 8];
        let yp = y.as_ptr();
        let mut base = 0;
        // Whole 64-steps inside the data, block by block.
        while base + 64 <= len {
            step64(&mut acc, run(base / bs).as_ptr().add(base % bs), yp.add(base));
            base += 64;
        }
        // Steps that run past the data: zero-padded copies.
        while base < n {
            let mut xb = [f16::ZERO; 64];
            let mut yb = [0f32; 64];
            if base < len {
                let x = run(base / bs);
                for t in 0..len - base {
                    xb[t] = x[(base + t) % bs];
                    yb[t] = y[base + t];
                }
            }
            step64(&mut acc, xb.as_ptr(), yb.as_ptr());
            base += 64;
        }
        fold64(&acc)
    }
}

/// Sixteen tinyBLAS-order dots at once (AVX-512): one 16-lane accumulator per dot in a zmm,
/// the `reduce16` tree of all sixteen done with shuffles across registers. Each result has
/// the bits of `dot_f16_tiled` / `dot_f16_tiled_paged` for its row.
#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    use half::f16;

    use crate::cache::{PagedView, BLOCK_SIZE};

    pub fn available() -> bool {
        crate::ops::packed::isa() == crate::ops::packed::Isa::Avx512Vnni
    }

    /// `reduce16` of each accumulator: halves, then quarters, then pairs (all additions
    /// between the same operands as the scalar tree).
    #[inline(always)]
    unsafe fn reduce16x16(acc: &[__m512; 16]) -> [f32; 16] {
        // Loops, not closures: a closure would lose this function's target features.
        let mut t = [_mm256_setzero_ps(); 16];
        for d in 0..16 {
            t[d] = halve(acc[d]);
        }
        reduce_halves(&t)
    }

    /// The tree's first level for one accumulator: high half + low half.
    #[inline(always)]
    unsafe fn halve(a: __m512) -> __m256 {
        _mm256_add_ps(_mm512_extractf32x8_ps::<1>(a), _mm512_castps512_ps256(a))
    }

    /// `reduce16x16` from each accumulator's `halve`.
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

    /// Scores of positions `t0..t0 + 16` against `q` (f16-rounded, `q.len()` a multiple of 16).
    #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")]
    pub unsafe fn kq16(kv: &PagedView<'_>, g: usize, t0: usize, q: &[f32]) -> [f32; 16] {
        let mut acc = [_mm512_setzero_ps(); 16];
        let rows: [*const f16; 16] = {
            let mut r = [std::ptr::null(); 16];
            for (i, p) in r.iter_mut().enumerate() {
                *p = kv.key(g, t0 + i).as_ptr();
            }
            r
        };
        for c in (0..q.len()).step_by(16) {
            let y = _mm512_loadu_ps(q.as_ptr().add(c));
            for i in 0..16 {
                let x = _mm512_cvtph_ps(_mm256_loadu_si256(rows[i].add(c) as *const __m256i));
                acc[i] = _mm512_fmadd_ps(x, y, acc[i]);
            }
        }
        reduce16x16(&acc)
    }

    /// Outputs `d0..d0 + 16` of Σ_t p[t]·V[t] over positions `0..p.len()` (block by block).
    #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")]
    pub unsafe fn pv16(kv: &PagedView<'_>, g: usize, d0: usize, p: &[f32]) -> [f32; 16] {
        let n = p.len();
        let mut acc = [_mm512_setzero_ps(); 16];
        let mut c = 0;
        while c < n {
            let (j, off) = (c / BLOCK_SIZE, c % BLOCK_SIZE);
            let lanes = (n - c).min(16);
            // Lanes past the last position keep their sums, as in `dot_f16_tiled_paged`.
            let m: __mmask16 = if lanes == 16 { 0xFFFF } else { (1u32 << lanes) as u16 - 1 };
            let y = _mm512_maskz_loadu_ps(m, p.as_ptr().add(c));
            for i in 0..16 {
                let run = kv.value_run(g, d0 + i, j).as_ptr().add(off);
                if lanes == 16 {
                    let x = _mm512_cvtph_ps(_mm256_loadu_si256(run as *const __m256i));
                    acc[i] = _mm512_fmadd_ps(x, y, acc[i]);
                } else {
                    let x = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, run as *const i16));
                    acc[i] = _mm512_mask3_fmadd_ps(x, y, acc[i], m);
                }
            }
            c += 16;
        }
        reduce16x16(&acc)
    }

    /// (a0+a2)+(a1+a3); the caller's `reduce16x16` finishes the tree.
    #[inline(always)]
    unsafe fn fold(a: &[__m512; 4]) -> __m512 {
        _mm512_add_ps(_mm512_add_ps(a[0], a[2]), _mm512_add_ps(a[1], a[3]))
    }

    /// Each head's sixteen folded and halved dots (`Halves::set`), summed up.
    struct Halves<const H: usize>([[std::mem::MaybeUninit<__m256>; 16]; H]);

    impl<const H: usize> Halves<H> {
        /// Uninitialised: zeroing 16·H vectors per call was a 3 KB memset, ~10 % of attention.
        #[inline(always)]
        fn new() -> Self {
            Self([[std::mem::MaybeUninit::uninit(); 16]; H])
        }
        #[inline(always)]
        unsafe fn set(&mut self, h: usize, i: usize, a: &[__m512; 4]) {
            self.0[h][i].write(halve(fold(a)));
        }
        /// Safety: `set` was called for every (head, dot).
        #[inline(always)]
        unsafe fn reduce(&self) -> [[f32; 16]; H] {
            let mut out = [std::mem::MaybeUninit::<[f32; 16]>::uninit(); H];
            for (o, t) in out.iter_mut().zip(&self.0) {
                o.write(reduce_halves(&*(t.as_ptr() as *const [__m256; 16])));
            }
            // Safety: every head's row was written just above.
            std::mem::transmute_copy(&out)
        }
    }

    /// One new token's scores at positions `t0..t0 + 16` for `H` query heads that share KV
    /// head `g` (`dot_f16_single` order; `t0` a multiple of 16, each `q.len()` of 64): each
    /// key is converted from f16 once for all of them.
    #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")]
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
        // chains side by side overlap better (3 % on one thread).
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
                            a[h][j] = _mm512_fmadd_ps(
                                kx[j],
                                _mm512_loadu_ps(qs[h].as_ptr().add(s + 16 * j)),
                                a[h][j],
                            );
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
    pub unsafe fn pv16_single<const H: usize>(
        kv: &PagedView<'_>,
        g: usize,
        d0: usize,
        ps: [&[f32]; H],
    ) -> [[f32; 16]; H] {
        const { assert!(BLOCK_SIZE == 64) };
        let n = ps[0].len();
        let (full, rem) = (n / 64, n % 64);
        let masks: [__mmask16; 4] = std::array::from_fn(|j| {
            let lanes = rem.saturating_sub(16 * j).min(16);
            ((1u32 << lanes) - 1) as u16
        });
        let mut folded = Halves::<H>::new();
        for i in 0..16 {
            let mut a = [[_mm512_setzero_ps(); 4]; H];
            for j in 0..full + usize::from(rem > 0) {
                let v = kv.value_run(g, d0 + i, j).as_ptr();
                let m = if j < full { None } else { Some(masks) };
                let vx: [__m512; 4] = std::array::from_fn(|jj| match m {
                    None => _mm512_cvtph_ps(_mm256_loadu_si256(v.add(16 * jj) as *const __m256i)),
                    Some(m) => _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m[jj], v.add(16 * jj) as *const i16)),
                });
                for h in 0..H {
                    let p = ps[h].as_ptr().add(64 * j);
                    for jj in 0..4 {
                        let pv = match m {
                            None => _mm512_loadu_ps(p.add(16 * jj)),
                            // Sixteen positions past the end add exact zeros to a sum that
                            // is never −0 (it starts at +0): skipping them changes nothing.
                            Some(m) if m[jj] == 0 => continue,
                            Some(m) => _mm512_maskz_loadu_ps(m[jj], p.add(16 * jj)),
                        };
                        a[h][jj] = _mm512_fmadd_ps(vx[jj], pv, a[h][jj]);
                    }
                }
            }
            for h in 0..H {
                folded.set(h, i, &a[h]);
            }
        }
        folded.reduce()
    }

    /// `super::reduce16` in registers (the same additions).
    #[inline(always)]
    pub unsafe fn reduce16(x: __m512) -> f32 {
        let t = _mm256_add_ps(_mm512_extractf32x8_ps::<1>(x), _mm512_castps512_ps256(x));
        let u = _mm_add_ps(_mm256_extractf128_ps::<1>(t), _mm256_castps256_ps128(t));
        // Lanes 0, 1: u0 + u2, u1 + u3; then their sum.
        let v = _mm_add_ps(u, _mm_movehl_ps(u, u));
        _mm_cvtss_f32(_mm_add_ss(v, _mm_movehdup_ps(v)))
    }

    /// `super::round_to_f16`, sixteen at a time.
    #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")]
    pub unsafe fn round_to_f16(x: &[f32], out: &mut [f32]) {
        let n = x.len().min(out.len());
        let mut i = 0;
        while i + 16 <= n {
            let h = _mm512_cvtps_ph::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(_mm512_loadu_ps(
                x.as_ptr().add(i),
            ));
            _mm512_storeu_ps(out.as_mut_ptr().add(i), _mm512_cvtph_ps(h));
            i += 16;
        }
        for j in i..n {
            out[j] = f16::from_f32(x[j]).to_f32();
        }
    }

    /// `super::softmax_f16` for the AVX-512 `expf` (lengths are whole 16-chunks).
    #[target_feature(enable = "avx512f,avx512dq,f16c")]
    pub unsafe fn softmax_f16(w: &[f32], p: &mut [f32]) {
        let mut m = _mm512_set1_ps(f32::NEG_INFINITY);
        for c in (0..p.len()).step_by(16) {
            m = _mm512_max_ps(m, _mm512_loadu_ps(w.as_ptr().add(c)));
        }
        let m = _mm512_set1_ps(_mm512_reduce_max_ps(m));
        let mut sum = 0f64;
        for c in (0..p.len()).step_by(16) {
            let e = crate::ops::expf::expf16(_mm512_sub_ps(_mm512_loadu_ps(w.as_ptr().add(c)), m));
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
}

/// `x` rounded to f16 and back (the query as ggml converts it to the cache's type).
fn round_to_f16(x: &[f32], out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if avx512::available() {
        // Safety: AVX-512 F checked.
        return unsafe { avx512::round_to_f16(x, out) };
    }
    for (o, &v) in out.iter_mut().zip(x) {
        *o = f16::from_f32(v).to_f32();
    }
}

/// Attention weights as llama.cpp's CPU `soft_max` makes them, rounded to f16 for the V
/// product: `p = expf(w − max w)` over whole 16-chunks (masked −∞ → exactly 0), summed one
/// `_mm512_reduce_add_ps` tree per chunk in f64, then `p·(1/Σ)`.
fn softmax_f16(w: &[f32], p: &mut [f32], var: ExpVariant) {
    #[cfg(target_arch = "x86_64")]
    if var == ExpVariant::Avx512 {
        // Safety: `Avx512` is only detected with AVX-512 F and DQ.
        return unsafe { avx512::softmax_f16(w, p) };
    }
    let max = w.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0f64;
    for (pc, wc) in p.chunks_mut(16).zip(w.chunks(16)) {
        let mut lanes = [0f32; 16];
        for ((e, &x), l) in pc.iter_mut().zip(wc).zip(lanes.iter_mut()) {
            *e = ggml_expf(x - max, var);
            *l = *e;
        }
        sum += reduce16(&lanes) as f64;
    }
    let inv = (1.0 / sum) as f32;
    for e in p.iter_mut() {
        *e = f16::from_f32(*e * inv).to_f32();
    }
}

/// `$out[..hs.len()] = $f::<H>(args…, [$x(h) for h in hs])` for H = `hs.len()` in 1..=4.
#[cfg(target_arch = "x86_64")]
macro_rules! by_heads {
    ($m:ident::$f:ident, $hs:expr, $x:expr, $out:ident, $($arg:expr),*) => {{
        let hs: &[usize] = $hs;
        let x = |k: usize| $x(hs[k]);
        match hs.len() {
            1 => $out[..1].copy_from_slice(&$m::$f::<1>($($arg),*, [x(0)])),
            2 => $out[..2].copy_from_slice(&$m::$f::<2>($($arg),*, [x(0), x(1)])),
            3 => $out[..3].copy_from_slice(&$m::$f::<3>($($arg),*, [x(0), x(1), x(2)])),
            _ => $out[..4].copy_from_slice(&$m::$f::<4>($($arg),*, [x(0), x(1), x(2), x(3)])),
        }
    }};
}

/// Asks for `data`'s cache lines ahead of use.
#[inline(always)]
/// Into L2, not L1: a chunk ahead is 32 lines, and T0 prefetches of that many hold the L1's
/// miss buffers until they land, stalling the loads in use (a step's KV from DRAM, 96-layer
/// bench: 97 µs per layer with T0, 76 with none, 63 with T1).
fn prefetch(data: &[f16]) {
    #[cfg(target_arch = "x86_64")]
    for line in data.chunks(32) {
        // Safety: a prefetch of a valid address has no effect on memory.
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T1 }>(line.as_ptr() as *const i8)
        };
    }
}

/// One sequence's part of a layer's attention: its new tokens' queries `[len, n_head, hd]`
/// for positions `pos0..pos0+len`, and its paged KV (already holding those positions).
pub struct SeqAttn<'a> {
    pub q: &'a [f32],
    pub kv: &'a PagedView<'a>,
    pub len: usize,
    pub pos0: usize,
}

/// One layer's attention for one sequence, the arithmetic of
/// `cpu_attention::attend_reference`. Returns `[len, n_head·hd]`.
pub fn attend(
    q: &[f32],
    kv: &PagedView<'_>,
    len: usize,
    pos0: usize,
    n_head: usize,
    scale: f32,
    window: Option<usize>,
) -> Vec<f32> {
    attend_many(&[SeqAttn { q, kv, len, pos0 }], n_head, scale, window)
}

/// `attend` for every sequence of a step at once: one pass over the pool with a task per
/// (sequence, token, head), so that a step of many one-token sequences keeps both cores busy.
/// Returns the sequences' outputs one after another (`[Σ len, n_head·hd]`).
pub fn attend_many(seqs: &[SeqAttn<'_>], n_head: usize, scale: f32, window: Option<usize>) -> Vec<f32> {
    let Some(first) = seqs.first() else { return Vec::new() };
    let var = exp_variant();
    let (n_kv, hd) = (first.kv.n_kv_head, first.kv.head_dim);
    let group = n_head / n_kv;
    // Task index where each sequence's tasks (one per new token and KV head) start, and the
    // output row of its first token.
    let mut starts = Vec::with_capacity(seqs.len());
    let mut row0 = Vec::with_capacity(seqs.len());
    let (mut n_tasks, mut n_rows) = (0, 0);
    for s in seqs {
        starts.push(n_tasks);
        row0.push(n_rows);
        n_tasks += s.len * n_kv;
        n_rows += s.len;
    }
    let mut out: Vec<f32> = Vec::with_capacity(n_rows * n_head * hd);
    let op = SyncPtr(out.as_mut_ptr());
    // Every task's scratch, in one allocation: q (as f16, the cache's dot type in ggml), the
    // scores and the weights of each of the group's heads; each part is written before use.
    let longest = seqs.iter().map(|s| s.pos0 + s.len).max().unwrap_or(0).div_ceil(16) * 16;
    let per_task = group * (hd + 2 * longest);
    let mut scratch_all: Vec<f32> = Vec::with_capacity(n_tasks * per_task);
    let sp = SyncPtr(scratch_all.as_mut_ptr());
    // A KV group's query heads, at most four per kernel call.
    let all_heads: Vec<usize> = (0..group).collect();
    let head_chunks: Vec<&[usize]> = all_heads.chunks(4).collect();
    // One (sequence, token, KV head): the query heads that share it, compiled for
    // AVX2/FMA/F16C where the CPU has them.
    // A task's sequence, new token within it, and KV head.
    let locate = |task: usize| {
        let si = starts.partition_point(|&s| s <= task) - 1;
        (si, (task - starts[si]) / n_kv, (task - starts[si]) % n_kv)
    };
    let task = |task: usize| {
        super::simd::fast(
            #[inline(always)]
            || {
                let (si, i, g) = locate(task);
                let SeqAttn { q, kv, len, pos0 } = seqs[si];
                let tiled = len > 1;
                // Several new tokens (tinyBLAS order) on an AVX-512 CPU: sixteen dots at a time.
                #[cfg(target_arch = "x86_64")]
                let wide = tiled && hd.is_multiple_of(16) && avx512::available();
                // One new token: sixteen `ggml_vec_dot_f16`-order dots at a time.
                #[cfg(target_arch = "x86_64")]
                let wide_single = !tiled && hd.is_multiple_of(64) && avx512::available();
                let t_len = pos0 + i + 1;
                let padded = t_len.div_ceil(16) * 16;
                let heads = g * group..(g + 1) * group;
                // Safety: task `task` alone uses its `per_task` values (≥ this length), and
                // writes each before reading it (q16 below, w by its fill, p16 by softmax).
                let scratch = unsafe {
                    std::slice::from_raw_parts_mut(sp.get().add(task * per_task), group * (hd + 2 * padded))
                };
                let (q16, rest) = scratch.split_at_mut(group * hd);
                let (w, p16) = rest.split_at_mut(group * padded);
                for (h, qd) in heads.clone().zip(q16.chunks_exact_mut(hd)) {
                    round_to_f16(&q[(i * n_head + h) * hd..][..hd], qd);
                }
                let q16 = &*q16;
                let qs = |h: usize| &q16[h * hd..(h + 1) * hd];
                // Sliding-window layers see the last `window` positions; the others are masked to
                // -inf, i.e. they add exact zeros, as in llama.cpp's SWA mask.
                let t0 = window.map_or(0, |w| t_len.saturating_sub(w));
                w.fill(f32::NEG_INFINITY);
                // Sixteen positions at a time from a multiple of 16 (those before t0 stay masked).
                let mut t = t0 & !15;
                // Kernel results for up to four heads (set once: the kernels fill what is read).
                #[cfg(target_arch = "x86_64")]
                let (mut scores, mut outs) = ([[0f32; 16]; 4], [[0f32; 16]; 4]);
                #[cfg(target_arch = "x86_64")]
                if wide || wide_single {
                    // The last chunk too: its keys past `t_len` are stored (blocks are whole
                    // chunks), their scores are not used, and each score is its own dot.
                    while t < t_len {
                        // The next sixteen keys stream in while these are used (a step's KV
                        // comes from DRAM: too scattered for the hardware prefetcher).
                        if t + 16 < t_len {
                            prefetch(kv.keys(g, t + 16, 16));
                        }
                        for (c, hs) in head_chunks.iter().enumerate() {
                            if wide {
                                for (k, &h) in hs.iter().enumerate() {
                                    // Safety: AVX-512 checked (`wide`); hd is a multiple of 16.
                                    scores[k] = unsafe { avx512::kq16(kv, g, t, qs(h)) };
                                }
                            } else {
                                // Safety: AVX-512 checked; hd a multiple of 64; t of 16.
                                unsafe { by_heads!(avx512::kq16_single, hs, qs, scores, kv, g, t) };
                            }
                            for (k, s) in scores.iter().take(hs.len()).enumerate() {
                                let wk = &mut w[(4 * c + k) * padded + t..][..16];
                                if t >= t0 && t + 16 <= t_len {
                                    for (wl, v) in wk.iter_mut().zip(s) {
                                        *wl = v * scale;
                                    }
                                } else {
                                    for (l, v) in s.iter().enumerate().take(t_len - t) {
                                        if t + l >= t0 {
                                            wk[l] = v * scale;
                                        }
                                    }
                                }
                            }
                        }
                        t += 16;
                    }
                }
                let t = t.max(t0);
                for (h, wh) in w.chunks_exact_mut(padded).enumerate() {
                    for (tt, wt) in wh.iter_mut().enumerate().take(t_len).skip(t) {
                        let kt = kv.key(g, tt);
                        let dot = if tiled && hd.is_multiple_of(16) {
                            dot_f16_tiled(kt, qs(h))
                        } else {
                            dot_f16_single(kt, qs(h), hd)
                        };
                        *wt = dot * scale;
                    }
                }
                #[cfg(target_arch = "x86_64")]
                if wide || wide_single {
                    for j in 0..t_len.div_ceil(BLOCK_SIZE) {
                        prefetch(kv.values(g, 0, hd.min(16), j));
                    }
                }
                for (wh, ph) in w.chunks_exact(padded).zip(p16.chunks_exact_mut(padded)) {
                    softmax_f16(wh, ph, var);
                }
                let p16 = &*p16;
                let ps = |h: usize| &p16[h * padded..h * padded + t_len];
                // Safety: this task alone writes its heads' slices of this output row.
                let orow = unsafe {
                    std::slice::from_raw_parts_mut(op.get().add((row0[si] + i) * n_head * hd), n_head * hd)
                };
                let mut d0 = 0;
                #[cfg(target_arch = "x86_64")]
                if wide || wide_single {
                    while d0 + 16 <= hd {
                        if d0 + 32 <= hd {
                            for j in 0..t_len.div_ceil(BLOCK_SIZE) {
                                prefetch(kv.values(g, d0 + 16, 16, j));
                            }
                        }
                        for (c, hs) in head_chunks.iter().enumerate() {
                            if wide {
                                for (k, &h) in hs.iter().enumerate() {
                                    // Safety: AVX-512 checked (`wide`).
                                    outs[k] = unsafe { avx512::pv16(kv, g, d0, ps(h)) };
                                }
                            } else {
                                // Safety: AVX-512 checked.
                                unsafe { by_heads!(avx512::pv16_single, hs, ps, outs, kv, g, d0) };
                            }
                            for (k, o) in outs.iter().take(hs.len()).enumerate() {
                                let h = g * group + 4 * c + k;
                                orow[h * hd + d0..h * hd + d0 + 16].copy_from_slice(o);
                            }
                        }
                        d0 += 16;
                    }
                }
                for (k, h) in heads.enumerate() {
                    for d in d0..hd {
                        let run = |j: usize| kv.value_run(g, d, j);
                        // The KV length ggml multiplies is padded to 256 cells: always 16-aligned.
                        orow[h * hd + d] = if tiled {
                            dot_f16_tiled_paged(run, ps(k))
                        } else {
                            dot_f16_single_paged(run, ps(k), padded.div_ceil(64) * 64)
                        };
                    }
                }
            },
        )
    };
    // Longest first (by positions attended), so no long task is left for the end of the pass
    // while the other cores idle: sequences of a step sit at very different positions.
    let mut order: Vec<u32> = (0..n_tasks as u32).collect();
    let t_len_of = |task: usize| {
        let (si, i, _) = locate(task);
        seqs[si].pos0 + i + 1
    };
    order.sort_by_key(|&t| std::cmp::Reverse(t_len_of(t as usize)));
    pool::run(n_tasks, &|it| {
        super::simd::fast(
            #[inline(always)]
            || task(order[it] as usize),
        )
    });
    // Safety: the tasks wrote every value: each (token, KV head) task all `hd` outputs of its
    // group's heads, the wide loop up to a multiple of 16 and the scalar loop the rest.
    unsafe { out.set_len(n_rows * n_head * hd) };
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference_tiled(x: &[f16], y: &[f32]) -> f32 {
        let mut acc = [0f32; 16];
        for base in (0..x.len()).step_by(16) {
            for l in 0..16 {
                let (a, b) =
                    if base + l < x.len() { (x[base + l].to_f32(), y[base + l]) } else { (0.0, 0.0) };
                acc[l] = a.mul_add(b, acc[l]);
            }
        }
        reduce16(&acc)
    }

    #[cfg(target_arch = "x86_64")]
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
            // Safety: AVX-512 checked.
            let v = unsafe { avx512::reduce16(std::arch::x86_64::_mm512_loadu_ps(a.as_ptr())) };
            assert_eq!(v.to_bits(), reduce16(&a).to_bits());
        }
    }

    #[test]
    fn simd_dots_match_the_scalar_order_bit_for_bit() {
        let mut s = 7u32;
        let mut r = || {
            s = s.wrapping_mul(1664525).wrapping_add(1013904223);
            (s >> 8) as f32 / (1 << 24) as f32 - 0.5
        };
        for n in [16usize, 48, 64, 100, 130, 256, 333] {
            let x: Vec<f16> = (0..n).map(|_| f16::from_f32(r() * 4.0)).collect();
            let y: Vec<f32> = (0..n).map(|_| f16::from_f32(r()).to_f32()).collect();
            assert_eq!(dot_f16_tiled(&x, &y).to_bits(), reference_tiled(&x, &y).to_bits(), "tiled n={n}");
            for total in [n, n.div_ceil(64) * 64] {
                let xv = |i: usize| if i < n { x[i].to_f32() } else { 0.0 };
                let yv = |i: usize| if i < n { y[i] } else { 0.0 };
                let np = total & !63;
                let mut acc = [[0f32; 16]; 4];
                for base in (0..np).step_by(64) {
                    for j in 0..4 {
                        for l in 0..16 {
                            let i = base + 16 * j + l;
                            acc[j][l] = xv(i).mul_add(yv(i), acc[j][l]);
                        }
                    }
                }
                let f: [f32; 16] = std::array::from_fn(|l| (acc[0][l] + acc[2][l]) + (acc[1][l] + acc[3][l]));
                let mut sum = reduce16(&f) as f64;
                for i in np..total {
                    sum += (xv(i) * yv(i)) as f64;
                }
                assert_eq!(
                    dot_f16_single(&x, &y, total).to_bits(),
                    (sum as f32).to_bits(),
                    "single n={n}/{total}"
                );
            }
        }
    }

    #[test]
    fn paged_dots_match_the_contiguous_ones_bit_for_bit() {
        let mut s = 11u32;
        let mut r = || {
            s = s.wrapping_mul(1664525).wrapping_add(1013904223);
            (s >> 8) as f32 / (1 << 24) as f32 - 0.5
        };
        for n in [1usize, 15, 16, 63, 64, 65, 128, 200, 257] {
            let x: Vec<f16> = (0..n).map(|_| f16::from_f32(r() * 4.0)).collect();
            let y: Vec<f32> = (0..n).map(|_| f16::from_f32(r()).to_f32()).collect();
            // Blocks stored in reverse order, as a block table would scatter them.
            let nb = n.div_ceil(BLOCK_SIZE);
            let mut store = vec![f16::ZERO; nb * BLOCK_SIZE];
            for (t, &v) in x.iter().enumerate() {
                store[(nb - 1 - t / BLOCK_SIZE) * BLOCK_SIZE + t % BLOCK_SIZE] = v;
            }
            let run = |j: usize| &store[(nb - 1 - j) * BLOCK_SIZE..(nb - j) * BLOCK_SIZE];
            let total = n.div_ceil(64) * 64;
            assert_eq!(dot_f16_tiled_paged(run, &y).to_bits(), dot_f16_tiled(&x, &y).to_bits(), "tiled {n}");
            assert_eq!(
                dot_f16_single_paged(run, &y, total).to_bits(),
                dot_f16_single(&x, &y, total).to_bits(),
                "single {n}"
            );
        }
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod timing {
    use super::*;
    use crate::cache::{KvPool, KvWrite, LayerKind};
    use candle_core::Device;

    /// `cargo test --release -p wick-core --lib attn::timing -- --ignored --nocapture`: the
    /// one-token kernels alone, one thread, cache-resident (SmolLM2: 3 heads per KV head, 160
    /// positions, head_dim 64).
    #[test]
    #[ignore]
    fn single_token_kernels_speed() {
        if !avx512::available() {
            return;
        }
        let (n_kv, hd, t) = (3usize, 64usize, 160usize);
        let layout = [LayerKind::Attention { n_kv_head: n_kv, head_dim: hd }];
        let mut pool = KvPool::with_capacity(&layout, t + 64, &Device::Cpu).unwrap();
        let mut seq = pool.new_seq();
        pool.reserve(&mut seq, t).unwrap();
        let k: Vec<f32> = (0..t * n_kv * hd).map(|i| ((i * 7919) % 1000) as f32 / 1000.0 - 0.5).collect();
        pool.write_many(0, &[KvWrite { seq: &seq, pos0: 0, k: &k, v: &k }]).unwrap();
        let kv = pool.view(0, &seq).unwrap();
        let q: Vec<f32> = (0..3 * hd).map(|i| (i % 17) as f32 / 17.0).collect();
        let p: Vec<f32> = (0..3 * t).map(|i| (i % 13) as f32 / 1300.0).collect();
        let qs = [&q[..hd], &q[hd..2 * hd], &q[2 * hd..]];
        let ps = [&p[..t], &p[t..2 * t], &p[2 * t..]];
        let n = 20_000;
        let s = std::time::Instant::now();
        for _ in 0..n {
            for c in (0..t).step_by(16) {
                std::hint::black_box(unsafe { avx512::kq16_single::<3>(&kv, 0, c, qs) });
            }
        }
        let kq = s.elapsed().as_secs_f64() / n as f64;
        let s = std::time::Instant::now();
        for _ in 0..n {
            for d0 in (0..hd).step_by(16) {
                std::hint::black_box(unsafe { avx512::pv16_single::<3>(&kv, 0, d0, ps) });
            }
        }
        let pv = s.elapsed().as_secs_f64() / n as f64;
        println!("per (token, KV head) of 160 positions: kq {:.2} µs, pv {:.2} µs", kq * 1e6, pv * 1e6);
    }
}
