//! The launch of `decode_attention.cu` (what `kernels::decode_attention` runs on CUDA).

use candle_core::cuda_backend::cudarc::driver::{LaunchConfig, PushKernelArg};
use candle_core::cuda_backend::{CudaStorage, WrapErr};
use candle_core::{DType, Layout, Shape, Storage, Tensor};

const PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/decode_attention.ptx"));

/// The CUDA slice behind a contiguous u32 tensor, from its first element.
fn u32_view(t: &Tensor) -> candle_core::Result<(impl std::ops::Deref<Target = Storage> + '_, usize)> {
    let (storage, layout) = t.storage_and_layout();
    if !layout.is_contiguous() || t.dtype() != DType::U32 {
        candle_core::bail!("decode attention: slot tables must be contiguous u32");
    }
    Ok((storage, layout.start_offset()))
}

/// What a launch reads beside Q and the pages: the slot tables (u32 on the GPU) and settings.
pub struct Attend<'a> {
    pub reads: &'a Tensor,
    pub lens: &'a Tensor,
    pub t_pad: usize,
    /// Slots between query rows' rows of `reads`: `t_pad`, or 0 when all read one.
    pub reads_stride: usize,
    /// 0: no window.
    pub window: usize,
    pub scale: f32,
    /// Query heads per KV head.
    pub group: usize,
    /// Threads of a block (the order of the kernel's sums follows it).
    pub threads: usize,
}

/// The launch of `decode_attention.cu` (what `kernels::decode_attention` runs on CUDA): `q`
/// `[B, n_head · hd]` f32, `k`/`v` a layer's `[slots, n_kv, hd]` f16 pages.
pub fn decode_attention(
    op: &Attend<'_>,
    (q, ql): (&CudaStorage, &Layout),
    (k, kl): (&CudaStorage, &Layout),
    (v, vl): (&CudaStorage, &Layout),
) -> candle_core::Result<(CudaStorage, Shape)> {
    let (b, width) = ql.shape().dims2()?;
    let (_, n_kv, hd) = kl.shape().dims3()?;
    let n_head = width / hd;
    let dev = q.device.clone();
    let q = q.as_cuda_slice::<f32>()?.slice(ql.start_offset()..);
    let k = k.as_cuda_slice::<half::f16>()?.slice(kl.start_offset()..);
    let v = v.as_cuda_slice::<half::f16>()?.slice(vl.start_offset()..);
    let (reads, reads_at) = u32_view(op.reads)?;
    let (lens, lens_at) = u32_view(op.lens)?;
    let (Storage::Cuda(reads), Storage::Cuda(lens)) = (&*reads, &*lens) else {
        candle_core::bail!("decode attention: slot tables must be on the GPU");
    };
    let reads = reads.as_cuda_slice::<u32>()?.slice(reads_at..);
    let lens = lens.as_cuda_slice::<u32>()?.slice(lens_at..);
    // SAFETY: uninitialised, but the kernel writes every score before it reads it.
    let scratch = unsafe { dev.alloc::<f32>(b * n_head * op.t_pad) }?;
    // SAFETY: uninitialised, but the kernel writes every output element.
    let out = unsafe { dev.alloc::<f32>(b * n_head * hd) }?;
    let func = dev.get_or_load_custom_func("wick_decode_attention_f16", "wick_decode_attention", PTX)?;
    let n_warps = op.threads / 32;
    let shared = (op.group * hd + n_warps * op.group + 2 * op.group) * std::mem::size_of::<f32>();
    let cfg = LaunchConfig {
        grid_dim: (b as u32, n_kv as u32, 1),
        block_dim: (op.threads as u32, 1, 1),
        shared_mem_bytes: shared as u32,
    };
    let (n_kv, group, hd_i, t_pad, stride) =
        (n_kv as i32, op.group as i32, hd as i32, op.t_pad as i32, op.reads_stride as i32);
    let (window, scale) = (op.window as i32, op.scale);
    let mut launch = func.builder();
    candle_core::builder_arg!(launch, q, k, v, reads, lens, scratch);
    launch.arg(&out);
    candle_core::builder_arg!(launch, n_kv, group, hd_i, t_pad, stride, window, scale);
    // SAFETY: the arguments match the kernel's signature in order and type (the f16 pages as
    // their bits); every index it makes lies within the buffers given (slots within the layer's
    // cache, checked when the batch's tables were made).
    unsafe { launch.launch(cfg) }.w()?;
    Ok((CudaStorage::wrap_cuda_slice(out, dev), Shape::from((b, width))))
}
