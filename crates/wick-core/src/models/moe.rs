//! Routed mixture-of-experts FFN (LFM2-MoE; llama.cpp `build_moe_ffn` with sigmoid gating).
//! candle's MoE GGUF ops are CUDA-only, so on the CPU each token is routed, tokens are grouped
//! by expert, each expert's quantized matmuls run on its group, and the results are scattered
//! back weighted.
//!
//! On the CPU, when every expert's weights have panels (`PackedWeight`), each expert's gate
//! and up are one concatenated weight, and a step runs the gate/up of all the experts it
//! selected in one pool pass, then all their downs in another (`PackedWeight::matmul_many`):
//! each selected expert's weights stream once per step, with two fork-joins per layer and no
//! candle tensors on the way. Other weights go expert by expert through `Linear`.
//!
//! Rounding follows ggml so greedy outputs match llama.cpp: router logits from an exact f32
//! dot (`ggml_vec_dot_f32`, or tinyBLAS for several tokens), sigmoid with libm `expf`, the
//! selection bias added to a copy only, weights renormalised by an f64 row sum clamped at
//! 2⁻¹⁴, each expert row through the single-row kernels (ggml's `mul_mat_id` multiplies row
//! by row), products `e·w` rounded, then summed in slot order.

use std::borrow::Cow;
use std::sync::{Arc, OnceLock};

use candle_core::quantized::{GgmlDType, QStorage, QTensor};
use candle_core::{DType, Device, Tensor};

use super::layers::{Linear, RowPos};
use super::packs::cached_pack;
use crate::error::{Result, WickError};
use crate::gguf::GgufFile;
use crate::kernels::cpu::elementwise::swiglu;
use crate::kernels::cpu::expf;
use crate::kernels::cpu::feats::with_avx2_codegen;
use crate::kernels::cpu::float_dots::{dot_single_sl, dot_tiled_arch_sl};
use crate::kernels::{row_ops, PackedWeight};
use crate::runtime::device::Placement;
use crate::runtime::pool;

/// llama.cpp's clamp on the sum of the selected weights (smallest normal f16).
const MIN_WEIGHT_SUM: f32 = 6.103_515_6e-5;

/// Rows per expert up to which a step's experts run one per task (`Moe::experts_one_pass`).
const FUSED_ROWS: usize = 4;

struct Expert {
    gate: Linear,
    up: Linear,
    down: Linear,
}

/// An expert's weights as panels: gate and up concatenated (`[2·ff, d]`), and down.
struct PackedExpert {
    gate_up: PackedWeight,
    down: PackedWeight,
}

enum Experts {
    Packed(Vec<PackedExpert>),
    Each(Vec<Expert>),
}

pub struct Moe {
    /// Router `[n_expert, d]` row-major f32.
    router: Vec<f32>,
    /// Selection bias (`exp_probs_b.bias`), zeros when absent.
    bias: Vec<f32>,
    experts: Experts,
    n_used: usize,
    d: usize,
    /// The exact CPU path (else the device path: experts through candle's ops, the router
    /// and the weighted sum on the host).
    exact: bool,
}

/// Expert `e` of a stacked `{n_in, n_out, n_expert}` tensor as its own 2-D weight.
fn expert_tensor(g: &GgufFile, name: &str, e: usize, dev: &Device) -> Result<Arc<QTensor>> {
    let info = g.info(name).ok_or_else(|| WickError::load(format!("missing tensor `{name}`")))?;
    let (n_in, n_out) = (info.dims[0], info.dims[1]);
    let bytes = g.bytes(name)?;
    let per = bytes.len() / info.dims[2];
    let data = &bytes[e * per..(e + 1) * per];
    let storage = QStorage::from_data(Cow::Borrowed(data), dev, info.dtype)?;
    Ok(Arc::new(QTensor::new(storage, (n_out, n_in))?))
}

/// The experts as panels, when every one of their weights has a panel kernel and gate and up
/// concatenate; `None` otherwise (nothing is kept from a failed try). Packed straight from the
/// mapped file, each expert's slice of the stacked tensors.
fn packed_experts(
    g: &GgufFile,
    prefix: &str,
    n_expert: usize,
    dev: &Placement,
) -> Result<Option<Vec<PackedExpert>>> {
    if !dev.exact() {
        return Ok(None);
    }
    let stacked = |w: &str| -> Result<(&[u8], GgmlDType, usize, usize)> {
        let name = format!("{prefix}.ffn_{w}_exps.weight");
        let info = g.info(&name).ok_or_else(|| WickError::load(format!("missing tensor `{name}`")))?;
        Ok((g.bytes(&name)?, info.dtype, info.dims[1], info.dims[0]))
    };
    let (gate, up, down) = (stacked("gate")?, stacked("up")?, stacked("down")?);
    /// Expert `e`'s rows of a stacked tensor of `n_expert`, with their output width.
    fn rows(t: (&[u8], GgmlDType, usize, usize), e: usize, n_expert: usize) -> (&[u8], usize) {
        let per = t.0.len() / n_expert;
        (&t.0[e * per..(e + 1) * per], t.2)
    }
    let mut out = Vec::with_capacity(n_expert);
    for e in 0..n_expert {
        // Saved in the pack cache as `{prefix}.ffn_gate_exps.weight#e+…up…#e` and `…down…#e`.
        let (gate_name, down_name) =
            (format!("{prefix}.ffn_gate_exps.weight#{e}"), format!("{prefix}.ffn_down_exps.weight#{e}"));
        let fused = format!("{gate_name}+{prefix}.ffn_up_exps.weight#{e}");
        let gate_up = cached_pack(dev, &fused, || match (gate.1, gate.3) == (up.1, up.3) {
            true => PackedWeight::pack_raw_parts(
                &[rows(gate, e, n_expert), rows(up, e, n_expert)],
                gate.1,
                gate.3,
            ),
            false => Ok(None),
        })?;
        let Some(gate_up) = gate_up else { return Ok(None) };
        let down = cached_pack(dev, &down_name, || {
            PackedWeight::pack_raw_parts(&[rows(down, e, n_expert)], down.1, down.3)
        })?;
        let Some(down) = down else { return Ok(None) };
        out.push(PackedExpert { gate_up, down });
    }
    Ok(Some(out))
}

impl Moe {
    /// Layer `prefix` (`blk.N`) with `n_expert` experts of width `ff`, `n_used` per token.
    pub fn load(
        g: &GgufFile,
        prefix: &str,
        d: usize,
        n_expert: usize,
        n_used: usize,
        dev: &Placement,
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
        let experts = match packed_experts(g, prefix, n_expert, dev)? {
            Some(p) => Experts::Packed(p),
            None => Experts::Each(
                (0..n_expert)
                    .map(|e| {
                        let l = |w: &str| {
                            Linear::from_qtensor(
                                expert_tensor(g, &format!("{prefix}.ffn_{w}_exps.weight"), e, dev)?,
                                dev,
                            )
                        };
                        Ok(Expert { gate: l("gate")?, up: l("up")?, down: l("down")? })
                    })
                    .collect::<Result<Vec<_>>>()?,
            ),
        };
        Ok(Self { router, bias, experts, n_used, d, exact: dev.exact() })
    }

    /// Selected experts (best first) and their renormalised weights for one token.
    fn route(&self, x: &[f32], several: bool) -> (Vec<usize>, Vec<f32>) {
        let d = self.d;
        // A plain loop, not an iterator chain: the dots must be inlined into the AVX2/FMA copy,
        // or each `mul_add` is a call to libm's software `fmaf`, which dominates the router.
        // On slices: a closure per index was a scalar load per lane, the router ~25 µs a layer.
        let mut probs = vec![0f32; self.n_expert()];
        with_avx2_codegen(
            #[inline(always)]
            || {
                for (p, w) in probs.iter_mut().zip(self.router.chunks_exact(d)) {
                    let l = if several && d.is_multiple_of(16) {
                        dot_tiled_arch_sl(w, x)
                    } else {
                        dot_single_sl(w, x)
                    };
                    *p = 1.0f32 / (1.0f32 + (-l).exp());
                }
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

    fn n_expert(&self) -> usize {
        self.bias.len()
    }

    /// Decode-sized steps: one pool pass, a task per expert running its gate/up, SwiGLU and
    /// down alone (a task's own passes run inline): one fork-join per layer instead of two, and
    /// no serial SwiGLU between them. The same tiles on the same rows, so the same bits.
    fn experts_one_pass<'a>(
        ex: &[PackedExpert],
        active: &[usize],
        inputs: &[Vec<f32>],
        rows: impl Fn(usize) -> &'a [RowPos] + Sync,
    ) -> Result<Vec<Vec<f32>>> {
        let one = |k: usize| -> Result<Vec<f32>> {
            let (e, rows) = (active[k], rows(active[k]));
            let h = Self::swiglu_of(&ex[e], &ex[e].gate_up.matmul_parts(&inputs[k], rows)?)?;
            ex[e].down.matmul(&h, rows)
        };
        let slots: Vec<OnceLock<Result<Vec<f32>>>> = active.iter().map(|_| OnceLock::new()).collect();
        pool::run(active.len(), &|k| {
            let _ = slots[k].set(one(k));
        });
        slots
            .into_iter()
            .map(|s| {
                s.into_inner()
                    .unwrap_or_else(|| Err(WickError::Internal("moe: an expert did not run".into())))
            })
            .collect()
    }

    /// SwiGLU of an expert's gate and up outputs: rows of the expert width (the down weight's
    /// input width).
    fn swiglu_of(ex: &PackedExpert, gate_up: &[Vec<f32>]) -> Result<Vec<f32>> {
        match gate_up {
            [g, u] => Ok(expf::swiglu(g, u, ex.down.dims().1)),
            _ => Err(WickError::Internal("moe: gate and up expected".into())),
        }
    }

    /// Larger steps: every expert's gate/up in one pass over all their panels, SwiGLU per
    /// expert, every down in a second pass (the panels, not the experts, split over the threads).
    fn experts_two_passes<'a>(
        ex: &[PackedExpert],
        active: &[usize],
        inputs: &[Vec<f32>],
        rows: impl Fn(usize) -> &'a [RowPos],
    ) -> Result<Vec<Vec<f32>>> {
        let calls: Vec<(&PackedWeight, &[f32], &[RowPos])> =
            active.iter().zip(inputs).map(|(&e, x)| (&ex[e].gate_up, x.as_slice(), rows(e))).collect();
        let gate_up = PackedWeight::matmul_many(&calls)?;
        let hs: Vec<Vec<f32>> = gate_up
            .iter()
            .zip(active)
            .map(|(parts, &e)| Self::swiglu_of(&ex[e], parts))
            .collect::<Result<_>>()?;
        let calls: Vec<(&PackedWeight, &[f32], &[RowPos])> =
            active.iter().zip(&hs).map(|(&e, h)| (&ex[e].down, h.as_slice(), rows(e))).collect();
        Ok(PackedWeight::matmul_many(&calls)?.into_iter().map(|mut y| y.pop().unwrap_or_default()).collect())
    }

    /// The selected experts on panels (one pass for a decode-sized step, two otherwise).
    /// `members[e]`: expert e's (token, slot) pairs;
    /// their output rows go to `outs[token][slot]`.
    fn run_packed(
        &self,
        ex: &[PackedExpert],
        xs: &[f32],
        members: &[Vec<(usize, usize)>],
        outs: &mut [Vec<Option<Vec<f32>>>],
    ) -> Result<()> {
        let d = self.d;
        let active: Vec<usize> = (0..ex.len()).filter(|&e| !members[e].is_empty()).collect();
        // ggml's mul_mat_id multiplies expert rows one by one: the single-row kernels.
        let most = active.iter().map(|&e| members[e].len()).max().unwrap_or(0);
        let single = vec![RowPos::SINGLE; most];
        let inputs: Vec<Vec<f32>> = active
            .iter()
            .map(|&e| members[e].iter().flat_map(|&(t, _)| xs[t * d..(t + 1) * d].iter().copied()).collect())
            .collect();
        let downs = if most <= FUSED_ROWS && active.len() >= pool::global().threads() {
            Self::experts_one_pass(ex, &active, &inputs, |e| &single[..members[e].len()])?
        } else {
            Self::experts_two_passes(ex, &active, &inputs, |e| &single[..members[e].len()])?
        };
        for (&e, y) in active.iter().zip(downs) {
            for (i, &(t, slot)) in members[e].iter().enumerate() {
                outs[t][slot] = Some(y[i * d..(i + 1) * d].to_vec());
            }
        }
        Ok(())
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
        // Each selected expert's (token, slot) pairs, in token order.
        let mut members: Vec<Vec<(usize, usize)>> = vec![vec![]; self.n_expert()];
        for (t, (sel, _)) in routes.iter().enumerate() {
            for (slot, &e) in sel.iter().enumerate() {
                members[e].push((t, slot));
            }
        }
        match &self.experts {
            Experts::Packed(ex) => self.run_packed(ex, &xs, &members, &mut outs)?,
            Experts::Each(ex) => {
                for (e, ex) in ex.iter().enumerate() {
                    let members = std::mem::take(&mut members[e]);
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
                    let (g, u) = (ex.gate.forward(&xe, &single)?, ex.up.forward(&xe, &single)?);
                    let h = if self.exact { swiglu(&g, &u)? } else { row_ops::silu_mul(&g, &u)? };
                    let y = ex.down.forward(&h, &single)?.to_vec2::<f32>()?;
                    for ((t, slot), row) in members.into_iter().zip(y) {
                        outs[t][slot] = Some(row);
                    }
                }
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
