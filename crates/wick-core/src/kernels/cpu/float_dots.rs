//! Dots of f16 and bf16 values in the orders llama.cpp's CPU backend sums them. On aarch64
//! the f16 pair follows its NEON build (no FP16 arithmetic): `ggml_vec_dot_f16` as 4
//! accumulators of 4 lanes over steps of 16 (`head16_order`, the n % 16 tail in f64) and
//! tinyBLAS as 4 lanes over chunks of 4 (`tiled4_order`), each reduced by `vaddvq_f32`. On x86:
//! - `ggml_vec_dot_f16` (one token): 4 accumulators of 16 lanes over steps of 64, folded
//!   (a0+a2)+(a1+a3), a 16-lane tree sum, the tail (n % 64) added in f64;
//! - llamafile's tinyBLAS (several tokens): 16 lanes over chunks of 16, the 16-lane tree sum;
//! - `ggml_vec_dot_f32` (f32 operands, the vision tower): the f16 dot's head, the tail added
//!   in f32 (not fused);
//! - BF16: the same pair with AVX512-BF16 `vdpbf16ps` steps (`dot_bf16_single`,
//!   `dot_bf16_tiled`), the AVX2 lane sums in `x86::bf16`.
//!
//! Each order is written once (`head64_order`, `tiled_order`); the closure dots (`dot_single`,
//! `dot_tiled`: operands computed per index, e.g. f16 weights widened) and the slice dots
//! (`*_sl`) only say how the lanes are loaded. `dots16` runs sixteen such dots lane-parallel
//! over their outputs (the same operations per output).

#[cfg(target_arch = "aarch64")]
use super::blocks::hsum4;
use super::blocks::reduce16;
#[cfg(target_arch = "x86_64")]
use super::feats::has_avx2_fma;
#[cfg(target_arch = "x86_64")]
use super::x86::bf16 as simd;

/// `xs` rounded to f16 (nearest, ties to even) and widened back: the activations of an f16
/// weight's matmul, as ggml converts them.
pub fn round_to_f16(xs: &[f32]) -> Vec<f32> {
    let mut out = vec![0f32; xs.len()];
    round_to_f16_into(xs, &mut out);
    out
}

/// `round_to_f16` into `out` (as many values as both hold). F16C eight lanes at a time, inline
/// (`half`'s slice conversions call a function per eight values).
pub fn round_to_f16_into(xs: &[f32], out: &mut [f32]) {
    let n = xs.len().min(out.len());
    #[cfg(target_arch = "x86_64")]
    // SAFETY: AVX2 and F16C checked; the kernel stays within the first n of both.
    let done = if super::feats::has_avx2() { unsafe { f16c::round(&xs[..n], &mut out[..n]) } } else { 0 };
    #[cfg(not(target_arch = "x86_64"))]
    let done = 0;
    for (o, &v) in out[done..n].iter_mut().zip(&xs[done..n]) {
        *o = half::f16::from_f32(v).to_f32();
    }
}

/// f16 values widened to f32 into `out` (as many as both hold; exact).
pub fn widen_f16(src: &[half::f16], out: &mut [f32]) {
    // SAFETY: an f16 is two plain bytes; the view covers exactly `src`.
    let bytes = unsafe { std::slice::from_raw_parts(src.as_ptr() as *const u8, 2 * src.len()) };
    widen_f16_bytes(bytes, out);
}

/// Little-endian f16 values (a GGUF F16 row, at any alignment) widened to f32 into `out` (as
/// many as both hold; exact). Eight or four at a time: per value through `half` it was most of
/// an F16 model's decode.
pub fn widen_f16_bytes(src: &[u8], out: &mut [f32]) {
    let n = (src.len() / 2).min(out.len());
    #[cfg(target_arch = "x86_64")]
    let done = match super::feats::has_avx2() {
        // SAFETY: AVX2 and F16C checked; the kernel stays within the first n values of both.
        true => unsafe { f16c::widen(&src[..2 * n], &mut out[..n]) },
        false => 0,
    };
    #[cfg(target_arch = "aarch64")]
    let done = {
        let whole = n / 4 * 4;
        for i in (0..whole).step_by(4) {
            // SAFETY: values i..i+4 lie within the first n of `src` and of `out`.
            unsafe {
                std::arch::aarch64::vst1q_f32(
                    out.as_mut_ptr().add(i),
                    super::arm::load_f16x4(src.as_ptr().add(2 * i)),
                )
            };
        }
        whole
    };
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    let done = 0;
    for (i, o) in out.iter_mut().enumerate().take(n).skip(done) {
        *o = super::blocks::f16_at(src, 2 * i);
    }
}

/// F16C conversions of whole groups of eight; each returns how many values it converted.
#[cfg(target_arch = "x86_64")]
mod f16c {
    use std::arch::x86_64::*;

    #[target_feature(enable = "avx2,f16c")]
    pub unsafe fn round(xs: &[f32], out: &mut [f32]) -> usize {
        let n = xs.len() / 8 * 8;
        for i in (0..n).step_by(8) {
            let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm256_loadu_ps(xs.as_ptr().add(i)));
            _mm256_storeu_ps(out.as_mut_ptr().add(i), _mm256_cvtph_ps(h));
        }
        n
    }

    #[target_feature(enable = "avx2,f16c")]
    pub unsafe fn widen(src: &[u8], out: &mut [f32]) -> usize {
        let n = src.len() / 16 * 8;
        for i in (0..n).step_by(8) {
            let h = _mm_loadu_si128(src.as_ptr().add(2 * i) as *const __m128i);
            _mm256_storeu_ps(out.as_mut_ptr().add(i), _mm256_cvtph_ps(h));
        }
        n
    }
}

/// `ggml_vec_dot_f16`: `x(i)·y(i)` for i < n; values are f16-exact f32s. x86 (AVX-512): the
/// `dot_head64` head, the tail (n % 64) added in f64; aarch64 (NEON without FP16 arithmetic):
/// the `head16_order` head, the tail (n % 16) added in f64.
#[inline(always)]
pub fn dot_single(n: usize, x: impl Fn(usize) -> f32, y: impl Fn(usize) -> f32) -> f32 {
    #[cfg(not(target_arch = "aarch64"))]
    let (head, np) = (dot_head64(n, &x, &y), n & !63);
    #[cfg(target_arch = "aarch64")]
    let (head, np) = (head16_order(n, &x, &y), n & !15);
    let mut sum = head as f64;
    for i in np..n {
        sum += (x(i) * y(i)) as f64;
    }
    sum as f32
}

/// The head of `ggml_vec_dot_f16` in llama.cpp's NEON build without FP16 arithmetic
/// (`GGML_F16_STEP` 16, `GGML_F16_EPR` 4): 4 accumulators of 4 lanes over steps of 16, folded
/// (a0+a2)+(a1+a3) (`GGML_F32x4_REDUCE`), then `vaddvq_f32`, over the first `n & !15` terms.
#[cfg(target_arch = "aarch64")]
#[inline(always)]
pub fn head16_order(n: usize, x: &impl Fn(usize) -> f32, y: &impl Fn(usize) -> f32) -> f32 {
    let mut acc = [[0f32; 4]; 4];
    for base in (0..n & !15).step_by(16) {
        for (j, a) in acc.iter_mut().enumerate() {
            for l in 0..4 {
                let i = base + 4 * j + l;
                a[l] = x(i).mul_add(y(i), a[l]);
            }
        }
    }
    let mut folded = [0f32; 4];
    for l in 0..4 {
        folded[l] = (acc[0][l] + acc[2][l]) + (acc[1][l] + acc[3][l]);
    }
    hsum4(folded)
}

/// tinyBLAS `gemm_bloc` in llama.cpp's NEON build (`tinyBLAS<4, float32x4_t, …>`) for one
/// output: 4 lanes over chunks of 4 (n % 4 == 0), then `vaddvq_f32`.
#[cfg(target_arch = "aarch64")]
#[inline(always)]
fn tiled4_order(n: usize, x: &impl Fn(usize) -> f32, y: &impl Fn(usize) -> f32) -> f32 {
    let mut acc = [0f32; 4];
    for base in (0..n).step_by(4) {
        for (l, a) in acc.iter_mut().enumerate() {
            *a = x(base + l).mul_add(y(base + l), *a);
        }
    }
    hsum4(acc)
}

/// The first `n & !63` terms as ggml's AVX-512 vector dots sum them (`head64_order`). The f16
/// and f32 dots differ only in how they add the tail. (aarch64 sums its own head.)
#[cfg(not(target_arch = "aarch64"))]
#[inline(always)]
pub fn dot_head64(n: usize, x: impl Fn(usize) -> f32, y: impl Fn(usize) -> f32) -> f32 {
    head64_order(
        n,
        #[inline(always)]
        |i| (lanes_of(&x, i), lanes_of(&y, i)),
    )
}

/// tinyBLAS `gemm_bloc` for one output: x86 `tiled_order` (n % 16 == 0), aarch64
/// `tiled4_order` (n % 4 == 0).
#[inline(always)]
pub fn dot_tiled(n: usize, x: impl Fn(usize) -> f32, y: impl Fn(usize) -> f32) -> f32 {
    #[cfg(target_arch = "aarch64")]
    return tiled4_order(n, &x, &y);
    #[cfg(not(target_arch = "aarch64"))]
    tiled_order::<1>(
        n,
        #[inline(always)]
        |i| lanes_of(&x, i),
        #[inline(always)]
        |_, i| lanes_of(&y, i),
    )[0]
}

/// Both operands' 16 lanes at `i` of a chunked dot.
type Chunk = ([f32; 16], [f32; 16]);

// The lane loaders and the orders are plain loops with `#[inline(always)]`: a generic helper
// from `core` (`array::from_fn`, `array::map`, `try_into`) may be compiled in another codegen
// unit of the incremental release build and stay a call per lane.

/// Sixteen values of `s` from `i` (`i + 16 ≤ s.len()`).
#[inline(always)]
#[allow(clippy::manual_memcpy)] // a loop, not `copy_from_slice` (see above)
fn lanes(s: &[f32], i: usize) -> [f32; 16] {
    let c = &s[i..i + 16];
    let mut a = [0f32; 16];
    for l in 0..16 {
        a[l] = c[l];
    }
    a
}

/// `f(i)..f(i + 15)`.
#[cfg(not(target_arch = "aarch64"))]
#[inline(always)]
fn lanes_of(f: &impl Fn(usize) -> f32, i: usize) -> [f32; 16] {
    let mut a = [0f32; 16];
    for l in 0..16 {
        a[l] = f(i + l);
    }
    a
}

/// The head order of ggml's AVX-512 vector dots, written once: 4 accumulators of 16 lanes over
/// steps of 64 (`load(i)`: both operands' lanes at i), folded (a0+a2)+(a1+a3), the 16-lane tree
/// sum, over the first `n & !63` terms.
#[inline(always)]
fn head64_order(n: usize, load: impl Fn(usize) -> Chunk) -> f32 {
    let mut acc = [[0f32; 16]; 4];
    for base in (0..n & !63).step_by(64) {
        for (j, a) in acc.iter_mut().enumerate() {
            let (x, y) = load(base + 16 * j);
            for l in 0..16 {
                a[l] = x[l].mul_add(y[l], a[l]);
            }
        }
    }
    let mut folded = [0f32; 16];
    for l in 0..16 {
        folded[l] = (acc[0][l] + acc[2][l]) + (acc[1][l] + acc[3][l]);
    }
    reduce16(&folded)
}

/// tinyBLAS `gemm_bloc`'s order, written once, for `R` outputs sharing one operand: per
/// output 16 lanes over chunks of 16 (`w(i)`: the shared operand's lanes at i, `x(r, i)`:
/// output r's), then the 16-lane tree sum. Each output is summed exactly as alone.
#[inline(always)]
fn tiled_order<const R: usize>(
    n: usize,
    w: impl Fn(usize) -> [f32; 16],
    x: impl Fn(usize, usize) -> [f32; 16],
) -> [f32; R] {
    let mut acc = [[0f32; 16]; R];
    for base in (0..n).step_by(16) {
        let wc = w(base);
        for (r, a) in acc.iter_mut().enumerate() {
            let xc = x(r, base);
            for l in 0..16 {
                a[l] = wc[l].mul_add(xc[l], a[l]);
            }
        }
    }
    let mut out = [0f32; R];
    for r in 0..R {
        out[r] = reduce16(&acc[r]);
    }
    out
}

/// `ggml_vec_dot_f32`: the head as `dot_single`'s (x86 `dot_head64`, aarch64 `head16_order`),
/// then the tail added in f32 (not fused).
#[inline(always)]
pub fn dot_single_f32(n: usize, x: impl Fn(usize) -> f32, y: impl Fn(usize) -> f32) -> f32 {
    #[cfg(not(target_arch = "aarch64"))]
    let (mut sum, np) = (dot_head64(n, &x, &y), n & !63);
    #[cfg(target_arch = "aarch64")]
    let (mut sum, np) = (head16_order(n, &x, &y), n & !15);
    for i in np..n {
        sum += x(i) * y(i);
    }
    sum
}

/// `dot_single` on two slices of one length (whole 16-lane loads: a closure per index keeps
/// each lane a bounds-checked scalar load).
#[inline(always)]
pub fn dot_single_sl(x: &[f32], y: &[f32]) -> f32 {
    #[cfg(target_arch = "aarch64")]
    return dot_single(x.len(), |i| x[i], |i| y[i]);
    #[cfg(not(target_arch = "aarch64"))]
    {
        let np = x.len() & !63;
        let mut sum = head64_order(
            x.len(),
            #[inline(always)]
            |i| (lanes(x, i), lanes(y, i)),
        ) as f64;
        for (a, b) in x[np..].iter().zip(&y[np..]) {
            sum += (a * b) as f64;
        }
        sum as f32
    }
}

/// `dot_single_f32` on two slices of one length.
#[inline(always)]
pub fn dot_single_f32_sl(x: &[f32], y: &[f32]) -> f32 {
    let np = x.len() & !63;
    let mut sum = head64_order(
        x.len(),
        #[inline(always)]
        |i| (lanes(x, i), lanes(y, i)),
    );
    for (a, b) in x[np..].iter().zip(&y[np..]) {
        sum += a * b;
    }
    sum
}

/// `dot_tiled`'s x86 order (16 lanes over chunks of 16) on two slices of one length (its whole
/// chunks of 16), on every architecture; `dot_tiled_arch_sl` follows the architecture.
#[inline(always)]
pub fn dot_tiled_sl(x: &[f32], y: &[f32]) -> f32 {
    tiled_order::<1>(
        x.len() / 16 * 16,
        #[inline(always)]
        |i| lanes(x, i),
        #[inline(always)]
        |_, i| lanes(y, i),
    )[0]
}

/// `dot_tiled` on two slices of one length (a multiple of 16): the same order and bits, with
/// whole-lane loads on x86 (a closure per index is a scalar load per lane there).
#[inline(always)]
pub fn dot_tiled_arch_sl(x: &[f32], y: &[f32]) -> f32 {
    #[cfg(target_arch = "aarch64")]
    return tiled4_order(x.len(), &|i| x[i], &|i| y[i]);
    #[cfg(not(target_arch = "aarch64"))]
    dot_tiled_sl(x, y)
}

/// `dot_tiled_sl(w, x[t])` for four `x` rows at once (independent accumulators, so the
/// FMAs overlap); each result is computed exactly as alone.
#[inline(always)]
pub fn dot_tiled_sl4(w: &[f32], x: [&[f32]; 4]) -> [f32; 4] {
    tiled_order::<4>(
        w.len() / 16 * 16,
        #[inline(always)]
        |i| lanes(w, i),
        #[inline(always)]
        |r, i| lanes(x[r], i),
    )
}

/// `reduce16` of 16 accumulators for 16 outputs at once (`f[lane][output]`): the same
/// additions per output, done lane-parallel over the outputs.
#[inline(always)]
fn reduce16_x16(f: &[[f32; 16]; 16]) -> [f32; 16] {
    let mut t = [[0f32; 16]; 8];
    for i in 0..8 {
        for o in 0..16 {
            t[i][o] = f[i + 8][o] + f[i][o];
        }
    }
    let mut out = [0f32; 16];
    for o in 0..16 {
        let h = [t[4][o] + t[0][o], t[5][o] + t[1][o], t[6][o] + t[2][o], t[7][o] + t[3][o]];
        out[o] = (h[0] + h[2]) + (h[1] + h[3]);
    }
    out
}

/// 16 dots `Σ x_o[e]·y[e]` at once, output o's values at `x(e)[o]`, in `ggml_vec_dot_f32`'s
/// order (`tiled = false`) or tinyBLAS's (`tiled`, len % 16 == 0): the same operations per
/// output as `dot_single_f32_sl` / `dot_tiled_sl` (`head64_order` / `tiled_order`, the tail
/// added in f32), lane-parallel over the outputs.
#[inline(always)]
fn dots16<'a>(
    len: usize,
    tiled: bool,
    x: impl Fn(usize) -> &'a [f32; 16],
    y: impl Fn(usize) -> f32,
) -> [f32; 16] {
    if tiled {
        let mut acc = [[0f32; 16]; 16];
        for base in (0..len).step_by(16) {
            for (l, a) in acc.iter_mut().enumerate() {
                let (xe, ye) = (x(base + l), y(base + l));
                for o in 0..16 {
                    a[o] = xe[o].mul_add(ye, a[o]);
                }
            }
        }
        return reduce16_x16(&acc);
    }
    let np = len & !63;
    let mut acc = [[[0f32; 16]; 16]; 4];
    for base in (0..np).step_by(64) {
        for (j, aj) in acc.iter_mut().enumerate() {
            for (l, a) in aj.iter_mut().enumerate() {
                let e = base + 16 * j + l;
                let (xe, ye) = (x(e), y(e));
                for o in 0..16 {
                    a[o] = xe[o].mul_add(ye, a[o]);
                }
            }
        }
    }
    let mut folded = [[0f32; 16]; 16];
    for l in 0..16 {
        for o in 0..16 {
            folded[l][o] = (acc[0][l][o] + acc[2][l][o]) + (acc[1][l][o] + acc[3][l][o]);
        }
    }
    let mut sum = reduce16_x16(&folded);
    for e in np..len {
        let (xe, ye) = (x(e), y(e));
        for o in 0..16 {
            sum[o] += xe[o] * ye;
        }
    }
    sum
}

/// `dots16` with AVX-512 registers for its two hot shapes: a K·Q block (`len` in 64..128,
/// one 64-step then the tail) and a tiled V·P block. `None` for other shapes.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn dots16_avx512(len: usize, tiled: bool, x: &[f32], y: &[f32]) -> Option<[f32; 16]> {
    use std::arch::x86_64::*;
    let xv = |e: usize| _mm512_loadu_ps(x.as_ptr().add(e * 16));
    let yv = |e: usize| _mm512_set1_ps(y[e]);
    let mut f = [_mm512_setzero_ps(); 16];
    if tiled {
        for base in (0..len).step_by(16) {
            for (l, a) in f.iter_mut().enumerate() {
                *a = _mm512_fmadd_ps(xv(base + l), yv(base + l), *a);
            }
        }
    } else if (64..128).contains(&len) {
        // One 64-step from zero: each accumulator is one rounded product, folded (a0+a2)+(a1+a3).
        for (l, a) in f.iter_mut().enumerate() {
            let p = |e: usize| _mm512_mul_ps(xv(e), yv(e));
            *a = _mm512_add_ps(_mm512_add_ps(p(l), p(32 + l)), _mm512_add_ps(p(16 + l), p(48 + l)));
        }
    } else {
        return None;
    }
    let mut t = [_mm512_setzero_ps(); 8];
    for i in 0..8 {
        t[i] = _mm512_add_ps(f[i + 8], f[i]);
    }
    let h = [0, 1, 2, 3].map(|k| _mm512_add_ps(t[k + 4], t[k]));
    let mut sum = _mm512_add_ps(_mm512_add_ps(h[0], h[2]), _mm512_add_ps(h[1], h[3]));
    if !tiled {
        for e in 64..len {
            sum = _mm512_add_ps(sum, _mm512_mul_ps(xv(e), yv(e)));
        }
    }
    let mut out = [0f32; 16];
    _mm512_storeu_ps(out.as_mut_ptr(), sum);
    Some(out)
}

/// `dots16` over contiguous blocks (the vision tower's attention): `x` holds `len` rows of 16 (output-interleaved) values.
#[inline(always)]
pub fn dots16_blocks(len: usize, tiled: bool, x: &[f32], y: &[f32]) -> [f32; 16] {
    #[cfg(target_arch = "x86_64")]
    if super::feats::has_avx512() {
        // SAFETY: AVX-512 F checked; `x` has len·16 values and `y` len.
        if let Some(o) = unsafe { dots16_avx512(len, tiled, x, y) } {
            return o;
        }
    }
    dots16(len, tiled, |e| x[e * 16..e * 16 + 16].try_into().unwrap_or(&[0.0; 16]), |e| y[e])
}

/// f32 → bf16 bits, rounding to nearest even (ggml's `vec_dot_type` conversion for BF16
/// weights; NaN stays a quiet NaN).
pub fn to_bf16(v: f32) -> u16 {
    let u = v.to_bits();
    if u & 0x7fff_ffff > 0x7f80_0000 {
        return ((u >> 16) | 64) as u16;
    }
    ((u + 0x7fff + ((u >> 16) & 1)) >> 16) as u16
}

#[inline(always)]
fn bf16_f32(bits: u16) -> f32 {
    f32::from_bits((bits as u32) << 16)
}

/// One lane step of AVX512-BF16's `vdpbf16ps` (the zen4/sapphirerapids builds ggml picks on
/// CPUs that have it): both products of a bf16 pair are exact in f32 and are added one after
/// the other, the odd element's first.
#[inline(always)]
fn dp_pair(acc: f32, w: &[u8], x: &[u16], i: usize) -> f32 {
    let odd = bf16_f32(u16::from_le_bytes([w[2 * i + 2], w[2 * i + 3]])) * bf16_f32(x[i + 1]);
    let even = bf16_f32(u16::from_le_bytes([w[2 * i], w[2 * i + 1]])) * bf16_f32(x[i]);
    (acc + odd) + even
}

/// `ggml_vec_dot_bf16` for one token: two 16-lane `vdpbf16ps` accumulators over steps of 64
/// (the first and second 32 values), each reduced by the 16-lane tree and summed in f64 with
/// the tail (k % 64) products.
pub fn dot_bf16_single(w: &[u8], x: &[u16]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if has_avx2_fma() {
        let (k, np) = (x.len(), x.len() & !63);
        // SAFETY: AVX2 checked; `w` is the weight row of `k` bf16 values.
        let c = unsafe { simd::bf16_single_lanes(w, x) };
        let mut sum = reduce16(&c[0]) as f64;
        sum += reduce16(&c[1]) as f64;
        for i in np..k {
            sum += (bf16_f32(u16::from_le_bytes([w[2 * i], w[2 * i + 1]])) * bf16_f32(x[i])) as f64;
        }
        return sum as f32;
    }
    dot_bf16_single_ref(w, x)
}

fn dot_bf16_single_ref(w: &[u8], x: &[u16]) -> f32 {
    let k = x.len();
    let np = k & !63;
    let mut c = [[0f32; 16]; 2];
    for base in (0..np).step_by(64) {
        for (h, acc) in c.iter_mut().enumerate() {
            for (l, a) in acc.iter_mut().enumerate() {
                *a = dp_pair(*a, w, x, base + 32 * h + 2 * l);
            }
        }
    }
    let mut sum = reduce16(&c[0]) as f64;
    sum += reduce16(&c[1]) as f64;
    for i in np..k {
        sum += (bf16_f32(u16::from_le_bytes([w[2 * i], w[2 * i + 1]])) * bf16_f32(x[i])) as f64;
    }
    sum as f32
}

/// tinyBLAS for several tokens (k % 32 == 0): one 16-lane `vdpbf16ps` accumulator over chunks
/// of 32, then the 16-lane tree sum.
pub fn dot_bf16_tiled(w: &[u8], x: &[u16]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if has_avx2_fma() {
        // SAFETY: AVX2 checked; k % 32 == 0 (the caller's `shapes_ok`).
        return reduce16(&unsafe { simd::bf16_tiled_lanes(w, x) });
    }
    dot_bf16_tiled_ref(w, x)
}

fn dot_bf16_tiled_ref(w: &[u8], x: &[u16]) -> f32 {
    let mut c = [0f32; 16];
    for base in (0..x.len()).step_by(32) {
        for (l, a) in c.iter_mut().enumerate() {
            *a = dp_pair(*a, w, x, base + 2 * l);
        }
    }
    reduce16(&c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::cpu::dot_checks::lcg;

    #[test]
    fn f16_rows_widen_exactly_at_any_offset() {
        // Every f16 bit pattern, one byte into the buffer (a row need not be aligned), with
        // a length off the vector widths so the scalar tail runs too.
        let bits: Vec<u16> = (0..=u16::MAX).chain(0..5).collect();
        let mut bytes = vec![0u8];
        bytes.extend(bits.iter().flat_map(|b| b.to_le_bytes()));
        let mut out = vec![0f32; bits.len()];
        widen_f16_bytes(&bytes[1..], &mut out);
        for (b, o) in bits.iter().zip(&out) {
            let want = half::f16::from_bits(*b).to_f32();
            assert!(o.to_bits() == want.to_bits() || (o.is_nan() && want.is_nan()), "{b:#06x}");
        }
    }

    #[test]
    fn slice_dots_have_their_closure_forms_bits() {
        // The MoE router computes its dots on slices and must keep the closure forms' order.
        let mut r = lcg(11);
        let mut f = move || (r() as f32 / (1 << 24) as f32) - 0.5;
        for n in [16, 64, 80, 2048, 2064] {
            let (x, y): (Vec<f32>, Vec<f32>) = (0..n).map(|_| (f() * 3.0, f())).unzip();
            let single = dot_single(n, |i| x[i], |i| y[i]);
            assert_eq!(dot_single_sl(&x, &y).to_bits(), single.to_bits(), "single n={n}");
            let tiled = dot_tiled(n, |i| x[i], |i| y[i]);
            assert_eq!(dot_tiled_arch_sl(&x, &y).to_bits(), tiled.to_bits(), "tiled n={n}");
        }
    }

    #[test]
    fn bf16_matches_scalar_and_f32_reference() {
        let mut r = lcg(5);
        let mut f = move || (r() as f32 / (1 << 24) as f32) - 0.5;
        for k in [256, 320, 96] {
            let w: Vec<u16> = (0..k).map(|_| to_bf16(f())).collect();
            let wb: Vec<u8> = w.iter().flat_map(|v| v.to_le_bytes()).collect();
            let x: Vec<f32> = (0..k).map(|_| f()).collect();
            let xb: Vec<u16> = x.iter().map(|&v| to_bf16(v)).collect();
            let exact: f64 = w.iter().zip(&x).map(|(&p, &q)| bf16_f32(p) as f64 * q as f64).sum();
            let norm: f64 = w.iter().zip(&x).map(|(&p, &q)| (bf16_f32(p) as f64 * q as f64).abs()).sum();
            let single = dot_bf16_single(&wb, &xb);
            assert_eq!(single.to_bits(), dot_bf16_single_ref(&wb, &xb).to_bits());
            assert!(((single as f64) - exact).abs() <= 1e-2 * norm, "{single} vs {exact}");
            if k % 32 == 0 {
                let tiled = dot_bf16_tiled(&wb, &xb);
                assert_eq!(tiled.to_bits(), dot_bf16_tiled_ref(&wb, &xb).to_bits());
                assert!(((tiled as f64) - exact).abs() <= 1e-2 * norm, "{tiled} vs {exact}");
            }
        }
        // Round to nearest even, ties included.
        assert_eq!(to_bf16(f32::from_bits(0x3f80_8000)), 0x3f80);
        assert_eq!(to_bf16(f32::from_bits(0x3f81_8000)), 0x3f82);
    }
}
