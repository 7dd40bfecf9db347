//! LFM2's gated short convolution (llama.cpp `build_shortconv_block`):
//! `[B; C; X] = W_in u`, `v = B ⊙ X`, causal depthwise conv of width L over v,
//! `out = W_out (C ⊙ conv(v))`. The state is the last L-1 conv inputs, kept in f32.

use candle_core::{DType, Device, Tensor};

use super::attention::BatchPlan;
use super::cpu_ops;
use super::layers::Linear;
use crate::cache::{BlockId, ConvState, KvPool, BLOCK_SIZE};
use crate::error::{Result, WickError};
use crate::gguf::GgufFile;

pub struct ShortConv {
    in_proj: Linear,
    out_proj: Linear,
    /// Kernel column k as a `[d]` vector; tap L-1 multiplies the current token.
    taps: Vec<Tensor>,
    /// The kernel `[d, L]` row-major on the host, for the ggml-exact CPU path.
    kernel: Vec<f32>,
    pub l_cache: usize,
    pub d: usize,
}

impl ShortConv {
    pub fn load(g: &GgufFile, prefix: &str, d: usize, l_cache: usize, dev: &Device) -> Result<Self> {
        if l_cache < 2 {
            return Err(WickError::load(format!("shortconv.l_cache = {l_cache}, expected at least 2")));
        }
        let name = format!("{prefix}.shortconv.conv.weight");
        g.expect_dims(&name, &[l_cache, d])?;
        // ggml {L, d} is candle [d, L]: row c holds channel c's L taps.
        let w = g.f32_tensor(&name, dev)?.to_dtype(DType::F32)?;
        let taps = (0..l_cache)
            .map(|k| Ok(w.narrow(1, k, 1)?.squeeze(1)?.contiguous()?))
            .collect::<Result<Vec<_>>>()?;
        let kernel = w.flatten_all()?.to_vec1::<f32>()?;
        Ok(Self {
            in_proj: Linear::load(g, &format!("{prefix}.shortconv.in_proj"), d, 3 * d, dev)?,
            out_proj: Linear::load(g, &format!("{prefix}.shortconv.out_proj"), d, d, dev)?,
            taps,
            kernel,
            l_cache,
            d,
        })
    }

    /// `u`: normed input `[n_tokens, d]`; `states[i]` (with its block table) belongs to
    /// `plan.spans[i]`. The state at every block boundary crossed is saved in `kv` under
    /// `layer`, so a later sequence reusing those blocks resumes exactly here.
    pub fn forward(
        &self,
        u: &Tensor,
        plan: &BatchPlan,
        layer: usize,
        kv: &mut KvPool,
        states: &mut [(&mut ConvState, &[BlockId])],
    ) -> Result<Tensor> {
        let d = self.d;
        let bcx = self.in_proj.forward(u, &plan.rows)?;
        let b = bcx.narrow(1, 0, d)?;
        let c = bcx.narrow(1, d, d)?;
        let x = bcx.narrow(1, 2 * d, d)?;
        let bx = (b * x)?;
        let mut ys = Vec::with_capacity(plan.spans.len());
        for (span, (state, blocks)) in plan.spans.iter().zip(states.iter_mut()) {
            let v = bx.narrow(0, span.start, span.len)?;
            // Previous L-1 inputs then the new ones: output t reads rows t..t+L.
            let full = Tensor::cat(&[&state.get(u.device())?, &v], 0)?;
            let y = if u.device().is_cpu() {
                let host = full.flatten_all()?.to_vec1::<f32>()?;
                let y = cpu_ops::short_conv(&host, &self.kernel, span.len, d, self.l_cache);
                Tensor::from_vec(y, (span.len, d), u.device())?
            } else {
                // Summed tap by tap in f32, the order of ggml's ssm_conv kernel.
                let mut y = full.narrow(0, 0, span.len)?.broadcast_mul(&self.taps[0])?;
                for (k, tap) in self.taps.iter().enumerate().skip(1) {
                    y = (y + full.narrow(0, k, span.len)?.broadcast_mul(tap)?)?;
                }
                y
            };
            // After position p the state is rows p-pos0 .. p-pos0+L-1 of `full`.
            let first = (span.pos0 / BLOCK_SIZE + 1) * BLOCK_SIZE;
            for p in (first..=span.pos0 + span.len).step_by(BLOCK_SIZE) {
                let s = full.narrow(0, p - span.pos0, self.l_cache - 1)?.flatten_all()?.to_vec1::<f32>()?;
                kv.save_conv(layer, blocks[p / BLOCK_SIZE - 1], &s)?;
            }
            state.set(full.narrow(0, span.len, self.l_cache - 1)?.contiguous()?)?;
            ys.push(y);
        }
        let y = Tensor::cat(&ys, 0)?;
        self.out_proj.forward(&(c * y)?, &plan.rows)
    }
}
