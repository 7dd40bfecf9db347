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
    match device {
        candle_core::Device::Cpu => cfg!(wick_qmv_twin),
        d => cfg!(feature = "cuda") && d.is_cuda(),
    }
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

/// The host twin through its C entry points (sizes checked here, where the C trusts them).
mod twin {
    #[cfg(wick_qmv_twin)]
    extern "C" {
        fn wick_rms_norm_twin(
            x: *const f32,
            add: *const f32,
            w: *const f32,
            sum_out: *mut f32,
            y: *mut f32,
            rows: usize,
            n: i32,
            eps: f32,
        );
        fn wick_norm_rope_twin(
            x: *const f32,
            w: *const f32,
            cos: *const f32,
            sin: *const f32,
            y: *mut f32,
            rows: usize,
            heads: i32,
            hd: i32,
            eps: f32,
            interleaved: i32,
        );
        fn wick_geglu_twin(
            g: *const f32,
            u: *const f32,
            table: *const u16,
            y: *mut f32,
            rows: usize,
            n: i32,
            gs: usize,
            us: usize,
        );
        fn wick_swiglu_twin(
            g: *const f32,
            u: *const f32,
            y: *mut f32,
            rows: usize,
            n: i32,
            gs: usize,
            us: usize,
        );
    }

    /// Rows of `w.len()`: `y = norm(x (+ add))·w`, the sum into `sum` when there is an add.
    pub fn rms_norm(
        x: &[f32],
        add: Option<&[f32]>,
        w: &[f32],
        sum: Option<&mut [f32]>,
        y: &mut [f32],
        eps: f32,
    ) -> Result<(), String> {
        let n = w.len();
        let sizes_ok = n > 0
            && x.len().is_multiple_of(n)
            && y.len() == x.len()
            && add.is_some() == sum.is_some()
            && add.is_none_or(|a| a.len() == x.len())
            && sum.as_ref().is_none_or(|s| s.len() == x.len())
            && i32::try_from(n).is_ok();
        if !sizes_ok {
            return Err(format!("rms_norm: {} values in rows of {n}", x.len()));
        }
        #[cfg(wick_qmv_twin)]
        {
            let null = std::ptr::null::<f32>();
            let (add, sum) =
                (add.map_or(null, |a| a.as_ptr()), sum.map_or(null as *mut f32, |s| s.as_mut_ptr()));
            let rows = x.len() / n;
            // SAFETY: x, y (and add, sum when given) hold `rows` rows of n; w holds n.
            unsafe {
                wick_rms_norm_twin(x.as_ptr(), add, w.as_ptr(), sum, y.as_mut_ptr(), rows, n as i32, eps)
            };
            Ok(())
        }
        #[cfg(not(wick_qmv_twin))]
        {
            let _ = (sum, eps);
            Err("this build has no row-op host twin (Linux builds only)".into())
        }
    }

    /// RoPE tables and the heads' shape for `norm_rope`.
    pub struct Rope<'a> {
        pub cos: &'a [f32],
        pub sin: &'a [f32],
        pub heads: usize,
        pub hd: usize,
        pub interleaved: bool,
    }

    /// Rows of `r.hd` (`r.heads` a token): each row's norm by `(w, ε)` when given, then RoPE.
    pub fn norm_rope(
        x: &[f32],
        norm: Option<(&[f32], f32)>,
        r: &Rope<'_>,
        y: &mut [f32],
    ) -> Result<(), String> {
        let (hd, heads) = (r.hd, r.heads);
        let rows = x.len() / hd.max(1);
        let tokens = rows / heads.max(1);
        let sizes_ok = hd > 0
            && hd.is_multiple_of(2)
            && heads > 0
            && x.len() == tokens * heads * hd
            && y.len() == x.len()
            && r.cos.len() == tokens * hd / 2
            && r.sin.len() == r.cos.len()
            && norm.is_none_or(|(w, _)| w.len() == hd)
            && i32::try_from(x.len()).is_ok();
        if !sizes_ok {
            return Err(format!("norm_rope: {} values in rows of {hd}, {heads} heads a token", x.len()));
        }
        #[cfg(wick_qmv_twin)]
        {
            let (w, eps) = norm.map_or((std::ptr::null(), 0.0), |(w, e)| (w.as_ptr(), e));
            // SAFETY: x and y hold `rows` rows of hd, cos and sin hd/2 values per token
            // (rows / heads tokens), w hd values when given (checked above).
            unsafe {
                wick_norm_rope_twin(
                    x.as_ptr(),
                    w,
                    r.cos.as_ptr(),
                    r.sin.as_ptr(),
                    y.as_mut_ptr(),
                    rows,
                    heads as i32,
                    hd as i32,
                    eps,
                    r.interleaved as i32,
                )
            };
            Ok(())
        }
        #[cfg(not(wick_qmv_twin))]
        {
            let _ = norm;
            Err("this build has no row-op host twin (Linux builds only)".into())
        }
    }

    /// `m` rows of `n`: `y = gelu(g)·u` by `table` (65536 f16 values), rows as `swiglu`'s.
    #[allow(clippy::too_many_arguments)]
    pub fn geglu(
        g: &[f32],
        gs: usize,
        u: &[f32],
        us: usize,
        table: &[half::f16],
        y: &mut [f32],
        m: usize,
        n: usize,
    ) -> Result<(), String> {
        if table.len() != 1 << 16 {
            return Err(format!("geglu: a table of {} values", table.len()));
        }
        glu_sizes(g, gs, u, us, y, m, n)?;
        #[cfg(wick_qmv_twin)]
        {
            // SAFETY: g and u hold m rows of n, gs and us apart, y holds m·n (`glu_sizes`);
            // the table every f16 bit pattern's value (f16 is a u16 in memory).
            unsafe {
                wick_geglu_twin(
                    g.as_ptr(),
                    u.as_ptr(),
                    table.as_ptr().cast(),
                    y.as_mut_ptr(),
                    m,
                    n as i32,
                    gs,
                    us,
                )
            };
            Ok(())
        }
        #[cfg(not(wick_qmv_twin))]
        Err("this build has no row-op host twin (Linux builds only)".into())
    }

    /// Whether `m` rows of `n`, `gs` and `us` apart, lie in `g` and `u`, and `y` holds them.
    fn glu_sizes(
        g: &[f32],
        gs: usize,
        u: &[f32],
        us: usize,
        y: &[f32],
        m: usize,
        n: usize,
    ) -> Result<(), String> {
        let spans = |len: usize, stride: usize| m == 0 || (m - 1) * stride + n <= len;
        if y.len() != m * n || !spans(g.len(), gs) || !spans(u.len(), us) || i32::try_from(n).is_err() {
            return Err(format!("glu: {m} rows of {n} from {} and {} values", g.len(), u.len()));
        }
        Ok(())
    }

    /// `m` rows of `n`: `y = silu(g)·u`, the operands' rows `gs` and `us` apart.
    pub fn swiglu(
        g: &[f32],
        gs: usize,
        u: &[f32],
        us: usize,
        y: &mut [f32],
        m: usize,
        n: usize,
    ) -> Result<(), String> {
        glu_sizes(g, gs, u, us, y, m, n)?;
        #[cfg(wick_qmv_twin)]
        {
            // SAFETY: g and u hold m rows of n, gs and us apart, y holds m·n (`glu_sizes`).
            unsafe { wick_swiglu_twin(g.as_ptr(), u.as_ptr(), y.as_mut_ptr(), m, n as i32, gs, us) };
            Ok(())
        }
        #[cfg(not(wick_qmv_twin))]
        Err("this build has no row-op host twin (Linux builds only)".into())
    }
}

#[cfg(all(test, wick_qmv_twin))]
mod tests {
    use candle_core::{Device, Tensor};

    use super::*;
    use crate::kernels::cpu::dot_checks::lcg;
    use crate::kernels::cpu::elementwise;
    use crate::kernels::cpu::expf::{ggml_expf, ExpVariant};

    /// Values in ±`scale`, some rows' entries three decades larger or smaller.
    fn values(len: usize, scale: f32, seed: u32) -> Vec<f32> {
        let mut r = lcg(seed);
        (0..len)
            .map(|i| {
                let v = (r() as f32 / (1 << 24) as f32 - 0.5) * 2.0 * scale;
                match i % 13 {
                    0 => v * 1e3,
                    5 => v * 1e-3,
                    _ => v,
                }
            })
            .collect()
    }

    fn bits(t: &Tensor) -> Vec<u32> {
        t.flatten_all().unwrap().to_vec1::<f32>().unwrap().iter().map(|v| v.to_bits()).collect()
    }

    #[test]
    fn the_norm_equals_the_exact_paths_norm_bit_for_bit() {
        // Q/K head norms, LFM2-1.2B's width, a width the block's threads do not divide.
        for (rows, n, seed) in [(400, 64, 1), (40, 2048, 2), (30, 300, 3), (4, 8192, 4)] {
            let x = Tensor::from_vec(values(rows * n, 2.0, seed), (rows, n), &Device::Cpu).unwrap();
            let w = Tensor::from_vec(values(n, 1.0, seed + 10), n, &Device::Cpu).unwrap();
            let exact = elementwise::rms_norm(&x, &w, 1e-5).unwrap();
            assert_eq!(bits(&rms_norm(&x, &w, 1e-5).unwrap()), bits(&exact), "rows of {n}");
        }
    }

    #[test]
    fn the_add_and_norm_equal_the_add_then_the_norm() {
        let (rows, n) = (5, 300);
        let x = Tensor::from_vec(values(rows * n, 2.0, 7), (rows, n), &Device::Cpu).unwrap();
        let y = Tensor::from_vec(values(rows * n, 2.0, 8), (rows, n), &Device::Cpu).unwrap();
        let w = Tensor::from_vec(values(n, 1.0, 9), n, &Device::Cpu).unwrap();
        let (h, normed) = add_rms_norm(&x, &y, &w, 1e-6).unwrap();
        let sum = (&x + &y).unwrap();
        assert_eq!(bits(&h), bits(&sum));
        assert_eq!(bits(&normed), bits(&rms_norm(&sum, &w, 1e-6).unwrap()));
        assert!(add_rms_norm(&x, &y.narrow(0, 0, 4).unwrap(), &w, 1e-6).is_err(), "mismatched shapes");
    }

    #[test]
    fn the_heads_norm_and_rope_equal_the_exact_paths_norm_then_rope() {
        let (n, heads, hd) = (9, 5, 64);
        let x = Tensor::from_vec(values(n * heads * hd, 3.0, 21), (n, heads, hd), &Device::Cpu).unwrap();
        let w = Tensor::from_vec(values(hd, 1.0, 22), hd, &Device::Cpu).unwrap();
        // Angles as the tables hold them: large positions, small ones.
        let angles = values(n * hd / 2, 900.0, 23);
        let table = |f: fn(f32) -> f32| {
            Tensor::from_vec(angles.iter().map(|&a| f(a)).collect::<Vec<f32>>(), (n, 1, hd / 2), &Device::Cpu)
                .unwrap()
        };
        let (cos, sin) = (table(f32::cos), table(f32::sin));
        // ggml's aarch64 build rotates interleaved pairs in a vector loop of its own rounding.
        let styles: &[bool] = if cfg!(target_arch = "aarch64") { &[false] } else { &[false, true] };
        for &interleaved in styles {
            let normed = elementwise::rms_norm(&x, &w, 1e-6).unwrap();
            let want = elementwise::rope(&normed, &cos, &sin, interleaved).unwrap();
            let got = norm_rope(&x, Some((&w, 1e-6)), &cos, &sin, interleaved).unwrap();
            assert_eq!(bits(&got), bits(&want), "normed, interleaved {interleaved}");
            let want = elementwise::rope(&x, &cos, &sin, interleaved).unwrap();
            let got = norm_rope(&x, None, &cos, &sin, interleaved).unwrap();
            assert_eq!(bits(&got), bits(&want), "RoPE alone, interleaved {interleaved}");
        }
        assert!(norm_rope(&x, None, &cos.narrow(0, 0, 8).unwrap(), &sin, false).is_err(), "short tables");
    }

    #[test]
    fn swiglu_takes_ggmls_expf_and_reads_strided_halves_in_place() {
        // Gates across expf's ranges: |n| > 126 and > 192 take their own branches.
        let (rows, n) = (7, 96);
        let mut gu = values(rows * 2 * n, 12.0, 11);
        gu[..6].copy_from_slice(&[-100.0, 95.0, 0.0, -0.0, -88.5, 130.0]);
        let both = Tensor::from_vec(gu.clone(), (rows, 2 * n), &Device::Cpu).unwrap();
        let (g, u) = (both.narrow(1, 0, n).unwrap(), both.narrow(1, n, n).unwrap());
        let got = swiglu(&g, &u).unwrap();
        let want: Vec<u32> = (0..rows * n)
            .map(|e| {
                let (x, m) = (gu[e / n * 2 * n + e % n], gu[e / n * 2 * n + n + e % n]);
                ((x / (1.0 + ggml_expf(0.0 - x, ExpVariant::Avx2))) * m).to_bits()
            })
            .collect();
        assert_eq!(bits(&got), want);
        let contiguous = swiglu(&g.contiguous().unwrap(), &u.contiguous().unwrap()).unwrap();
        assert_eq!(bits(&contiguous), want);
        assert!(swiglu(&g, &u.narrow(0, 0, 3).unwrap()).is_err(), "mismatched shapes");
    }
}
