//! LFM2's gated short convolution (llama.cpp `build_shortconv_block`):
//! `[B; C; X] = W_in u`, `v = B ⊙ X`, causal depthwise conv of width L over v,
//! `out = W_out (C ⊙ conv(v))`. The state is the last L-1 conv inputs, kept in f32.

use candle_core::{DType, Device, Tensor};

use super::attention::BatchPlan;
use super::layers::Linear;
use crate::cache::{BlockId, ConvState, KvPool, BLOCK_SIZE};
use crate::error::{Result, WickError};
use crate::gguf::GgufFile;
use crate::kernels::conv_step;
use crate::kernels::cpu::elementwise::{short_conv, with_host_f32};
use crate::runtime::device::Placement;
use crate::runtime::trace;

pub struct ShortConv {
    in_proj: Linear,
    out_proj: Linear,
    /// The kernel `[d, L]` row-major on the host; tap L-1 multiplies the current token.
    kernel: Vec<f32>,
    /// The device path's copy `[L, d]` on the model's device: row k is tap k's weights.
    taps: Option<Tensor>,
    pub l_cache: usize,
    pub d: usize,
    /// A bidirectional model's window, centred on each token (llama.cpp pads `(L-1)/2` of the
    /// state before the step and as many zeros after), instead of ending at it.
    pub centred: bool,
}

impl ShortConv {
    pub fn load(g: &GgufFile, prefix: &str, d: usize, l_cache: usize, dev: &Placement) -> Result<Self> {
        if l_cache < 2 {
            return Err(WickError::load(format!("shortconv.l_cache = {l_cache}, expected at least 2")));
        }
        let name = format!("{prefix}.shortconv.conv.weight");
        g.expect_dims(&name, &[l_cache, d])?;
        // ggml {L, d} is candle [d, L]: row c holds channel c's L taps.
        let w = g.f32_tensor(&name, dev)?.to_dtype(DType::F32)?;
        let kernel = w.flatten_all()?.to_vec1::<f32>()?;
        let taps = match dev.exact() {
            true => None,
            false => Some(w.t()?.contiguous()?),
        };
        Ok(Self {
            taps,
            in_proj: Linear::load(g, &format!("{prefix}.shortconv.in_proj"), d, 3 * d, dev)?,
            out_proj: Linear::load(g, &format!("{prefix}.shortconv.out_proj"), d, d, dev)?,
            kernel,
            l_cache,
            d,
            centred: false,
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
        kv: &KvPool,
        states: &mut [(&mut ConvState, &[BlockId])],
    ) -> Result<Tensor> {
        let d = self.d;
        let lora = plan.deltas();
        let bcx = self.in_proj.forward_lora(u, &plan.rows, lora)?;
        if !plan.exact {
            let y = trace::span("short conv, between its projections", bcx.device(), || {
                self.gated_conv_on_device(&bcx, plan, layer, kv, states)
            })?;
            return self.out_proj.forward_lora(&y, &plan.rows, lora);
        }
        let y = with_host_f32(&bcx, |bcx| self.gated_conv_host(bcx, plan, layer, kv, states, u.device()))??;
        self.out_proj.forward_lora(&Tensor::from_vec(y, (plan.n_tokens(), d), u.device())?, &plan.rows, lora)
    }

    /// The step between the projections in one pass over host memory (no tensor op per
    /// sequence): `C ⊙ conv(B ⊙ X)` for every row of `bcx` (`[n, 3d]`), summed tap by tap in
    /// f32 in the order of ggml's `ssm_conv`, so the same bits as ggml. Updates the states and
    /// saves the block-boundary snapshots as `forward` does.
    fn gated_conv_host(
        &self,
        bcx: &[f32],
        plan: &BatchPlan,
        layer: usize,
        kv: &KvPool,
        states: &mut [(&mut ConvState, &[BlockId])],
        dev: &Device,
    ) -> Result<Vec<f32>> {
        let (d, l) = (self.d, self.l_cache);
        let mut y = vec![0f32; plan.n_tokens() * d];
        for (span, (state, blocks)) in plan.spans.iter().zip(states.iter_mut()) {
            // Previous L-1 inputs, then B ⊙ X of the new rows: output t reads rows t..t+L.
            let mut full = with_host_f32(&state.get(dev)?, |s| s.to_vec())?;
            full.reserve(span.len * d);
            for row in bcx[span.start * 3 * d..(span.start + span.len) * 3 * d].chunks_exact(3 * d) {
                full.extend(row[..d].iter().zip(&row[2 * d..]).map(|(b, x)| b * x));
            }
            let conv = match self.centred {
                // The state's last `pad` rows, the step, `pad` zero rows: still `len + L - 1`.
                true => {
                    let pad = (l - 1) / 2;
                    let mut c = full[(l - 1 - pad) * d..].to_vec();
                    c.resize((span.len + l - 1) * d, 0.0);
                    short_conv(&c, &self.kernel, span.len, d, l)
                }
                false => short_conv(&full, &self.kernel, span.len, d, l),
            };
            for (t, yt) in y[span.start * d..(span.start + span.len) * d].chunks_exact_mut(d).enumerate() {
                let c = &bcx[(span.start + t) * 3 * d + d..][..d];
                for ((o, &ci), &v) in yt.iter_mut().zip(c).zip(&conv[t * d..(t + 1) * d]) {
                    *o = ci * v;
                }
            }
            // After position p the state is rows p-pos0 .. p-pos0+L-1 of `full`.
            let first = (span.pos0 / BLOCK_SIZE + 1) * BLOCK_SIZE;
            for p in (first..=span.pos0 + span.len).step_by(BLOCK_SIZE) {
                let at = (p - span.pos0) * d;
                kv.save_conv(layer, blocks[p / BLOCK_SIZE - 1], &full[at..at + (l - 1) * d])?;
            }
            state.set(Tensor::from_vec(full[span.len * d..].to_vec(), (l - 1, d), dev)?)?;
            if span.verify {
                state.keep_steps(span.pos0, full);
            }
        }
        Ok(y)
    }

    /// `gated_conv_host` on candle ops, on the model's device: the taps summed in the same
    /// order (tap 0 first), so the same bits where the products round the same. The step's
    /// one-token sequences run as one batch (`decodes_on_device`), the others one by one.
    /// Block-boundary snapshots are copied to the host pool (a few rows, only when a boundary
    /// is crossed).
    fn gated_conv_on_device(
        &self,
        bcx: &Tensor,
        plan: &BatchPlan,
        layer: usize,
        kv: &KvPool,
        states: &mut [(&mut ConvState, &[BlockId])],
    ) -> Result<Tensor> {
        let (d, l) = (self.d, self.l_cache);
        let (b, c, x) = (bcx.narrow(1, 0, d)?, bcx.narrow(1, d, d)?, bcx.narrow(1, 2 * d, d)?);
        let decoded = match plan.decodes.is_empty() || self.centred {
            true => None,
            false => Some(self.decodes_on_device(bcx, plan, layer, kv, states)?),
        };
        // B ⊙ X of every row, made once if a span other than the decodes needs it.
        let mut all_bx = None;
        plan.merge_decodes(decoded, |i| {
            let bx: &Tensor = match &mut all_bx {
                Some(t) => t,
                none => none.insert((&b * &x)?),
            };
            let (span, (state, blocks)) = (plan.spans[i], &mut states[i]);
            let full = Tensor::cat(&[state.get(bcx.device())?, bx.narrow(0, span.start, span.len)?], 0)?;
            let window = match self.centred {
                true => {
                    let pad = (l - 1) / 2;
                    let zeros = Tensor::zeros((pad, d), full.dtype(), full.device())?;
                    Tensor::cat(&[full.narrow(0, l - 1 - pad, pad + span.len)?, zeros], 0)?
                }
                false => full.clone(),
            };
            let conv = conv_step::taps_over(self.device_taps()?, |k| window.narrow(0, k, span.len))?;
            let first = (span.pos0 / BLOCK_SIZE + 1) * BLOCK_SIZE;
            for p in (first..=span.pos0 + span.len).step_by(BLOCK_SIZE) {
                let snap = full.narrow(0, p - span.pos0, l - 1)?.flatten_all()?.to_vec1::<f32>()?;
                kv.save_conv(layer, blocks[p / BLOCK_SIZE - 1], &snap)?;
            }
            state.set(full.narrow(0, span.len, l - 1)?.contiguous()?)?;
            if span.verify {
                state.keep_steps(span.pos0, full.flatten_all()?.to_vec1::<f32>()?);
            }
            Ok((c.narrow(0, span.start, span.len)? * conv)?)
        })
    }

    fn device_taps(&self) -> Result<&Tensor> {
        self.taps
            .as_ref()
            .ok_or_else(|| WickError::Internal("short conv: no device taps on the exact path".into()))
    }

    /// The conv step of the step's one-token sequences (`plan.decodes`) at once: their states
    /// stacked `[B, L-1, d]` beside their rows of `bcx`, one op where the device has it
    /// (`kernels::conv_step`), each new state a row of one tensor. Returns `[B, d]` in
    /// `plan.decodes` order.
    fn decodes_on_device(
        &self,
        bcx: &Tensor,
        plan: &BatchPlan,
        layer: usize,
        kv: &KvPool,
        states: &mut [(&mut ConvState, &[BlockId])],
    ) -> Result<Tensor> {
        let prev = plan.decodes.iter().map(|&i| states[i].0.get(bcx.device())).collect::<Result<Vec<_>>>()?;
        let (rows, prev, taps) = (plan.decode_rows_of(bcx)?, Tensor::stack(&prev, 0)?, self.device_taps()?);
        let step = match conv_step::available(bcx.device()) {
            true => conv_step::fused(&rows, &prev, taps)?,
            false => conv_step::composed(&rows, &prev, taps)?,
        };
        let next = step.next;
        for (j, &i) in plan.decodes.iter().enumerate() {
            let (state, blocks) = &mut states[i];
            let row = next.get(j)?;
            // A block boundary right after this token: its state is the block's snapshot.
            let end = plan.spans[i].pos0 + 1;
            if end.is_multiple_of(BLOCK_SIZE) {
                kv.save_conv(layer, blocks[end / BLOCK_SIZE - 1], &row.flatten_all()?.to_vec1::<f32>()?)?;
            }
            state.set(row)?;
        }
        Ok(step.out)
    }
}
