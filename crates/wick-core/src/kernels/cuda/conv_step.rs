//! The launch of `conv_step.cu` (what `kernels::conv_step::fused` runs on CUDA).

use candle_core::cuda_backend::cudarc::driver::{LaunchConfig, PushKernelArg};
use candle_core::cuda_backend::{CudaStorage, WrapErr};
use candle_core::{Layout, Shape};

const PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/conv_step.ptx"));
const THREADS: u32 = 128;

/// `bcx` `[B, 3d]`, `prev` `[B, L-1, d]`, `taps` `[L, d]` (f32, contiguous) → `[L, B, d]`.
pub fn conv_step(
    (bcx, bl): (&CudaStorage, &Layout),
    (prev, pl): (&CudaStorage, &Layout),
    (taps, tl): (&CudaStorage, &Layout),
) -> candle_core::Result<(CudaStorage, Shape)> {
    let (batch, width) = bl.shape().dims2()?;
    let (l, d) = tl.shape().dims2()?;
    if width != 3 * d || pl.shape().dims() != [batch, l - 1, d] {
        candle_core::bail!("conv step: rows {:?}, states {:?}, taps {:?}", bl.shape(), pl.shape(), tl.shape())
    }
    let dev = bcx.device.clone();
    let bcx = bcx.as_cuda_slice::<f32>()?.slice(bl.start_offset()..bl.start_offset() + batch * width);
    let prev = prev.as_cuda_slice::<f32>()?.slice(pl.start_offset()..pl.start_offset() + batch * (l - 1) * d);
    let taps = taps.as_cuda_slice::<f32>()?.slice(tl.start_offset()..tl.start_offset() + l * d);
    // SAFETY: uninitialised; the kernel writes all L·B·d outputs.
    let out = unsafe { dev.alloc::<f32>(l * batch * d) }?;
    let func = dev.get_or_load_custom_func("wick_conv_step", "wick_conv_step", PTX)?;
    let cfg = LaunchConfig {
        grid_dim: ((d as u32).div_ceil(THREADS), batch as u32, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: 0,
    };
    let (batch_i, d_i, l_i) = (batch as i32, d as i32, l as i32);
    let mut launch = func.builder();
    launch.arg(&bcx);
    launch.arg(&prev);
    launch.arg(&taps);
    launch.arg(&out);
    candle_core::builder_arg!(launch, batch_i, d_i, l_i);
    // SAFETY: the arguments are the kernel's in order and type; it reads B rows of 3d, B
    // states of (L-1)·d and L·d taps, and writes L·B·d outputs.
    unsafe { launch.launch(cfg) }.w()?;
    Ok((CudaStorage::wrap_cuda_slice(out, dev), Shape::from((l, batch, d))))
}
