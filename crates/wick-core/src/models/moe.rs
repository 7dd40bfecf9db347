//! Routed mixture-of-experts FFN (LFM2-MoE; llama.cpp `build_moe_ffn` with sigmoid gating).
//! candle's MoE GGUF ops are CUDA-only, so on the CPU each token is routed, tokens are grouped
//! by expert, each expert's quantized matmuls run on its group, and the results are scattered
//! back weighted.
//!
//! Rounding follows ggml so greedy outputs match llama.cpp: router logits from an exact f32
//! dot (`ggml_vec_dot_f32`, or tinyBLAS for several tokens), sigmoid with libm `expf`, the
//! selection bias added to a copy only, weights renormalised by an f64 row sum clamped at
//! 2⁻¹⁴, each expert row through the single-row kernels (ggml's `mul_mat_id` multiplies row
//! by row), products `e·w` rounded, then summed in slot order.

use std::borrow::Cow;
use std::sync::Arc;

use candle_core::quantized::{QStorage, QTensor};
use candle_core::{DType, Device, Tensor};

use super::layers::{Linear, RowPos};
use crate::error::{Result, WickError};
use crate::gguf::GgufFile;
use crate::kernels::cpu::elementwise::swiglu;
use crate::kernels::cpu::feats::fast;
use crate::kernels::cpu::float_dots::{dot_single, dot_tiled};

/// llama.cpp's clamp on the sum of the selected weights (smallest normal f16).
const MIN_WEIGHT_SUM: f32 = 6.103_515_6e-5;

struct Expert {
    gate: Linear,
    up: Linear,
    down: Linear,
}

pub struct Moe {
    /// Router `[n_expert, d]` row-major f32.
    router: Vec<f32>,
    /// Selection bias (`exp_probs_b.bias`), zeros when absent.
    bias: Vec<f32>,
    experts: Vec<Expert>,
    n_used: usize,
    d: usize,
}

/// Expert `e` of a stacked `{n_in, n_out, n_expert}` tensor as its own 2-D weight.
fn expert_slice(g: &GgufFile, name: &str, e: usize, dev: &Device) -> Result<Linear> {
    let info = g.info(name).ok_or_else(|| WickError::load(format!("missing tensor `{name}`")))?;
    let (n_in, n_out) = (info.dims[0], info.dims[1]);
    let bytes = g.bytes(name)?;
    let per = bytes.len() / info.dims[2];
    let data = &bytes[e * per..(e + 1) * per];
    let storage = QStorage::from_data(Cow::Borrowed(data), dev, info.dtype)?;
    Linear::from_qtensor(Arc::new(QTensor::new(storage, (n_out, n_in))?))
}

impl Moe {
    /// Layer `prefix` (`blk.N`) with `n_expert` experts of width `ff`, `n_used` per token.
    pub fn load(
        g: &GgufFile,
        prefix: &str,
        d: usize,
        n_expert: usize,
        n_used: usize,
        dev: &Device,
    ) -> Result<Self> {
        if n_used == 0 || n_used > n_expert {
            return Err(WickError::load(format!("{prefix}: {n_used} of {n_expert} experts per token")));
        }
        let router_name = format!("{prefix}.ffn_gate_inp.weight");
        g.expect_dims(&router_name, &[d, n_expert])?;
        let router =
            g.f32_tensor(&router_name, &Device::Cpu)?.to_dtype(DType::F32)?.flatten_all()?.to_vec1()?;
        let bias_name = format!("{prefix}.exp_probs_b.bias");
        let bias = if g.has(&bias_name) {
            g.expect_dims(&bias_name, &[n_expert])?;
            g.f32_tensor(&bias_name, &Device::Cpu)?.to_dtype(DType::F32)?.to_vec1()?
        } else {
            vec![0.0; n_expert]
        };
        let gate_name = format!("{prefix}.ffn_gate_exps.weight");
        let ff = g
            .info(&gate_name)
            .and_then(|t| t.dims.get(1).copied())
            .ok_or_else(|| WickError::load(format!("missing tensor `{gate_name}`")))?;
        g.expect_dims(&gate_name, &[d, ff, n_expert])?;
        g.expect_dims(&format!("{prefix}.ffn_up_exps.weight"), &[d, ff, n_expert])?;
        g.expect_dims(&format!("{prefix}.ffn_down_exps.weight"), &[ff, d, n_expert])?;
        let experts = (0..n_expert)
            .map(|e| {
                Ok(Expert {
                    gate: expert_slice(g, &gate_name, e, dev)?,
                    up: expert_slice(g, &format!("{prefix}.ffn_up_exps.weight"), e, dev)?,
                    down: expert_slice(g, &format!("{prefix}.ffn_down_exps.weight"), e, dev)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self { router, bias, experts, n_used, d })
    }

    /// Selected experts (best first) and their renormalised weights for one token.
    fn route(&self, x: &[f32], several: bool) -> (Vec<usize>, Vec<f32>) {
        let d = self.d;
        let probs: Vec<f32> = fast(
            #[inline(always)]
            || {
                self.router
                    .chunks_exact(d)
                    .map(|w| {
                        let (a, b) = (|i: usize| w[i], |i: usize| x[i]);
                        let l = if several && d.is_multiple_of(16) {
                            dot_tiled(d, a, b)
                        } else {
                            dot_single(d, a, b)
                        };
                        1.0f32 / (1.0f32 + (-l).exp())
                    })
                    .collect()
            },
        );
        let mut order: Vec<usize> = (0..probs.len()).collect();
        let sel = |e: usize| probs[e] + self.bias[e];
        order.sort_by(|&a, &b| sel(b).total_cmp(&sel(a)));
        order.truncate(self.n_used);
        let w: Vec<f32> = order.iter().map(|&e| probs[e]).collect();
        let sum = (w.iter().map(|&v| v as f64).sum::<f64>() as f32).max(MIN_WEIGHT_SUM);
        (order, w.into_iter().map(|v| v / sum).collect())
    }

    /// `x`: `[n, d]` normed input → `[n, d]`; `rows` as for `Linear::forward` (only whether a
    /// row's sequence brings several tokens matters here: it picks the router's kernel).
    pub fn forward(&self, x: &Tensor, rows: &[RowPos]) -> Result<Tensor> {
        let (n, d) = x.dims2()?;
        let xs = x.contiguous()?.flatten_all()?.to_vec1::<f32>()?;
        let routes: Vec<_> = (0..n)
            .map(|t| self.route(&xs[t * d..(t + 1) * d], rows.get(t).is_some_and(|r| r.seq_len > 1)))
            .collect();
        // Per token and slot, the expert output row; filled expert by expert.
        let mut outs: Vec<Vec<Option<Vec<f32>>>> = (0..n).map(|_| vec![None; self.n_used]).collect();
        for (e, ex) in self.experts.iter().enumerate() {
            let members: Vec<(usize, usize)> = routes
                .iter()
                .enumerate()
                .filter_map(|(t, (sel, _))| sel.iter().position(|&s| s == e).map(|slot| (t, slot)))
                .collect();
            if members.is_empty() {
                continue;
            }
            let idx = Tensor::from_vec(
                members.iter().map(|&(t, _)| t as u32).collect::<Vec<_>>(),
                members.len(),
                x.device(),
            )?;
            let xe = x.index_select(&idx, 0)?;
            let single = vec![RowPos::SINGLE; members.len()];
            let h = swiglu(&ex.gate.forward(&xe, &single)?, &ex.up.forward(&xe, &single)?)?;
            let y = ex.down.forward(&h, &single)?.to_vec2::<f32>()?;
            for ((t, slot), row) in members.into_iter().zip(y) {
                outs[t][slot] = Some(row);
            }
        }
        let mut out = vec![0f32; n * d];
        for (t, ((_, w), slots)) in routes.iter().zip(outs).enumerate() {
            let o = &mut out[t * d..(t + 1) * d];
            for (slot, (row, &wj)) in slots.into_iter().zip(w).enumerate() {
                let row = row.ok_or_else(|| WickError::Internal("expert output missing".into()))?;
                for (acc, v) in o.iter_mut().zip(row) {
                    *acc = if slot == 0 { v * wj } else { *acc + v * wj };
                }
            }
        }
        Ok(Tensor::from_vec(out, (n, d), x.device())?)
    }
}
