//! CPU versions of small ops written to round exactly as ggml's CPU backend does.
//!
//! Why: quantized matmuls quantize their activations (q8_0 / q8_1 / q8_K blocks). A one-ulp
//! difference upstream can move a value across a rounding boundary of that quantization and
//! change a logit by ~1e-2, which is enough to flip a greedy choice at a near-tie. Matching
//! llama.cpp's greedy output token for token therefore needs the cheap elementwise ops to be
//! bit-identical, not merely close.
//!
//! The vision tower's ones too: `layer_norm` (`ggml_norm`: sum in f64, centred squares in
//! 16-lane reductions summed in f64, `1/sqrtf(var+ε)`, then `ggml_mul` and `ggml_add`) and
//! `gelu` (`ggml_gelu`'s table of f16 values indexed by the f16-rounded input).

use candle_core::{CpuStorage, CustomOp2, Layout, Shape, Tensor};
use half::f16;

use super::blocks::{hsum8, reduce16};
use super::expf::{self, exp_variant, simd_width};
use super::feats::with_avx2_codegen;
use crate::error::Result;
use crate::runtime::pool::{self, SyncPtr};

/// `f` on `t`'s values as one host f32 slice: read in place when `t` is a contiguous f32
/// tensor in host memory (the usual case between CPU ops), copied otherwise.
pub fn with_host_f32<R>(t: &Tensor, f: impl FnOnce(&[f32]) -> R) -> Result<R> {
    {
        let (storage, layout) = t.storage_and_layout();
        if let (candle_core::Storage::Cpu(CpuStorage::F32(v)), Some((a, b))) =
            (&*storage, layout.contiguous_offsets())
        {
            return Ok(f(&v[a..b]));
        }
    }
    Ok(f(&t.flatten_all()?.to_dtype(candle_core::DType::F32)?.to_vec1::<f32>()?))
}

/// A custom op's CPU operand as f32 values (`op` names it in the error): contiguous f32 only.
pub fn f32_operand<'a>(s: &'a CpuStorage, l: &Layout, op: &str) -> candle_core::Result<&'a [f32]> {
    match (s, l.contiguous_offsets()) {
        (CpuStorage::F32(v), Some((a, b))) => Ok(&v[a..b]),
        _ => candle_core::bail!("{op}: operands must be contiguous f32"),
    }
}

/// ggml `rms_norm` (+ the following `mul`): sum of squares in f64, `scale = 1/sqrtf(mean+ε)`
/// in f32, `y = x·scale·w`.
struct GgmlRmsNorm {
    eps: f32,
}

impl CustomOp2 for GgmlRmsNorm {
    fn name(&self) -> &'static str {
        "wick-rms-norm"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (x, w) = (f32_operand(s1, l1, "rms_norm")?, f32_operand(s2, l2, "rms_norm")?);
        let n = w.len();
        if n == 0 || !x.len().is_multiple_of(n) {
            candle_core::bail!("rms_norm: {} values do not split into rows of {n}", x.len())
        }
        let mut y = vec![0f32; x.len()];
        let yp = SyncPtr(y.as_mut_ptr());
        // Rows spread over the pool: each is a chain of dependent f64 adds.
        pool::run(x.len() / n, &|r| {
            with_avx2_codegen(
                #[inline(always)]
                || {
                    let xr = &x[r * n..(r + 1) * n];
                    // SAFETY: task r alone writes row r.
                    let yr = unsafe { std::slice::from_raw_parts_mut(yp.get().add(r * n), n) };
                    let sum: f64 = xr.iter().map(|&v| (v * v) as f64).sum();
                    let mean = (sum / n as f64) as f32;
                    let scale = 1.0f32 / (mean + self.eps).sqrt();
                    for ((o, &v), &g) in yr.iter_mut().zip(xr).zip(w) {
                        *o = v * scale * g;
                    }
                },
            )
        });
        Ok((CpuStorage::F32(y), l1.shape().clone()))
    }
}

/// RMSNorm over the last dim of an f32 tensor, ggml-exact.
pub fn rms_norm(x: &Tensor, w: &Tensor, eps: f32) -> Result<Tensor> {
    Ok(x.contiguous()?.apply_op2_no_bwd(w, &GgmlRmsNorm { eps })?)
}

/// Causal depthwise conv as ggml's `ssm_conv` computes it for short kernels: for each output
/// t and channel c, `acc = fma(s[t+k][c], w[c][k], acc)` for k = 0..L, starting from 0.
/// `full`: `[L-1+len, d]` row-major (state rows then new rows); `w`: `[d, L]` row-major.
pub fn short_conv(full: &[f32], w: &[f32], len: usize, d: usize, l: usize) -> Vec<f32> {
    let mut y = vec![0f32; len * d];
    with_avx2_codegen(
        #[inline(always)]
        || {
            for t in 0..len {
                let out = &mut y[t * d..(t + 1) * d];
                for (c, o) in out.iter_mut().enumerate() {
                    let mut acc = 0f32;
                    for k in 0..l {
                        acc = full[(t + k) * d + c].mul_add(w[c * l + k], acc);
                    }
                    *o = acc;
                }
            }
        },
    );
    y
}

/// ggml `swiglu`: `silu(g)·u` with `silu(x) = x / (1 + expf(-x))`, expf as the local
/// llama.cpp build computes it (`expf`).
pub fn swiglu(gate: &Tensor, up: &Tensor) -> Result<Tensor> {
    let (gate, up) = (gate.contiguous()?, up.contiguous()?);
    let dims = gate.dims().to_vec();
    let n = *dims.last().unwrap_or(&1);
    let y = with_host_f32(&gate, |g| with_host_f32(&up, |u| expf::swiglu(g, u, n)))??;
    Ok(Tensor::from_vec(y, dims, gate.device())?)
}

/// RoPE as ggml's compiled `rotate_pairs` rounds it: the x1 products are rounded, the x0
/// products fused — `y0 = fma(x0, cos, -(x1·sin))`, `y1 = fma(x0, sin, x1·cos)`.
/// On aarch64 llama.cpp's build vectorizes the interleaved (`GGML_ROPE_TYPE_NORMAL`) loop
/// four pairs at a time (`ld2`, `fmul`, `fmls`, `fmla`, `st2`), and there `y0` fuses the
/// other product: `y0 = fma(-x1, sin, x0·cos)` for the first `⌊hd/8⌋·4` pairs, the
/// scalar order for the rest (`interleaved_pair`).
/// `x`: `[n, heads, hd]`; `cos`/`sin`: `[n, hd/2]`; pairs are adjacent (`interleaved`) or
/// `hd/2` apart (NEOX).
pub fn rope(x: &Tensor, cos: &Tensor, sin: &Tensor, interleaved: bool) -> Result<Tensor> {
    let (n, h, d) = x.dims3()?;
    let y = with_host_f32(x, |xs| {
        with_host_f32(cos, |c| with_host_f32(sin, |s| rope_host(xs, c, s, (n, h, d), interleaved)))
    })???;
    Ok(Tensor::from_vec(y, (n, h, d), x.device())?)
}

fn rope_host(
    xs: &[f32],
    c: &[f32],
    s: &[f32],
    (n, h, d): (usize, usize, usize),
    interleaved: bool,
) -> Vec<f32> {
    let half = d / 2;
    // The pairs ggml's aarch64 build rotates in its 4-pair vector loop (none elsewhere).
    let vector_pairs = if cfg!(target_arch = "aarch64") { half & !3 } else { 0 };
    let mut y = vec![0f32; xs.len()];
    let yp = SyncPtr(y.as_mut_ptr());
    pool::run(n, &|t| {
        with_avx2_codegen(
            #[inline(always)]
            || {
                let (ct, st) = (&c[t * half..(t + 1) * half], &s[t * half..(t + 1) * half]);
                // SAFETY: task t alone writes token t's rows.
                let yt = unsafe { std::slice::from_raw_parts_mut(yp.get().add(t * h * d), h * d) };
                let xt = &xs[t * h * d..(t + 1) * h * d];
                for head in 0..h {
                    let base = head * d;
                    for i in 0..half {
                        let (i0, i1) = if interleaved {
                            (base + 2 * i, base + 2 * i + 1)
                        } else {
                            (base + i, base + i + half)
                        };
                        let (x0, x1) = (xt[i0], xt[i1]);
                        (yt[i0], yt[i1]) = if interleaved {
                            interleaved_pair(x0, x1, ct[i], st[i], i < vector_pairs)
                        } else {
                            scalar_pair(x0, x1, ct[i], st[i])
                        };
                    }
                }
            },
        )
    });
    y
}

/// One pair in `rotate_pairs`' scalar order: `(fma(x0, c, -(x1·s)), fma(x0, s, x1·c))`.
#[inline(always)]
fn scalar_pair(x0: f32, x1: f32, c: f32, s: f32) -> (f32, f32) {
    (x0.mul_add(c, -(x1 * s)), x0.mul_add(s, x1 * c))
}

/// One interleaved pair; `vector`: in the order of ggml's aarch64 vector loop, where `y0` is
/// `fmls(x0·c, x1, s)` = `fma(-x1, s, x0·c)` (`y1` the scalar one).
#[inline(always)]
fn interleaved_pair(x0: f32, x1: f32, c: f32, s: f32, vector: bool) -> (f32, f32) {
    if vector {
        ((-x1).mul_add(s, x0 * c), x0.mul_add(s, x1 * c))
    } else {
        scalar_pair(x0, x1, c, s)
    }
}

/// `ggml_norm` over rows of `w.len()` values, then `· w + b`.
pub fn layer_norm(x: &[f32], w: &[f32], b: &[f32], eps: f32) -> Vec<f32> {
    let n = w.len();
    let mut y = vec![0f32; x.len()];
    let yp = SyncPtr(y.as_mut_ptr());
    let lanes = if simd_width(exp_variant()) == 16 { 16 } else { 8 };
    pool::run(x.len() / n, &|r| {
        let xr = &x[r * n..(r + 1) * n];
        // SAFETY: `y` has x.len() values, whole rows of n; task r alone writes row r.
        let yr = unsafe { std::slice::from_raw_parts_mut(yp.get().add(r * n), n) };
        let sum: f64 = xr.iter().map(|&v| v as f64).sum();
        let mean = sum as f32 / n as f32;
        let mut var = 0f64;
        let mut i = 0;
        while i + lanes <= n {
            let mut sq = [0f32; 16];
            for l in 0..lanes {
                let v = xr[i + l] - mean;
                yr[i + l] = v;
                sq[l] = v * v;
            }
            var += if lanes == 16 { reduce16(&sq) } else { hsum8(sq[..8].try_into().unwrap()) } as f64;
            i += lanes;
        }
        for j in i..n {
            let v = xr[j] - mean;
            yr[j] = v;
            var += (v * v) as f64;
        }
        let var = (var / n as f64) as f32;
        let scale = 1.0f32 / (var + eps).sqrt();
        for j in 0..n {
            yr[j] = yr[j] * scale * w[j] + b[j];
        }
    });
    y
}

/// `ggml_gelu`'s f16 table: the tanh GELU of every f16 value, rounded to f16.
fn gelu_table() -> &'static [u16] {
    static T: std::sync::OnceLock<Vec<u16>> = std::sync::OnceLock::new();
    T.get_or_init(|| {
        const A: f32 = 0.044715;
        const S: f32 = 0.797_884_6;
        (0..=u16::MAX)
            .map(|bits| {
                let x = f16::from_bits(bits).to_f32();
                let inner = S * x * (A * x).mul_add(x, 1.0);
                f16::from_f32(0.5 * x * (1.0 + inner.tanh())).to_bits()
            })
            .collect()
    })
}

/// `ggml_gelu` (tanh form) in place: 0 below −10, x above 10, else the f16 table; spread over
/// the pool.
/// `y[i] += x[i mod x.len()]` over the pool (a bias on every row of `y`, or a residual of
/// `y`'s length): ggml's `add`, element by element, without a serial pass over large rows.
pub fn add_rows(y: &mut [f32], x: &[f32]) {
    const PIECE: usize = 16384;
    if x.is_empty() {
        return;
    }
    let yp = SyncPtr(y.as_mut_ptr());
    let n = y.len();
    pool::run(n.div_ceil(PIECE), &|p| {
        let (a, b) = (p * PIECE, ((p + 1) * PIECE).min(n));
        // SAFETY: a..b lies within y (b ≤ n); task p alone touches elements a..b.
        let part = unsafe { std::slice::from_raw_parts_mut(yp.get().add(a), b - a) };
        // In runs that line up with `x` (the loop vectorizes).
        let mut at = 0;
        while at < part.len() {
            let j = (a + at) % x.len();
            let take = (x.len() - j).min(part.len() - at);
            for (v, &xv) in part[at..at + take].iter_mut().zip(&x[j..j + take]) {
                *v += xv;
            }
            at += take;
        }
    });
}

pub fn gelu(x: &mut [f32]) {
    let t = gelu_table();
    const PIECE: usize = 4096;
    let xp = SyncPtr(x.as_mut_ptr());
    let n = x.len();
    pool::run(n.div_ceil(PIECE), &|p| {
        with_avx2_codegen(
            #[inline(always)]
            || {
                let (a, b) = (p * PIECE, ((p + 1) * PIECE).min(n));
                // SAFETY: a..b lies within x (b ≤ n); task p alone touches elements a..b.
                let part = unsafe { std::slice::from_raw_parts_mut(xp.get().add(a), b - a) };
                for v in part.iter_mut() {
                    *v = if *v <= -10.0 {
                        0.0
                    } else if *v >= 10.0 {
                        *v
                    } else {
                        f16::from_bits(t[f16::from_f32(*v).to_bits() as usize]).to_f32()
                    };
                }
            },
        )
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `add_rows` adds `x[i mod len]` to every element once: biases over rows, a residual of
    /// `y`'s length, lengths that cross the pool's pieces at every offset of a row.
    #[test]
    fn add_rows_adds_each_element_once() {
        for (n, len) in [(1024 * 768, 768), (40_000, 40_000), (50_001, 3), (5, 7), (0, 4)] {
            let x: Vec<f32> = (0..len).map(|i| (i % 97) as f32 * 0.5 - 3.0).collect();
            let mut y: Vec<f32> = (0..n).map(|i| (i % 13) as f32).collect();
            let want: Vec<f32> = y.iter().enumerate().map(|(i, v)| v + x[i % len]).collect();
            add_rows(&mut y, &x);
            assert_eq!(y, want, "{n} values, rows of {len}");
        }
        add_rows(&mut [1.0], &[]);
    }

    /// Interleaved RoPE in the build's pair orders: on aarch64 the first `⌊hd/8⌋·4` pairs of
    /// each head as ggml's vector loop (`y0 = fma(-x1, s, x0·c)`), the rest and every pair
    /// elsewhere (and NEOX everywhere) as its scalar loop. The values make the two orders differ.
    #[test]
    fn rope_pairs_follow_the_build_orders() {
        let (n, h, d) = (2, 3, 20);
        let xs: Vec<f32> = (0..n * h * d).map(|i| (i as f32 * 0.731).sin() * 3.1).collect();
        let c: Vec<f32> = (0..n * d / 2).map(|i| (i as f32 * 0.37 + 0.2).cos()).collect();
        let s: Vec<f32> = (0..n * d / 2).map(|i| (i as f32 * 0.37 + 0.2).sin()).collect();
        let vector = if cfg!(target_arch = "aarch64") { 8 } else { 0 };
        let mut orders_differ = false;
        for interleaved in [true, false] {
            let y = rope_host(&xs, &c, &s, (n, h, d), interleaved);
            for t in 0..n {
                for head in 0..h {
                    for i in 0..d / 2 {
                        let base = (t * h + head) * d;
                        let (i0, i1) = if interleaved {
                            (base + 2 * i, base + 2 * i + 1)
                        } else {
                            (base + i, base + i + d / 2)
                        };
                        let (x0, x1, ct, st) = (xs[i0], xs[i1], c[t * d / 2 + i], s[t * d / 2 + i]);
                        let scalar = (x0.mul_add(ct, -(x1 * st)), x0.mul_add(st, x1 * ct));
                        let fmls = ((-x1).mul_add(st, x0 * ct), scalar.1);
                        orders_differ |= scalar != fmls;
                        let want = if interleaved && i < vector { fmls } else { scalar };
                        assert_eq!(
                            (y[i0], y[i1]),
                            want,
                            "interleaved {interleaved} token {t} head {head} pair {i}"
                        );
                    }
                }
            }
        }
        assert!(orders_differ, "no pair tells the two orders apart");
    }

    #[test]
    fn gelu_is_tanh_gelu_and_layer_norm_has_unit_moments() {
        let mut g = vec![-11.0, -1.0, 0.0, 0.5, 2.0, 12.0];
        gelu(&mut g);
        assert_eq!(g[0], 0.0);
        assert_eq!(g[5], 12.0);
        assert!((g[4] - 1.9546).abs() < 2e-3 && (g[1] + 0.1588).abs() < 1e-3);
        let x: Vec<f32> = (0..40).map(|i| (i as f32 * 1.3).cos()).collect();
        let y = layer_norm(&x, &[1.0; 40], &[0.0; 40], 1e-6);
        let mean = y.iter().sum::<f32>() / 40.0;
        let var = y.iter().map(|v| v * v).sum::<f32>() / 40.0;
        assert!(mean.abs() < 1e-5 && (var - 1.0).abs() < 1e-3);
    }
}
