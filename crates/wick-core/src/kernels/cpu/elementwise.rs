//! CPU versions of small ops written to round exactly as ggml's CPU backend does.
//!
//! Why: quantized matmuls quantize their activations (q8_0 / q8_1 / q8_K blocks). A one-ulp
//! difference upstream can move a value across a rounding boundary of that quantization and
//! change a logit by ~1e-2, which is enough to flip a greedy choice at a near-tie. Matching
//! llama.cpp's greedy output token for token therefore needs the cheap elementwise ops to be
//! bit-identical, not merely close.

use candle_core::{CpuStorage, CustomOp2, Layout, Shape, Tensor};

use super::expf;
use super::feats::fast;
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
        let (Some((a1, b1)), Some((a2, b2))) = (l1.contiguous_offsets(), l2.contiguous_offsets()) else {
            candle_core::bail!("rms_norm needs contiguous inputs")
        };
        let (CpuStorage::F32(x), CpuStorage::F32(w)) = (s1, s2) else {
            candle_core::bail!("rms_norm is implemented for f32 only")
        };
        let (x, w) = (&x[a1..b1], &w[a2..b2]);
        let n = w.len();
        if n == 0 || !x.len().is_multiple_of(n) {
            candle_core::bail!("rms_norm: {} values do not split into rows of {n}", x.len())
        }
        let mut y = vec![0f32; x.len()];
        let yp = SyncPtr(y.as_mut_ptr());
        // Rows spread over the pool: each is a chain of dependent f64 adds.
        pool::run(x.len() / n, &|r| {
            fast(
                #[inline(always)]
                || {
                    let xr = &x[r * n..(r + 1) * n];
                    // Safety: task r alone writes row r.
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
    fast(
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
    let mut y = vec![0f32; xs.len()];
    let yp = SyncPtr(y.as_mut_ptr());
    pool::run(n, &|t| {
        fast(
            #[inline(always)]
            || {
                let (ct, st) = (&c[t * half..(t + 1) * half], &s[t * half..(t + 1) * half]);
                // Safety: task t alone writes token t's rows.
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
                        yt[i0] = x0.mul_add(ct[i], -(x1 * st[i]));
                        yt[i1] = x0.mul_add(st[i], x1 * ct[i]);
                    }
                }
            },
        )
    });
    y
}
