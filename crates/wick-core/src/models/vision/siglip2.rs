//! The SigLIP2 (NaFlex) vision tower of LFM2-VL, as llama.cpp's `clip_graph_siglip` builds
//! it for `PROJECTOR_TYPE_LFM2`: a 16-px patch embedding (conv), the learned 16×16 position
//! grid resized to the image's patch grid (bilinear, antialiased), pre-LN blocks
//! (`x += attn(LN1 x)`, `x += ffn_down(gelu(ffn_up(LN2 x)))`, bidirectional attention with
//! biases), and the final `post_ln`.

use std::sync::Arc;

use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::Device;

use crate::error::{Result, WickError};
use crate::gguf::GgufFile;
use crate::kernels::cpu::matmul;
use crate::kernels::cpu::vit::{
    add_rows, attention, gelu, layer_norm, matmul_f16w, matmul_f32, patch_embed, resize_antialias,
};
use crate::kernels::RowPos;

/// `y = x Wᵀ + b` for an encoder weight, as ggml's `mul_mat` computes it for several rows:
/// F32 weights through `matmul_f32`, F16 and quantized ones through the row-dot matmul (the
/// clip context keeps weights unrepacked, so llama.cpp takes the same kernels).
pub struct VLinear {
    w: Arc<QTensor>,
    /// The weight as f32 when it is F32 (`matmul_f32`).
    w32: Option<Vec<f32>>,
    b: Option<Vec<f32>>,
    pub n_in: usize,
    pub n_out: usize,
}

impl VLinear {
    pub fn load(g: &GgufFile, name: &str, n_in: usize, n_out: Option<usize>) -> Result<Self> {
        let wname = format!("{name}.weight");
        let info = g.info(&wname).ok_or_else(|| WickError::load(format!("missing tensor `{wname}`")))?;
        let n_out = match n_out {
            Some(n) => n,
            None => info.dims.get(1).copied().unwrap_or(0),
        };
        g.expect_dims(&wname, &[n_in, n_out])?;
        let w = Arc::new(g.qtensor(&wname, &Device::Cpu)?);
        let w32 = match w.dtype() {
            GgmlDType::F32 => Some(w.dequantize(&Device::Cpu)?.flatten_all()?.to_vec1::<f32>()?),
            dt if matmul::supported(dt, n_out) => None,
            dt => {
                return Err(WickError::load(format!(
                    "`{wname}`: {dt:?} weights are not supported in a projector"
                )))
            }
        };
        let b = opt_vec(g, &format!("{name}.bias"), n_out)?;
        Ok(Self { w, w32, b, n_in, n_out })
    }

    /// `x`: `[m, n_in]` → `[m, n_out]`.
    pub fn forward(&self, x: &[f32], m: usize) -> Result<Vec<f32>> {
        let f16_tiled = self.w.dtype() == GgmlDType::F16
            && m >= 2
            && self.n_in.is_multiple_of(16)
            && self.n_out.is_multiple_of(4);
        let mut y = match &self.w32 {
            Some(w) => matmul_f32(x, m, w, self.n_out, self.n_in),
            None if f16_tiled => matmul_f16w(x, m, &self.w.data()?, self.n_out, self.n_in),
            None => {
                let rows: Vec<RowPos> =
                    (0..m).map(|idx| RowPos { seq_len: m as u32, idx: idx as u32 }).collect();
                matmul::matmul_host(x, m, &self.w, &rows)?
            }
        };
        if let Some(b) = &self.b {
            add_rows(&mut y, b);
        }
        Ok(y)
    }
}

/// An f32 vector tensor of `n` values (any stored float type), if present.
pub fn opt_vec(g: &GgufFile, name: &str, n: usize) -> Result<Option<Vec<f32>>> {
    if !g.has(name) {
        return Ok(None);
    }
    g.expect_dims(name, &[n])?;
    Ok(Some(g.f32_tensor(name, &Device::Cpu)?.to_dtype(candle_core::DType::F32)?.to_vec1::<f32>()?))
}

pub fn vec(g: &GgufFile, name: &str, n: usize) -> Result<Vec<f32>> {
    opt_vec(g, name, n)?.ok_or_else(|| WickError::load(format!("missing tensor `{name}`")))
}

/// A LayerNorm's weight and bias.
pub struct Norm {
    w: Vec<f32>,
    b: Vec<f32>,
    eps: f32,
}

impl Norm {
    pub fn load(g: &GgufFile, name: &str, n: usize, eps: f32) -> Result<Self> {
        Ok(Self { w: vec(g, &format!("{name}.weight"), n)?, b: vec(g, &format!("{name}.bias"), n)?, eps })
    }
    pub fn forward(&self, x: &[f32]) -> Vec<f32> {
        layer_norm(x, &self.w, &self.b, self.eps)
    }
}

struct Block {
    ln1: Norm,
    q: VLinear,
    k: VLinear,
    v: VLinear,
    out: VLinear,
    ln2: Norm,
    up: VLinear,
    down: VLinear,
}

pub struct Siglip2 {
    shape: Shape,
    /// Conv kernel as rows of 3·patch² per output channel.
    patch_w: Vec<f32>,
    patch_b: Option<Vec<f32>>,
    /// Learned positions, `side`×`side` rows of `d`.
    pos: Vec<f32>,
    blocks: Vec<Block>,
    post_ln: Option<Norm>,
}

/// The tower's hyperparameters, read and checked once for either path.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub d: usize,
    pub n_head: usize,
    pub ff: usize,
    pub n_layer: usize,
    pub eps: f32,
    pub patch: usize,
    /// The learned position grid is `side`×`side`.
    pub side: usize,
}

impl Shape {
    pub fn read(g: &GgufFile) -> Result<Self> {
        let m = &g.metadata;
        let d = m.usize("clip.vision.embedding_length")?;
        let n_head = m.usize("clip.vision.attention.head_count")?;
        let ff = m.usize("clip.vision.feed_forward_length")?;
        let n_layer = m.usize("clip.vision.block_count")?;
        let eps = m.f32("clip.vision.attention.layer_norm_epsilon")?;
        let patch = m.usize("clip.vision.patch_size")?;
        if n_head == 0 || !d.is_multiple_of(n_head) || patch == 0 {
            return Err(WickError::load(format!("clip: width {d} with {n_head} heads, patch {patch}")));
        }
        g.expect_dims(PATCH_KERNEL, &[patch, patch, 3, d])?;
        let pinfo =
            g.info(POSITIONS).ok_or_else(|| WickError::load(format!("missing tensor `{POSITIONS}`")))?;
        let n_pos = pinfo.dims.get(1).copied().unwrap_or(0);
        let side = (n_pos as f64).sqrt() as usize;
        if side * side != n_pos || pinfo.dims.first() != Some(&d) {
            return Err(WickError::load(format!("`{POSITIONS}` has dims {:?}", pinfo.dims)));
        }
        Ok(Self { d, n_head, ff, n_layer, eps, patch, side })
    }

    /// `1/sqrt(head_dim)`, the attention's scale.
    pub fn scale(&self) -> f32 {
        1.0 / ((self.d / self.n_head) as f32).sqrt()
    }

    /// The learned positions for an `nx`×`ny` patch grid: the table itself at its own size,
    /// else resized (`ggml_interpolate`, bilinear antialiased) on the host.
    pub fn positions(&self, table: &[f32], nx: usize, ny: usize) -> Vec<f32> {
        if (nx, ny) == (self.side, self.side) {
            table.to_vec()
        } else {
            resize_antialias(table, self.side, self.d, nx, ny)
        }
    }
}

pub const PATCH_KERNEL: &str = "v.patch_embd.weight";
pub const POSITIONS: &str = "v.position_embd.weight";

/// A tensor of the file as host f32 values (any stored type).
pub fn host_f32(g: &GgufFile, name: &str) -> Result<Vec<f32>> {
    Ok(g.qtensor(name, &Device::Cpu)?.dequantize(&Device::Cpu)?.flatten_all()?.to_vec1::<f32>()?)
}

impl Siglip2 {
    pub fn load(g: &GgufFile, shape: &Shape) -> Result<Self> {
        let Shape { d, ff, n_layer, eps, .. } = *shape;
        let patch_w = host_f32(g, PATCH_KERNEL)?;
        let pos = host_f32(g, POSITIONS)?;
        let blocks = (0..n_layer)
            .map(|il| {
                let p = format!("v.blk.{il}");
                Ok(Block {
                    ln1: Norm::load(g, &format!("{p}.ln1"), d, eps)?,
                    q: VLinear::load(g, &format!("{p}.attn_q"), d, Some(d))?,
                    k: VLinear::load(g, &format!("{p}.attn_k"), d, Some(d))?,
                    v: VLinear::load(g, &format!("{p}.attn_v"), d, Some(d))?,
                    out: VLinear::load(g, &format!("{p}.attn_out"), d, Some(d))?,
                    ln2: Norm::load(g, &format!("{p}.ln2"), d, eps)?,
                    up: VLinear::load(g, &format!("{p}.ffn_up"), d, Some(ff))?,
                    down: VLinear::load(g, &format!("{p}.ffn_down"), ff, Some(d))?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let post_ln =
            if g.has("v.post_ln.weight") { Some(Norm::load(g, "v.post_ln", d, eps)?) } else { None };
        Ok(Self {
            shape: *shape,
            patch_w,
            patch_b: opt_vec(g, "v.patch_embd.bias", d)?,
            pos,
            blocks,
            post_ln,
        })
    }

    /// Planar `[3, h, w]` normalised pixels → `[(h/p)·(w/p), d]` features, row-major.
    pub fn forward(&self, pixels: &[f32], w: usize, h: usize) -> Result<Vec<f32>> {
        let Shape { n_head, patch, .. } = self.shape;
        let (nx, ny) = (w / patch, h / patch);
        let n = nx * ny;
        let mut x = patch_embed(pixels, w, h, patch, &self.patch_w);
        let pos = self.shape.positions(&self.pos, nx, ny);
        if let Some(b) = &self.patch_b {
            add_rows(&mut x, b);
        }
        add_rows(&mut x, &pos);
        let scale = self.shape.scale();
        for b in &self.blocks {
            let hcur = b.ln1.forward(&x);
            let (q, k, v) = (b.q.forward(&hcur, n)?, b.k.forward(&hcur, n)?, b.v.forward(&hcur, n)?);
            let a = b.out.forward(&attention(&q, &k, &v, n, n_head, scale), n)?;
            add_rows(&mut x, &a);
            let hcur = b.ln2.forward(&x);
            let mut u = b.up.forward(&hcur, n)?;
            gelu(&mut u);
            let f = b.down.forward(&u, n)?;
            add_rows(&mut x, &f);
        }
        Ok(match &self.post_ln {
            Some(ln) => ln.forward(&x),
            None => x,
        })
    }
}
