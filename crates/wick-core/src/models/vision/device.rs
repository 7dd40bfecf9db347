//! The vision encoder on the device path (`runtime::device`): the SigLIP2 tower and the LFM2
//! projector of `siglip2.rs` / `lfm2_vl.rs` written once on candle's device-generic ops, so
//! that candle's CUDA and Metal backends run it (and its CPU device, which is how the tests
//! check it against the exact path: `tests/vision_device.rs`).
//!
//! Each op rounds where ggml's CPU backend rounds in `clip.cpp`'s graph (flash attention
//! off), so the two paths part only by summation order:
//! - weights as the language models' device path takes them (`layers::Linear`: `QMatMul`,
//!   half weights with f16 inputs summed in f32, f32 weights in f32);
//! - the patch embedding (`ggml_conv_2d`) as im2col by reshape/permute and one matmul, pixels
//!   and kernel rounded to f16 (ggml's im2col is F16);
//! - LayerNorm as `ggml_norm` computes it (sums in f64, `1/sqrtf(var + ε)`), then `·w + b`;
//! - GELU as ggml's f16 table (input and result rounded to f16, ±10 cut-offs);
//! - attention all in f32 (the tower's K, Q and V are never cached, so nothing is rounded to
//!   f16): `softmax(Q·Kᵀ·scale)·V` with candle's matmul and softmax;
//! - the position table resized on the host (once per image size) and uploaded.

use candle_core::{DType, Device, Tensor, D};

use super::lfm2_vl::unshuffle_dims;
use super::siglip2::{host_f32, Shape, PATCH_KERNEL, POSITIONS};
use crate::error::Result;
use crate::gguf::GgufFile;
use crate::models::layers::{Linear, RowPos};
use crate::runtime::device::Placement;

/// The wide type for sums ggml makes in f64: f64, except on Metal, which has none.
fn wide(dev: &Device) -> DType {
    if dev.is_metal() {
        DType::F32
    } else {
        DType::F64
    }
}

fn f16_round(t: &Tensor) -> Result<Tensor> {
    Ok(t.to_dtype(DType::F16)?.to_dtype(DType::F32)?)
}

/// `ggml_norm` over the last dim, then `· w + b`, in the exact kernel's steps: the mean is
/// the f64 sum rounded to f32 and divided in f32, the variance the f64 sum of the f32
/// squares of `x − mean` over n, rounded to f32, the scale `1/sqrt(var + ε)` in f32.
pub struct LayerNorm {
    w: Tensor,
    b: Tensor,
    eps: f32,
}

impl LayerNorm {
    pub fn load(g: &GgufFile, name: &str, n: usize, eps: f32, dev: &Device) -> Result<Self> {
        let vec = |part: &str| -> Result<Tensor> {
            let t = format!("{name}.{part}");
            g.expect_dims(&t, &[n])?;
            Ok(g.f32_tensor(&t, dev)?.to_dtype(DType::F32)?)
        };
        Ok(Self { w: vec("weight")?, b: vec("bias")?, eps })
    }

    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let dev = x.device();
        let wide = wide(dev);
        let n = x.dim(D::Minus1)?;
        let sum = x.to_dtype(wide)?.sum_keepdim(D::Minus1)?.to_dtype(DType::F32)?;
        let mean = sum.broadcast_div(&Tensor::new(n as f32, dev)?)?;
        let v = x.broadcast_sub(&mean)?;
        let var = v.sqr()?.to_dtype(wide)?.sum_keepdim(D::Minus1)?;
        // Metal has no f64 tensor at all: the divisor is made in the wide type itself.
        let n_wide = match wide {
            DType::F64 => Tensor::new(n as f64, dev)?,
            _ => Tensor::new(n as f32, dev)?,
        };
        let var = var.broadcast_div(&n_wide)?.to_dtype(DType::F32)?;
        let scale = (var + self.eps as f64)?.sqrt()?.recip()?;
        Ok(v.broadcast_mul(&scale)?.broadcast_mul(&self.w)?.broadcast_add(&self.b)?)
    }
}

/// `ggml_gelu` (tanh form) as the CPU backend's f16 table gives it, on candle ops: the input
/// rounded to f16, candle's tanh GELU, the result rounded to f16; 0 below −10, x above 10.
pub fn gelu(x: &Tensor) -> Result<Tensor> {
    let table = f16_round(&f16_round(x)?.gelu()?)?;
    let high = x.ge(10f64)?;
    let low = x.le(-10f64)?;
    Ok(high.where_cond(x, &low.where_cond(&x.zeros_like()?, &table)?)?)
}

/// Bidirectional attention in f32: `q`, `k`, `v` `[n, d]` → `[n, d]`.
fn attention(q: &Tensor, k: &Tensor, v: &Tensor, n_head: usize, scale: f32) -> Result<Tensor> {
    let (n, d) = q.dims2()?;
    let heads = |t: &Tensor| -> Result<Tensor> {
        Ok(t.reshape((n, n_head, d / n_head))?.transpose(0, 1)?.contiguous()?)
    };
    let (q, k, v) = (heads(q)?, heads(k)?, heads(v)?);
    let scores = (q.matmul(&k.t()?)? * scale as f64)?;
    let p = candle_nn::ops::softmax_last_dim(&scores)?;
    Ok(p.matmul(&v)?.transpose(0, 1)?.reshape((n, d))?)
}

/// Each row its own position in one sequence of `n` (what the row-dot kernels some weight
/// types take on candle's CPU device pick their kernel by).
fn rows(n: usize) -> Vec<RowPos> {
    (0..n).map(|i| RowPos { seq_len: n as u32, idx: i as u32 }).collect()
}

/// `ggml_conv_2d(kernel, image, stride = p)`: planar `[3·h·w]` pixels → `[(h/p)·(w/p), d]`,
/// `kernel` `[d, 3·p·p]` already rounded to f16 (see `Tower::kernel`).
fn patch_embed(pixels: &Tensor, w: usize, h: usize, p: usize, kernel: &Tensor) -> Result<Tensor> {
    let (nx, ny) = (w / p, h / p);
    // im2col: patch (py, px)'s row holds (channel, ky, kx), the kernel's column order.
    let cols = pixels
        .reshape((3, ny, p, nx, p))?
        .permute((1, 3, 0, 2, 4))?
        .contiguous()?
        .reshape((nx * ny, 3 * p * p))?;
    Ok(f16_round(&cols)?.matmul(&kernel.t()?)?)
}

struct Block {
    ln1: LayerNorm,
    q: Linear,
    k: Linear,
    v: Linear,
    out: Linear,
    ln2: LayerNorm,
    up: Linear,
    down: Linear,
}

/// The SigLIP2 tower on a device.
pub struct Tower {
    shape: Shape,
    /// The conv kernel `[d, 3·p·p]`, rounded to f16 and kept as f32: products of f16 values
    /// are exact in f32, so an f32 GEMM sums them as ggml does, and its output stays f32 (a
    /// half GEMM's would be rounded to f16; the kernel is small).
    kernel: Tensor,
    patch_b: Option<Tensor>,
    /// Learned positions on the host, `side`×`side` rows of `d` (resized per image size).
    pos: Vec<f32>,
    blocks: Vec<Block>,
    post_ln: Option<LayerNorm>,
}

impl Tower {
    pub fn load(g: &GgufFile, shape: &Shape, dev: &Placement) -> Result<Self> {
        let Shape { d, ff, n_layer, eps, patch, .. } = *shape;
        let kernel = f16_round(&Tensor::from_vec(host_f32(g, PATCH_KERNEL)?, (d, 3 * patch * patch), dev)?)?;
        let patch_b = if g.has("v.patch_embd.bias") {
            g.expect_dims("v.patch_embd.bias", &[d])?;
            Some(g.f32_tensor("v.patch_embd.bias", dev)?.to_dtype(DType::F32)?)
        } else {
            None
        };
        let blocks = (0..n_layer)
            .map(|il| {
                let p = format!("v.blk.{il}");
                let lin = |part: &str, n_in, n_out| Linear::load(g, &format!("{p}.{part}"), n_in, n_out, dev);
                Ok(Block {
                    ln1: LayerNorm::load(g, &format!("{p}.ln1"), d, eps, dev)?,
                    q: lin("attn_q", d, d)?,
                    k: lin("attn_k", d, d)?,
                    v: lin("attn_v", d, d)?,
                    out: lin("attn_out", d, d)?,
                    ln2: LayerNorm::load(g, &format!("{p}.ln2"), d, eps, dev)?,
                    up: lin("ffn_up", d, ff)?,
                    down: lin("ffn_down", ff, d)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let post_ln = if g.has("v.post_ln.weight") {
            Some(LayerNorm::load(g, "v.post_ln", d, eps, dev)?)
        } else {
            None
        };
        Ok(Self { shape: *shape, kernel, patch_b, pos: host_f32(g, POSITIONS)?, blocks, post_ln })
    }

    /// The device the tower's weights live on.
    pub fn device(&self) -> &Device {
        self.kernel.device()
    }

    /// Planar `[3, h, w]` normalised pixels (on the tower's device) → `[(h/p)·(w/p), d]`.
    pub fn forward(&self, pixels: &Tensor, w: usize, h: usize) -> Result<Tensor> {
        let Shape { d, n_head, patch, .. } = self.shape;
        let (nx, ny) = (w / patch, h / patch);
        let n = nx * ny;
        let rows = rows(n);
        let mut x = patch_embed(pixels, w, h, patch, &self.kernel)?;
        if let Some(b) = &self.patch_b {
            x = x.broadcast_add(b)?;
        }
        let pos = Tensor::from_vec(self.shape.positions(&self.pos, nx, ny), (n, d), pixels.device())?;
        x = (x + pos)?;
        let scale = self.shape.scale();
        for b in &self.blocks {
            let hcur = b.ln1.forward(&x)?;
            let (q, k, v) =
                (b.q.forward(&hcur, &rows)?, b.k.forward(&hcur, &rows)?, b.v.forward(&hcur, &rows)?);
            x = (x + b.out.forward(&attention(&q, &k, &v, n_head, scale)?, &rows)?)?;
            let hcur = b.ln2.forward(&x)?;
            let u = gelu(&b.up.forward(&hcur, &rows)?)?;
            x = (x + b.down.forward(&u, &rows)?)?;
        }
        match &self.post_ln {
            Some(ln) => ln.forward(&x),
            None => Ok(x),
        }
    }
}

/// `lfm2_vl::unshuffle` by reshape/permute: token (i, j) = concat over dy, dx of
/// X[f·i + dy, f·j + dx] (zeros past the grid's edge), tokens row-major.
fn unshuffle(x: &Tensor, nx: usize, ny: usize, f: usize) -> Result<Tensor> {
    let (_, d) = x.dims2()?;
    let (ox, oy) = unshuffle_dims(nx, ny, f);
    Ok(x.reshape((ny, nx, d))?
        .pad_with_zeros(0, 0, oy * f - ny)?
        .pad_with_zeros(1, 0, ox * f - nx)?
        .reshape((oy, f, ox, f, d))?
        .permute((0, 2, 1, 3, 4))?
        .contiguous()?
        .reshape((oy * ox, f * f * d))?)
}

/// The LFM2 projector on a device: unshuffle by reshape/permute, `mm.input_norm`, then
/// `mm.2(gelu(mm.1(·)))`.
pub struct Projector {
    factor: usize,
    input_norm: Option<LayerNorm>,
    mm1: Linear,
    mm2: Linear,
}

impl Projector {
    /// `d`: the tower's width; `hidden`, `n_embd`: `mm.1`'s and `mm.2`'s output widths.
    pub fn load(
        g: &GgufFile,
        d: usize,
        factor: usize,
        hidden: usize,
        n_embd: usize,
        dev: &Placement,
    ) -> Result<Self> {
        let merged = d * factor * factor;
        let input_norm = if g.has("mm.input_norm.weight") {
            Some(LayerNorm::load(g, "mm.input_norm", merged, 1e-5, dev)?)
        } else {
            None
        };
        Ok(Self {
            factor,
            input_norm,
            mm1: Linear::load(g, "mm.1", merged, hidden, dev)?,
            mm2: Linear::load(g, "mm.2", hidden, n_embd, dev)?,
        })
    }

    /// `[ny·nx, d]` features → `[⌈ny/f⌉·⌈nx/f⌉, n_embd]` embeddings.
    pub fn forward(&self, x: &Tensor, nx: usize, ny: usize) -> Result<Tensor> {
        let t = unshuffle(x, nx, ny, self.factor)?;
        let t = match &self.input_norm {
            Some(ln) => ln.forward(&t)?,
            None => t,
        };
        let rows = rows(t.dim(0)?);
        let h = gelu(&self.mm1.forward(&t, &rows)?)?;
        self.mm2.forward(&h, &rows)
    }
}

#[cfg(test)]
mod tests;
