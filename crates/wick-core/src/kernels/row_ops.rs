//! The device path's RMSNorm — the residual add before it folded in —, SwiGLU, Gemma's GeGLU and
//! the heads' norm-and-RoPE, each one op in ggml's CPU arithmetic: the norm's sum of squares in f64, ggml's own `expf` in the gate. One C
//! source (`cuda/row_ops.cuh`) gives the CUDA kernels (`cuda/row_ops.cu`, `cuda` feature) and
//! their host twin (`cuda/row_ops_twin.c`, Linux builds: cfg `wick_qmv_twin`), which agree to the
//! bit; the twin runs on candle's CPU device, so the check device runs the GPU's arithmetic.
//!
//! Why: candle-nn's norm and candle's SiLU round otherwise (f32 sums in the block's order, the
//! device's `expf`), and a one-ulp difference before a quantized product moves its q8 rounding
//! (`tests/device_path.rs`). Fewer launches too: the add and the norm are one, SwiGLU reads the
//! halves of the stacked gate|up product in place (one launch where `silu` and `mul` over strided
//! views took two, each with its layout uploaded). Metal keeps candle's ops (`available`).

use candle_core::{CpuStorage, CustomOp2, CustomOp3, Layout, Shape, Tensor};

use crate::error::{Result, WickError};
use crate::kernels::cpu::elementwise::f32_operand;

/// Whether this build runs these ops on `device`.
pub fn available(device: &candle_core::Device) -> bool {
    super::twinned_on(device)
}

/// RMSNorm over the last dim of `x` (f32), times `w` `[n]`.
pub fn rms_norm(x: &Tensor, w: &Tensor, eps: f32) -> Result<Tensor> {
    check_norm(x, None, w)?;
    Ok(x.contiguous()?.apply_op2_no_bwd(&w.contiguous()?, &RmsNorm { eps })?)
}

/// `h = x + add` and RMSNorm of `h` times `w`, in one op: `(h, norm(h))`.
pub fn add_rms_norm(x: &Tensor, add: &Tensor, w: &Tensor, eps: f32) -> Result<(Tensor, Tensor)> {
    check_norm(x, Some(add), w)?;
    let both = x.contiguous()?.apply_op3_no_bwd(&add.contiguous()?, &w.contiguous()?, &AddRmsNorm { eps })?;
    Ok((both.get(0)?, both.get(1)?))
}

fn check_norm(x: &Tensor, add: Option<&Tensor>, w: &Tensor) -> Result<()> {
    let n = w.elem_count();
    let f32 = candle_core::DType::F32;
    let ok = x.dims().last() == Some(&n)
        && w.rank() == 1
        && [x, w].iter().chain(add.as_ref()).all(|t| t.dtype() == f32)
        && add.is_none_or(|a| a.dims() == x.dims());
    if !ok {
        return Err(WickError::Internal(format!(
            "rms_norm: x {:?}, add {:?}, weight {:?} (f32, rows of the weight's width)",
            x.dims(),
            add.map(|a| a.dims()),
            w.dims()
        )));
    }
    Ok(())
}

/// The heads' RoPE, after each head's RMSNorm by `norm` (`(weight [hd], ε)`, the Q/K norms) when
/// given: `x` `[n, heads, hd]` f32, `cos`/`sin` `[n, …]` holding hd/2 values a token (the tables
/// of `models::rope`). Pairs are (i, i + hd/2), or (2i, 2i + 1) when `interleaved`.
pub fn norm_rope(
    x: &Tensor,
    norm: Option<(&Tensor, f32)>,
    cos: &Tensor,
    sin: &Tensor,
    interleaved: bool,
) -> Result<Tensor> {
    let (n, _, hd) = x.dims3()?;
    let f32 = candle_core::DType::F32;
    let table_ok = |t: &Tensor| t.elem_count() == n * (hd / 2) && t.dtype() == f32;
    let norm_ok = norm.is_none_or(|(w, _)| w.dims() == [hd] && w.dtype() == f32);
    if hd == 0 || !hd.is_multiple_of(2) || x.dtype() != f32 || !table_ok(cos) || !table_ok(sin) || !norm_ok {
        return Err(WickError::Internal(format!(
            "norm_rope: x {:?}, tables {:?} and {:?}, norm {:?}",
            x.dims(),
            cos.dims(),
            sin.dims(),
            norm.map(|(w, _)| w.dims())
        )));
    }
    let op = NormRope {
        w: norm.map(|(w, _)| w.contiguous()).transpose()?,
        eps: norm.map_or(0.0, |(_, e)| e),
        interleaved,
    };
    Ok(x.contiguous()?.apply_op3_no_bwd(&cos.contiguous()?, &sin.contiguous()?, &op)?)
}

/// `silu(g)·u` for `g`, `u` `[m, n]` f32: rows may be strided views (the halves of one product),
/// read in place; each row's values must be adjacent.
pub fn swiglu(g: &Tensor, u: &Tensor) -> Result<Tensor> {
    let f32 = candle_core::DType::F32;
    if g.dims() != u.dims() || g.rank() != 2 || g.dtype() != f32 || u.dtype() != f32 {
        return Err(WickError::Internal(format!(
            "swiglu: gate {:?}, up {:?} (f32 [m, n])",
            g.dims(),
            u.dims()
        )));
    }
    Ok(rows_of(g)?.apply_op2_no_bwd(&rows_of(u)?, &SwiGlu)?)
}

/// `t` as is when its rows are runs of adjacent values, else a contiguous copy.
fn rows_of(t: &Tensor) -> Result<Tensor> {
    Ok(if row_stride(t.layout()).is_some() { t.clone() } else { t.contiguous()? })
}

/// Gemma's `gelu(g)·u` as the exact path makes it (`ggml_gelu`'s table: 0 at or below −10, `g`
/// at or above 10, else the tanh GELU of `g`'s f16 value rounded to f16), `g` and `u` as
/// `swiglu` takes them; `table`: the 65536 f16 values by f16 bits, on their device.
pub fn geglu(g: &Tensor, u: &Tensor, table: &Tensor) -> Result<Tensor> {
    let f32 = candle_core::DType::F32;
    let table_ok = table.dims() == [1 << 16] && table.dtype() == candle_core::DType::F16;
    if g.dims() != u.dims() || g.rank() != 2 || g.dtype() != f32 || u.dtype() != f32 || !table_ok {
        return Err(WickError::Internal(format!(
            "geglu: gate {:?}, up {:?}, table {:?} (f32 [m, n], 65536 f16)",
            g.dims(),
            u.dims(),
            table.dims()
        )));
    }
    Ok(rows_of(g)?.apply_op3_no_bwd(&rows_of(u)?, &table.contiguous()?, &GeGlu)?)
}

/// `silu(g)·u` on any device: `swiglu` where it is built, else candle's ops (Metal; libm's
/// `exp` where ggml has its own `expf`).
pub fn silu_mul(g: &Tensor, u: &Tensor) -> Result<Tensor> {
    match available(g.device()) {
        true => swiglu(g, u),
        false => Ok((g.silu()? * u)?),
    }
}

/// The distance between the rows of a 2-D layout whose rows are runs of adjacent values.
pub(crate) fn row_stride(l: &Layout) -> Option<usize> {
    match (l.dims(), l.stride()) {
        ([m, n], [rs, cs]) if *cs == 1 || *n <= 1 => Some(if *m <= 1 { *n } else { *rs }),
        _ => None,
    }
}

/// A strided operand's values from its first (the rows `row_stride` apart).
fn strided_f32<'a>(s: &'a CpuStorage, l: &Layout) -> candle_core::Result<(&'a [f32], usize)> {
    match (s, row_stride(l)) {
        (CpuStorage::F32(v), Some(stride)) => {
            let (m, n) = l.shape().dims2()?;
            let end = l.start_offset() + m.saturating_sub(1) * stride + n;
            if end > v.len() {
                candle_core::bail!("swiglu: a view past its storage");
            }
            Ok((&v[l.start_offset()..end], stride))
        }
        _ => candle_core::bail!("swiglu: operands must be f32 rows of adjacent values"),
    }
}

struct RmsNorm {
    eps: f32,
}

struct AddRmsNorm {
    eps: f32,
}

struct SwiGlu;

struct GeGlu;

struct NormRope {
    /// The heads' norm weight `[hd]`, on the op's device; none: RoPE alone.
    w: Option<Tensor>,
    eps: f32,
    interleaved: bool,
}

impl CustomOp2 for RmsNorm {
    fn name(&self) -> &'static str {
        "wick-row-rms-norm"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (x, w) = (f32_operand(s1, l1, "rms_norm")?, f32_operand(s2, l2, "rms_norm")?);
        let mut y = vec![0f32; x.len()];
        twin::rms_norm(x, None, w, None, &mut y, self.eps).map_err(candle_core::Error::msg)?;
        Ok((CpuStorage::F32(y), l1.shape().clone()))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s1: &candle_core::CudaStorage,
        l1: &Layout,
        s2: &candle_core::CudaStorage,
        l2: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        let y = super::cuda::rms_norm((s1, l1), None, (s2, l2), self.eps)?;
        Ok((y, l1.shape().clone()))
    }
}

impl CustomOp3 for AddRmsNorm {
    fn name(&self) -> &'static str {
        "wick-row-add-rms-norm"
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
        let op = "add_rms_norm";
        let (x, add, w) = (f32_operand(s1, l1, op)?, f32_operand(s2, l2, op)?, f32_operand(s3, l3, op)?);
        let mut out = vec![0f32; 2 * x.len()];
        let (sum, y) = out.split_at_mut(x.len());
        twin::rms_norm(x, Some(add), w, Some(sum), y, self.eps).map_err(candle_core::Error::msg)?;
        Ok((CpuStorage::F32(out), both_shape(l1)))
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
        let out = super::cuda::rms_norm((s1, l1), Some((s2, l2)), (s3, l3), self.eps)?;
        Ok((out, both_shape(l1)))
    }
}

/// `[2, ..x]`: the sum, then its norm.
fn both_shape(x: &Layout) -> Shape {
    Shape::from([&[2], x.dims()].concat())
}

impl CustomOp2 for SwiGlu {
    fn name(&self) -> &'static str {
        "wick-row-swiglu"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (m, n) = l1.shape().dims2()?;
        let ((g, gs), (u, us)) = (strided_f32(s1, l1)?, strided_f32(s2, l2)?);
        let mut y = vec![0f32; m * n];
        twin::swiglu(g, gs, u, us, &mut y, m, n).map_err(candle_core::Error::msg)?;
        Ok((CpuStorage::F32(y), Shape::from((m, n))))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s1: &candle_core::CudaStorage,
        l1: &Layout,
        s2: &candle_core::CudaStorage,
        l2: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        let y = super::cuda::swiglu((s1, l1), (s2, l2))?;
        Ok((y, l1.shape().clone()))
    }
}

impl CustomOp3 for GeGlu {
    fn name(&self) -> &'static str {
        "wick-row-geglu"
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
        let (m, n) = l1.shape().dims2()?;
        let ((g, gs), (u, us)) = (strided_f32(s1, l1)?, strided_f32(s2, l2)?);
        let table = match (s3, l3.contiguous_offsets()) {
            (CpuStorage::F16(t), Some((a, b))) if b - a == 1 << 16 => &t[a..b],
            _ => candle_core::bail!("geglu: the table must be 65536 contiguous f16 values"),
        };
        let mut y = vec![0f32; m * n];
        twin::geglu(g, gs, u, us, table, &mut y, m, n).map_err(candle_core::Error::msg)?;
        Ok((CpuStorage::F32(y), Shape::from((m, n))))
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
        let y = super::cuda::geglu((s1, l1), (s2, l2), (s3, l3))?;
        Ok((y, l1.shape().clone()))
    }
}

impl CustomOp3 for NormRope {
    fn name(&self) -> &'static str {
        "wick-row-norm-rope"
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
        let (_, heads, hd) = l1.shape().dims3()?;
        let op = "norm_rope";
        let (x, cos, sin) = (f32_operand(s1, l1, op)?, f32_operand(s2, l2, op)?, f32_operand(s3, l3, op)?);
        let w = match &self.w {
            Some(w) => Some(w.flatten_all()?.to_vec1::<f32>()?),
            None => None,
        };
        let mut y = vec![0f32; x.len()];
        let rope = twin::Rope { cos, sin, heads, hd, interleaved: self.interleaved };
        twin::norm_rope(x, w.as_deref().map(|w| (w, self.eps)), &rope, &mut y)
            .map_err(candle_core::Error::msg)?;
        Ok((CpuStorage::F32(y), l1.shape().clone()))
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
        let w = self.w.as_ref().map(|w| w.storage_and_layout());
        let w = match &w {
            Some((storage, layout)) => match &**storage {
                candle_core::Storage::Cuda(c) => Some((c, *layout)),
                _ => candle_core::bail!("norm_rope: the norm weight is not on the GPU"),
            },
            None => None,
        };
        let y = super::cuda::norm_rope((s1, l1), w, (s2, l2), (s3, l3), self.eps, self.interleaved)?;
        Ok((y, l1.shape().clone()))
    }
}

mod twin;

#[cfg(all(test, wick_qmv_twin))]
mod tests;
