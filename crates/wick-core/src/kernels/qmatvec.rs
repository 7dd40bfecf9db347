//! Wick's quantized matrix product for the device path: activation rows against a GGUF weight,
//! the activations rounded as the exact CPU path rounds them (`cuda/qmatvec.cuh` says why
//! candle's MMVQ is not used). One candle op with two bodies built from the same C source: the
//! CUDA kernels (`cuda` feature: `cuda/qmatvec.cu`, a warp per weight row and `CHUNK` rows a
//! pass; `cuda/qgemm.cu`, int8 tensor-core tiles for more rows, `Kernel`) and their host twin
//! (`cuda/qmatvec_twin.c`, Linux builds: cfg `wick_qmv_twin`), which all agree to the bit; the
//! twin runs on candle's CPU device, so the check device runs the GPU's arithmetic.

use std::sync::Arc;

use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{CpuStorage, CustomOp1, Layout, Shape, Tensor};

use crate::error::{Result, WickError};
use crate::kernels::cpu::elementwise::f32_operand;

/// The host's rounding rules for the activations (`qmatvec.cuh`): the exact path's, which
/// follow ggml's NEON code on aarch64 and its x86 code elsewhere.
pub const ARM: i32 = cfg!(target_arch = "aarch64") as i32;

/// Activation rows the kernels take in one pass over a weight row (`WQ_MAX_VEC`). A row's
/// result does not depend on the other rows of its pass.
pub const CHUNK: usize = 8;

/// The weight types the kernels take: ggml's type id (the C side's `WQ_*`) and the CUDA
/// kernels, the vector one (`qmatvec.cu`) and the tensor-core one (`qgemm.cu`).
const TYPES: [(GgmlDType, i32, &str, &str); 8] = [
    (GgmlDType::Q4_0, 2, "wick_qmv_q4_0", "wick_qgemm_q4_0"),
    (GgmlDType::Q4_1, 3, "wick_qmv_q4_1", "wick_qgemm_q4_1"),
    (GgmlDType::Q5_0, 6, "wick_qmv_q5_0", "wick_qgemm_q5_0"),
    (GgmlDType::Q5_1, 7, "wick_qmv_q5_1", "wick_qgemm_q5_1"),
    (GgmlDType::Q8_0, 8, "wick_qmv_q8_0", "wick_qgemm_q8_0"),
    (GgmlDType::Q4K, 12, "wick_qmv_q4_k", "wick_qgemm_q4_k"),
    (GgmlDType::Q5K, 13, "wick_qmv_q5_k", "wick_qgemm_q5_k"),
    (GgmlDType::Q6K, 14, "wick_qmv_q6_k", "wick_qgemm_q6_k"),
];

/// Which CUDA kernel takes a product of more than `CHUNK` rows. Both give the same bits (the
/// tiles add their float sums in the vector kernel's order), so this is a speed choice; on the
/// CPU the twin takes every product.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kernel {
    /// The vector kernel at every row count, `CHUNK` rows a pass (a check, and the A/B's other
    /// side: `WICK_DEVICE_QMATMUL=wick-vec`).
    Vector,
    /// Int8 tensor-core tiles above `CHUNK` rows (the default).
    Tiles,
}

fn type_id(dtype: GgmlDType) -> Option<i32> {
    TYPES.iter().find(|t| t.0 == dtype).map(|t| t.1)
}

/// Bytes of one quantized activation row of `k` values for a weight of `dtype`
/// (`wq_a32` of 40 bytes per 32 values, `wq_a256` of 292 per 256).
fn act_bytes(dtype: GgmlDType, k: usize) -> usize {
    if dtype.block_size() == 256 {
        k / 256 * 292
    } else {
        k / 32 * 40
    }
}

/// Whether this build runs the product for a weight of `dtype` on `device`.
pub fn available(dtype: GgmlDType, device: &candle_core::Device) -> bool {
    super::twinned_on(device) && type_id(dtype).is_some()
}

/// `x · wᵀ`: `x` `[m, k]` f32 on `w`'s device → `[m, n]` f32.
pub fn qmatvec(w: &Arc<QTensor>, x: &Tensor, kernel: Kernel) -> Result<Tensor> {
    let (n, k) = w.shape().dims2()?;
    let (m, kx) = x.dims2()?;
    if kx != k || type_id(w.dtype()).is_none() || !k.is_multiple_of(w.dtype().block_size()) {
        return Err(WickError::Internal(format!(
            "qmatvec: {m} rows of {kx} against a {:?} weight [{n}, {k}]",
            w.dtype()
        )));
    }
    if m == 0 {
        return Ok(Tensor::zeros((0, n), candle_core::DType::F32, x.device())?);
    }
    let x = x.to_dtype(candle_core::DType::F32)?.contiguous()?;
    Ok(x.apply_op1_no_bwd(&QMatVec { w: w.clone(), kernel })?)
}

struct QMatVec {
    w: Arc<QTensor>,
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    kernel: Kernel,
}

impl CustomOp1 for QMatVec {
    fn name(&self) -> &'static str {
        "wick-qmatvec"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let (m, k) = l.shape().dims2()?;
        let n = self.w.shape().dims2()?.0;
        let xs = f32_operand(s, l, "qmatvec")?;
        let data = self.w.data()?;
        let y = twin::matvec(self.w.dtype(), &data, n, k, xs, m).map_err(candle_core::Error::msg)?;
        Ok((CpuStorage::F32(y), Shape::from((m, n))))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s: &candle_core::CudaStorage,
        l: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        let (m, k) = l.shape().dims2()?;
        let dtype = self.w.dtype();
        let Some(&(_, _, vector, tiles)) = TYPES.iter().find(|t| t.0 == dtype) else {
            candle_core::bail!("qmatvec: no kernel for {dtype:?}")
        };
        let launch = super::cuda::Launch {
            kernel: vector,
            tiles: (self.kernel == Kernel::Tiles).then_some(tiles),
            act_row: act_bytes(dtype, k),
            chunk: CHUNK,
            arm: ARM,
        };
        super::cuda::qmatvec(&self.w, &launch, s, l, m, k)
    }
}

/// The host twin through its C entry points.
pub mod twin {
    use super::*;

    #[cfg(wick_qmv_twin)]
    extern "C" {
        fn wick_qmv_twin_quantize(ty: i32, x: *const f32, k: i32, out: *mut u8, arm: i32) -> usize;
        fn wick_qmv_twin(
            ty: i32,
            w: *const u8,
            row_bytes: usize,
            n: i32,
            k: i32,
            act: *const u8,
            m: i32,
            y: *mut f32,
            ldy: usize,
        ) -> i32;
    }

    /// `m` rows of `k` values (`xs`) quantized as the kernels quantize them for `dtype`:
    /// `m` rows of `wq_a32` / `wq_a256` blocks, one after another.
    pub fn quantize(
        dtype: GgmlDType,
        xs: &[f32],
        m: usize,
        k: usize,
    ) -> std::result::Result<Vec<u8>, String> {
        let ty = type_id(dtype).ok_or_else(|| format!("qmatvec: no kernel for {dtype:?}"))?;
        if xs.len() != m * k || !k.is_multiple_of(dtype.block_size()) || i32::try_from(k).is_err() {
            return Err(format!("qmatvec: {} values for {m} rows of {k}", xs.len()));
        }
        let row = act_bytes(dtype, k);
        let mut out = vec![0u8; m * row];
        for (x, o) in xs.chunks_exact(k.max(1)).zip(out.chunks_exact_mut(row.max(1))) {
            write_row(ty, x, o)?;
        }
        Ok(out)
    }

    #[cfg(wick_qmv_twin)]
    fn write_row(ty: i32, x: &[f32], out: &mut [u8]) -> std::result::Result<(), String> {
        // SAFETY: `x` holds k values (a whole number of blocks) and `out` the k-value row's
        // blocks (`act_bytes`), which is what the function writes.
        let wrote = unsafe { wick_qmv_twin_quantize(ty, x.as_ptr(), x.len() as i32, out.as_mut_ptr(), ARM) };
        if wrote == out.len() {
            Ok(())
        } else {
            Err(format!("qmatvec twin: wrote {wrote} of {} bytes", out.len()))
        }
    }

    #[cfg(not(wick_qmv_twin))]
    fn write_row(_: i32, _: &[f32], _: &mut [u8]) -> std::result::Result<(), String> {
        Err("this build has no qmatvec host twin (Linux builds only)".into())
    }

    /// `[m, n]` = `m` rows of `xs` times the `n` rows of the weight bytes `w` (GGUF blocks).
    pub fn matvec(
        dtype: GgmlDType,
        w: &[u8],
        n: usize,
        k: usize,
        xs: &[f32],
        m: usize,
    ) -> std::result::Result<Vec<f32>, String> {
        let row_bytes = k / dtype.block_size() * dtype.type_size();
        if m == 0 || w.len() < n * row_bytes || i32::try_from(n).is_err() || i32::try_from(m).is_err() {
            return Err(format!("qmatvec: {m} rows against {} bytes for [{n}, {k}] {dtype:?}", w.len()));
        }
        let act = quantize(dtype, xs, m, k)?;
        let mut y = vec![0f32; m * n];
        let ty = type_id(dtype).unwrap_or(0);
        run(&Product { ty, w, row_bytes, n, k, act: &act, m }, &mut y)?;
        Ok(y)
    }

    /// A product's operands as the twin takes them (`matvec` checked their sizes).
    #[cfg_attr(not(wick_qmv_twin), allow(dead_code))]
    struct Product<'a> {
        ty: i32,
        w: &'a [u8],
        row_bytes: usize,
        n: usize,
        k: usize,
        act: &'a [u8],
        m: usize,
    }

    /// The twin over the weight rows in pool tasks (the kernel's warps; each output is written
    /// by the one task owning its weight row).
    #[cfg(wick_qmv_twin)]
    fn run(p: &Product<'_>, y: &mut [f32]) -> std::result::Result<(), String> {
        use crate::runtime::pool::{self, SyncPtr};
        const ROWS: usize = 16;
        let (yp, failed) = (SyncPtr(y.as_mut_ptr()), std::sync::atomic::AtomicBool::new(false));
        pool::run(p.n.div_ceil(ROWS), &|t| {
            let (r0, r1) = (t * ROWS, (t * ROWS + ROWS).min(p.n));
            // SAFETY: `w` holds n rows of row_bytes, `act` m quantized rows of k values and `y`
            // m·n values (checked by `matvec`); this task reads rows r0..r1 and writes only
            // y[v·n + r] for those rows.
            let rc = unsafe {
                wick_qmv_twin(
                    p.ty,
                    p.w.as_ptr().add(r0 * p.row_bytes),
                    p.row_bytes,
                    (r1 - r0) as i32,
                    p.k as i32,
                    p.act.as_ptr(),
                    p.m as i32,
                    yp.get().add(r0),
                    p.n,
                )
            };
            if rc != 0 {
                failed.store(true, std::sync::atomic::Ordering::Relaxed);
            }
        });
        match failed.into_inner() {
            false => Ok(()),
            true => Err("qmatvec twin refused the product".into()),
        }
    }

    #[cfg(not(wick_qmv_twin))]
    fn run(_: &Product<'_>, _: &mut [f32]) -> std::result::Result<(), String> {
        Err("this build has no qmatvec host twin (Linux builds only)".into())
    }
}

#[cfg(all(test, wick_qmv_twin))]
mod tests;
