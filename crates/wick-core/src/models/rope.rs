//! Rotary position embeddings, their tables built as ggml builds them.

use candle_core::{DType, Device, Tensor};

use super::layers::{Hparams, RmsNorm};
use crate::error::{Result, WickError};
use crate::kernels::cpu::elementwise::rope;
use crate::kernels::row_ops;
use crate::runtime::trace;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeStyle {
    /// llama.cpp `LLAMA_ROPE_TYPE_NORM`: rotates adjacent pairs (x₂ᵢ, x₂ᵢ₊₁).
    Interleaved,
    /// llama.cpp `LLAMA_ROPE_TYPE_NEOX`: rotates halves (xᵢ, xᵢ₊ₙ/₂).
    Neox,
}

/// Rotary position embedding over the whole head (n_rot = head_dim).
pub struct Rope {
    pub style: RopeStyle,
    pub n_rot: usize,
    pub base: f32,
    /// Linear position scaling (`1/rope.scaling.factor`), 1 when unscaled.
    pub freq_scale: f32,
    /// Per-pair divisors from `rope_freqs.weight` (Llama 3), if present.
    pub freq_factors: Option<Vec<f32>>,
}

impl Rope {
    /// cos/sin tables `[n, 1, n_rot/2]` for one position per token. Angles are built the
    /// way ggml does (θ multiplied by base^(-2/n) pair after pair, cos/sin in f32) so that
    /// they agree with llama.cpp to the last bit.
    pub fn tables(&self, positions: &[usize], dev: &Device) -> Result<(Tensor, Tensor)> {
        let half = self.n_rot / 2;
        let theta_scale = self.base.powf(-2.0 / self.n_rot as f32);
        let mut cos = Vec::with_capacity(positions.len() * half);
        let mut sin = Vec::with_capacity(positions.len() * half);
        for &p in positions {
            let mut theta = p as f32;
            for i in 0..half {
                let ff = self.freq_factors.as_ref().map_or(1.0, |f| f[i]);
                let t = self.freq_scale * (theta / ff);
                cos.push(t.cos());
                sin.push(t.sin());
                theta *= theta_scale;
            }
        }
        let shape = (positions.len(), 1, half);
        Ok((Tensor::from_vec(cos, shape, dev)?, Tensor::from_vec(sin, shape, dev)?))
    }

    /// `apply` after each head's RMSNorm by `norm` (the Q/K norms) when given: on the device
    /// path one op in ggml's arithmetic where it is built (`row_ops::norm_rope`).
    pub fn apply_normed(
        &self,
        x: &Tensor,
        norm: Option<&RmsNorm>,
        (cos, sin): (&Tensor, &Tensor),
        exact: bool,
    ) -> Result<Tensor> {
        if !exact && row_ops::available(x.device()) {
            let interleaved = self.style == RopeStyle::Interleaved;
            return trace::span("head norms and RoPE", x.device(), || {
                row_ops::norm_rope(x, norm.map(RmsNorm::weights), cos, sin, interleaved)
            });
        }
        let x = match norm {
            Some(n) => n.forward(x)?,
            None => x.clone(),
        };
        self.apply(&x, cos, sin, exact)
    }

    /// `x`: `[n, heads, head_dim]`, token i rotated by row i of the tables; ggml's kernel on
    /// the exact path, candle-nn's (any device) otherwise.
    pub fn apply(&self, x: &Tensor, cos: &Tensor, sin: &Tensor, exact: bool) -> Result<Tensor> {
        if exact {
            return rope(x, cos, sin, self.style == RopeStyle::Interleaved);
        }
        // Each token its own batch entry of one time step: candle's rope takes per-batch
        // tables `[b, t, n_rot/2]`, which the ragged batch's positions need.
        let (n, h, hd) = x.dims3()?;
        let x = x.contiguous()?.reshape((n, h, 1, hd))?;
        let y = match self.style {
            RopeStyle::Interleaved => candle_nn::rotary_emb::rope_i(&x, cos, sin)?,
            RopeStyle::Neox => candle_nn::rotary_emb::rope(&x, cos, sin)?,
        };
        Ok(y.reshape((n, h, hd))?)
    }
}

/// Reads RoPE settings as llama.cpp does: `rope.freq_base` (default 10000), linear
/// `rope.scaling.factor`, optional `rope_freqs.weight`.
pub fn load_rope(hp: &Hparams, style: RopeStyle, n_rot: usize) -> Result<Rope> {
    let base = hp.opt_f32("rope.freq_base")?.unwrap_or(10000.0);
    let scaling = hp.opt_str("rope.scaling.type")?.unwrap_or("linear");
    let factor = hp.opt_f32("rope.scaling.factor")?.unwrap_or(0.0);
    let freq_scale = if scaling == "linear" && factor > 0.0 { 1.0 / factor } else { 1.0 };
    let freq_factors = if hp.gguf.has("rope_freqs.weight") {
        hp.gguf.expect_dims("rope_freqs.weight", &[n_rot / 2])?;
        let t = hp.gguf.f32_tensor("rope_freqs.weight", &Device::Cpu)?;
        Some(t.to_dtype(DType::F32)?.to_vec1::<f32>()?)
    } else {
        None
    };
    if n_rot == 0 || !n_rot.is_multiple_of(2) {
        return Err(WickError::load(format!("rope dimension {n_rot} must be even and positive")));
    }
    Ok(Rope { style, n_rot, base, freq_scale, freq_factors })
}
