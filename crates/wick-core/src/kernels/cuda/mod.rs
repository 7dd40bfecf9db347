//! Wick's own CUDA kernels, where candle has none for what the device path needs. Each is
//! compiled to PTX by `build.rs` (nvcc, `cuda` feature), loaded once per device by candle
//! (`get_or_load_custom_func`) and run as a candle custom op on the device's stream, so it
//! orders with candle's own kernels. `tests/device_attention.rs` checks each against the
//! composed candle path on a GPU.

use candle_core::cuda_backend::cudarc::driver::{LaunchConfig, PushKernelArg};
use candle_core::cuda_backend::{CudaStorage, WrapErr};
use candle_core::{CpuStorage, CustomOp3, DType, Layout, Shape, Storage, Tensor};

use crate::error::{Result, WickError};

mod conv_step;
mod qmatvec;
mod row_ops;
pub use conv_step::conv_step;
pub use qmatvec::{qmatvec, Launch};
pub use row_ops::{geglu, norm_rope, rms_norm, swiglu};

const PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/decode_attention.ptx"));
const THREADS: u32 = 128;

/// One-token attention of a decode batch read straight from the paged f16 cache
/// (`decode_attention.cu`): `q` `[B, n_head · hd]` f32, `kc`/`vc` a layer's `[slots, n_kv,
/// hd]` f16, `reads` `[B · t_pad]` u32 slots, `lens` `[B]` u32. Returns `[B, n_head · hd]` f32.
#[allow(clippy::too_many_arguments)]
pub fn decode_attention(
    q: &Tensor,
    kc: &Tensor,
    vc: &Tensor,
    reads: &Tensor,
    lens: &Tensor,
    t_pad: usize,
    window: Option<usize>,
    scale: f32,
) -> Result<Tensor> {
    let (_, n_kv, hd) = kc.dims3()?;
    let (b, width) = q.dims2()?;
    if width % (n_kv * hd) != 0 || reads.elem_count() != b * t_pad || lens.elem_count() != b {
        return Err(WickError::Internal(format!(
            "decode attention: q [{b}, {width}], cache heads {n_kv}×{hd}, {} slots for {b}×{t_pad}, {} lengths",
            reads.elem_count(),
            lens.elem_count()
        )));
    }
    let op = DecodeAttention {
        reads: reads.contiguous()?,
        lens: lens.contiguous()?,
        t_pad,
        window: window.unwrap_or(0),
        scale,
        group: width / (n_kv * hd),
    };
    Ok(q.contiguous()?.apply_op3_no_bwd(&kc.contiguous()?, &vc.contiguous()?, &op)?)
}

struct DecodeAttention {
    reads: Tensor,
    lens: Tensor,
    t_pad: usize,
    window: usize,
    scale: f32,
    group: usize,
}

/// The CUDA slice behind a contiguous u32 tensor, from its first element.
fn u32_view(t: &Tensor) -> candle_core::Result<(impl std::ops::Deref<Target = Storage> + '_, usize)> {
    let (storage, layout) = t.storage_and_layout();
    if !layout.is_contiguous() || t.dtype() != DType::U32 {
        candle_core::bail!("decode attention: slot tables must be contiguous u32");
    }
    Ok((storage, layout.start_offset()))
}

impl CustomOp3 for DecodeAttention {
    fn name(&self) -> &'static str {
        "wick-decode-attention"
    }

    fn cpu_fwd(
        &self,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        candle_core::bail!("the fused decode attention runs on CUDA only")
    }

    fn cuda_fwd(
        &self,
        q: &CudaStorage,
        ql: &Layout,
        k: &CudaStorage,
        kl: &Layout,
        v: &CudaStorage,
        vl: &Layout,
    ) -> candle_core::Result<(CudaStorage, Shape)> {
        let (b, width) = ql.shape().dims2()?;
        let (_, n_kv, hd) = kl.shape().dims3()?;
        let n_head = width / hd;
        let dev = q.device.clone();
        let q = q.as_cuda_slice::<f32>()?.slice(ql.start_offset()..);
        let k = k.as_cuda_slice::<half::f16>()?.slice(kl.start_offset()..);
        let v = v.as_cuda_slice::<half::f16>()?.slice(vl.start_offset()..);
        let (reads, reads_at) = u32_view(&self.reads)?;
        let (lens, lens_at) = u32_view(&self.lens)?;
        let (Storage::Cuda(reads), Storage::Cuda(lens)) = (&*reads, &*lens) else {
            candle_core::bail!("decode attention: slot tables must be on the GPU");
        };
        let reads = reads.as_cuda_slice::<u32>()?.slice(reads_at..);
        let lens = lens.as_cuda_slice::<u32>()?.slice(lens_at..);
        // SAFETY: uninitialised, but the kernel writes every score before it reads it.
        let scratch = unsafe { dev.alloc::<f32>(b * n_head * self.t_pad) }?;
        // SAFETY: uninitialised, but the kernel writes every output element.
        let out = unsafe { dev.alloc::<f32>(b * n_head * hd) }?;
        let func = dev.get_or_load_custom_func("wick_decode_attention_f16", "wick_decode_attention", PTX)?;
        let n_warps = THREADS as usize / 32;
        let shared = (self.group * hd + n_warps * self.group + 2 * self.group) * std::mem::size_of::<f32>();
        let cfg = LaunchConfig {
            grid_dim: (b as u32, n_kv as u32, 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: shared as u32,
        };
        let (n_kv, group, hd_i, t_pad) = (n_kv as i32, self.group as i32, hd as i32, self.t_pad as i32);
        let (window, scale) = (self.window as i32, self.scale);
        let mut launch = func.builder();
        candle_core::builder_arg!(launch, q, k, v, reads, lens, scratch);
        launch.arg(&out);
        candle_core::builder_arg!(launch, n_kv, group, hd_i, t_pad, window, scale);
        // SAFETY: the arguments match the kernel's signature in order and type; every index
        // it makes lies within the buffers given (slots within the layer's cache, checked
        // when the batch's tables were made).
        unsafe { launch.launch(cfg) }.w()?;
        Ok((CudaStorage::wrap_cuda_slice(out, dev), Shape::from((b, width))))
    }
}
