//! The launches of `qmatvec.cu` (what `kernels::qmatvec` runs on CUDA): the activation rows
//! quantized into a scratch buffer, then a warp per weight row and chunk of activation rows.

use candle_core::cuda_backend::cudarc::driver::{LaunchConfig, PushKernelArg};
use candle_core::cuda_backend::{CudaStorage, WrapErr};
use candle_core::quantized::QTensor;
use candle_core::{Layout, Shape};

const PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/qmatvec.ptx"));
const MODULE: &str = "wick_qmatvec";
/// Weight rows (warps) per thread block.
const ROWS_PER_BLOCK: u32 = 4;

/// What the launches need to know of the product beyond its operands.
pub struct Launch<'a> {
    /// The product's kernel for the weight's type.
    pub kernel: &'a str,
    /// Bytes of one quantized activation row.
    pub act_row: usize,
    /// Activation rows a warp takes at once (`WQ_MAX_VEC`).
    pub chunk: usize,
    /// The host's rounding rules (`qmatvec.cuh`).
    pub arm: i32,
}

/// `m` rows of `k` f32 (`x`, contiguous) times `w` (GGUF blocks on the same GPU) → `[m, n]`.
pub fn qmatvec(
    w: &QTensor,
    p: &Launch<'_>,
    x: &CudaStorage,
    l: &Layout,
    m: usize,
    k: usize,
) -> candle_core::Result<(CudaStorage, Shape)> {
    let (n, _) = w.shape().dims2()?;
    let dtype = w.dtype();
    let block = dtype.block_size();
    let row_bytes = (k / block * dtype.type_size()) as i64;
    let dev = x.device.clone();
    let x = x.as_cuda_slice::<f32>()?.slice(l.start_offset()..l.start_offset() + m * k);
    // SAFETY: uninitialised; the quantize kernel writes every block before the product reads it.
    let act = unsafe { dev.alloc::<u8>(m * p.act_row) }?;
    let nblk = (k / block) as u32;
    let (quantize, k_i, nblk_i) =
        (if block == 256 { "wick_qmv_quantize_q8k" } else { "wick_qmv_quantize_q8" }, k as i32, nblk as i32);
    let func = dev.get_or_load_custom_func(quantize, MODULE, PTX)?;
    let cfg = LaunchConfig { grid_dim: (nblk, m as u32, 1), block_dim: (32, 1, 1), shared_mem_bytes: 0 };
    let mut launch = func.builder();
    launch.arg(&x);
    launch.arg(&act);
    candle_core::builder_arg!(launch, k_i, nblk_i);
    launch.arg(&p.arm);
    // SAFETY: the arguments are the kernel's in order and type; it reads m rows of k values and
    // writes m·nblk activation blocks, p.act_row bytes a row.
    unsafe { launch.launch(cfg) }.w()?;

    // SAFETY: uninitialised; lane 0 of each row's warp writes its m outputs.
    let out = unsafe { dev.alloc::<f32>(m * n) }?;
    let stream = dev.cuda_stream();
    let (wptr, _sync) = w.device_ptr_with_guard(&stream)?;
    let wptr = wptr as u64;
    let func = dev.get_or_load_custom_func(p.kernel, MODULE, PTX)?;
    let chunks = m.div_ceil(p.chunk) as u32;
    let cfg = LaunchConfig {
        grid_dim: ((n as u32).div_ceil(ROWS_PER_BLOCK) * chunks, 1, 1),
        block_dim: (32, ROWS_PER_BLOCK, 1),
        shared_mem_bytes: 0,
    };
    let (n_i, units, m_i) = (n as i32, (k / 32) as i32, m as i32);
    let mut launch = func.builder();
    launch.arg(&wptr);
    launch.arg(&act);
    launch.arg(&out);
    candle_core::builder_arg!(launch, n_i, units, row_bytes, m_i);
    // SAFETY: as above; the weight holds n rows of row_bytes (its storage, padded by candle),
    // read while `_sync` keeps it ordered on this stream.
    unsafe { launch.launch(cfg) }.w()?;
    Ok((CudaStorage::wrap_cuda_slice(out, dev), Shape::from((m, n))))
}
