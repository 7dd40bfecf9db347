//! The launches of `qmatvec.cu` and `qgemm.cu` (what `kernels::qmatvec` runs on CUDA): the
//! activation rows quantized into a scratch buffer, then a warp per weight row and chunk of
//! activation rows, or, for more rows than a chunk, int8 tensor-core tiles.

use candle_core::cuda_backend::cudarc::driver::{LaunchConfig, PushKernelArg};
use candle_core::cuda_backend::{CudaStorage, WrapErr};
use candle_core::quantized::QTensor;
use candle_core::{Layout, Shape};

const PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/qmatvec.ptx"));
const MODULE: &str = "wick_qmatvec";
/// Weight rows (warps) per thread block.
const ROWS_PER_BLOCK: u32 = 4;

const TILES_PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/qgemm.ptx"));
const TILES_MODULE: &str = "wick_qgemm";
/// A tile block's weight rows, activation rows and threads (`qgemm.cu`'s `WQ_GEMM_*`).
const TILE_ROWS: u32 = 64;
const TILE_VECS: u32 = 16;
const TILE_THREADS: u32 = 128;

/// What the launches need to know of the product beyond its operands.
pub struct Launch<'a> {
    /// The product's vector kernel for the weight's type.
    pub kernel: &'a str,
    /// Its tensor-core kernel, to take products of more than `chunk` rows (None: the vector
    /// kernel takes every product).
    pub tiles: Option<&'a str>,
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
    // A grid's y extent is at most 65535: a longer prompt's rows in slices.
    for first in (0..m).step_by(65535) {
        let rows = (m - first).min(65535);
        let cfg =
            LaunchConfig { grid_dim: (nblk, rows as u32, 1), block_dim: (32, 1, 1), shared_mem_bytes: 0 };
        let (xs, acts) = (x.slice(first * k..), act.slice(first * p.act_row..));
        let mut launch = func.builder();
        launch.arg(&xs);
        launch.arg(&acts);
        candle_core::builder_arg!(launch, k_i, nblk_i);
        launch.arg(&p.arm);
        // SAFETY: the arguments are the kernel's in order and type; it reads `rows` rows of k
        // values from row `first` and writes their rows·nblk activation blocks, p.act_row bytes
        // a row, from row `first` of `act`.
        unsafe { launch.launch(cfg) }.w()?;
    }

    // SAFETY: uninitialised; either kernel writes each of the m·n outputs once.
    let out = unsafe { dev.alloc::<f32>(m * n) }?;
    let stream = dev.cuda_stream();
    let (wptr, _sync) = w.device_ptr_with_guard(&stream)?;
    let wptr = wptr as u64;
    let (func, cfg) = match p.tiles.filter(|_| m > p.chunk) {
        Some(tiles) => (
            dev.get_or_load_custom_func(tiles, TILES_MODULE, TILES_PTX)?,
            LaunchConfig {
                grid_dim: ((n as u32).div_ceil(TILE_ROWS) * (m as u32).div_ceil(TILE_VECS), 1, 1),
                block_dim: (TILE_THREADS, 1, 1),
                shared_mem_bytes: 0,
            },
        ),
        None => (
            dev.get_or_load_custom_func(p.kernel, MODULE, PTX)?,
            LaunchConfig {
                grid_dim: ((n as u32).div_ceil(ROWS_PER_BLOCK) * m.div_ceil(p.chunk) as u32, 1, 1),
                block_dim: (32, ROWS_PER_BLOCK, 1),
                shared_mem_bytes: 0,
            },
        ),
    };
    let (n_i, units, m_i) = (n as i32, (k / 32) as i32, m as i32);
    let mut launch = func.builder();
    launch.arg(&wptr);
    launch.arg(&act);
    launch.arg(&out);
    candle_core::builder_arg!(launch, n_i, units, row_bytes, m_i);
    // SAFETY: as above (both kernels take the same arguments); the weight holds n rows of
    // row_bytes (its storage, padded by candle), read while `_sync` keeps it ordered on this
    // stream.
    unsafe { launch.launch(cfg) }.w()?;
    Ok((CudaStorage::wrap_cuda_slice(out, dev), Shape::from((m, n))))
}
