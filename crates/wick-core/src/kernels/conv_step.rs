//! One decode step of LFM2's gated short convolution for a batch of sequences on the device
//! path (`models::shortconv`): `v = B ⊙ X`, the window of each state and its new input, the
//! taps summed over it, `C ⊙ conv`, and the next states. `fused` does it in one op (the CUDA
//! kernel `cuda/conv_step.cu`; the same loops on candle's CPU device, so the check device runs
//! the GPU's graph) where `composed` takes about eight candle ops, which the other devices
//! (Metal) run. Both round each product and then each sum, tap 0 first: they agree to the bit
//! (`tests/device_kernels.rs` checks it on the device it is given).

use candle_core::{CpuStorage, CustomOp3, Layout, Shape, Tensor};

use crate::error::{Result, WickError};
use crate::kernels::cpu::elementwise::f32_operand;

/// The step's outputs `C ⊙ conv` `[B, d]` and next states `[B, L-1, d]` (a view).
pub struct Step {
    pub out: Tensor,
    pub next: Tensor,
}

/// Whether `fused` runs on `device` in this build.
pub fn available(device: &candle_core::Device) -> bool {
    device.is_cpu() || (cfg!(feature = "cuda") && device.is_cuda())
}

/// The shapes of a step: `bcx` `[B, 3d]`, `prev` `[B, L-1, d]`, `taps` `[L, d]` → (B, d, L).
fn dims(bcx: &Tensor, prev: &Tensor, taps: &Tensor) -> Result<(usize, usize, usize)> {
    let (batch, width) = bcx.dims2()?;
    let (l, d) = taps.dims2()?;
    if width != 3 * d || l < 2 || prev.dims() != [batch, l - 1, d] {
        return Err(WickError::Internal(format!(
            "conv step: rows {:?}, states {:?}, taps {:?}",
            bcx.dims(),
            prev.dims(),
            taps.dims()
        )));
    }
    Ok((batch, d, l))
}

/// The step in one op (`available` says where).
pub fn fused(bcx: &Tensor, prev: &Tensor, taps: &Tensor) -> Result<Step> {
    let (_, _, l) = dims(bcx, prev, taps)?;
    let f32 = candle_core::DType::F32;
    let (bcx, prev, taps) = (
        bcx.to_dtype(f32)?.contiguous()?,
        prev.to_dtype(f32)?.contiguous()?,
        taps.to_dtype(f32)?.contiguous()?,
    );
    let all = bcx.apply_op3_no_bwd(&prev, &taps, &ConvStep)?; // [L, B, d]
    Ok(Step { out: all.get(0)?, next: all.narrow(0, 1, l - 1)?.transpose(0, 1)? })
}

/// The step on candle ops, for any device.
pub fn composed(bcx: &Tensor, prev: &Tensor, taps: &Tensor) -> Result<Step> {
    let (_, d, l) = dims(bcx, prev, taps)?;
    let (b, c, x) = (bcx.narrow(1, 0, d)?, bcx.narrow(1, d, d)?, bcx.narrow(1, 2 * d, d)?);
    let full = Tensor::cat(&[prev, &(b * x)?.unsqueeze(1)?], 1)?; // [B, L, d]
    let conv = taps_over(taps, |k| full.narrow(1, k, 1)?.squeeze(1))?;
    Ok(Step { out: (c * conv)?, next: full.narrow(1, 1, l - 1)? })
}

/// `Σ_k rows(k) ⊙ taps[k]`, tap 0 first, each product rounded before its sum.
pub fn taps_over(taps: &Tensor, rows: impl Fn(usize) -> candle_core::Result<Tensor>) -> Result<Tensor> {
    let mut conv = rows(0)?.broadcast_mul(&taps.get(0)?)?;
    for k in 1..taps.dim(0)? {
        conv = (conv + rows(k)?.broadcast_mul(&taps.get(k)?)?)?;
    }
    Ok(conv)
}

struct ConvStep;

impl CustomOp3 for ConvStep {
    fn name(&self) -> &'static str {
        "wick-conv-step"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (batch, _) = l1.shape().dims2()?;
        let (l, d) = l3.shape().dims2()?;
        let op = "conv step";
        let (bcx, prev, taps) =
            (f32_operand(s1, l1, op)?, f32_operand(s2, l2, op)?, f32_operand(s3, l3, op)?);
        let mut out = vec![0f32; l * batch * d];
        // The kernel's loop, a channel at a time.
        for b in 0..batch {
            let (row, state) =
                (&bcx[b * 3 * d..(b + 1) * 3 * d], &prev[b * (l - 1) * d..(b + 1) * (l - 1) * d]);
            for i in 0..d {
                let v = row[i] * row[2 * d + i];
                let mut conv = state[i] * taps[i];
                for k in 1..l {
                    let w = if k < l - 1 { state[k * d + i] } else { v };
                    conv += w * taps[k * d + i];
                    out[(k * batch + b) * d + i] = w;
                }
                out[b * d + i] = row[d + i] * conv;
            }
        }
        Ok((CpuStorage::F32(out), Shape::from((l, batch, d))))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s1: &candle_core::CudaStorage,
        l1: &Layout,
        s2: &candle_core::CudaStorage,
        l2: &Layout,
        s3: &candle_core::CudaStorage,
        l3: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        super::cuda::conv_step((s1, l1), (s2, l2), (s3, l3))
    }
}
