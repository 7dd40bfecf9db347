//! The launches of `row_ops.cu` (what `kernels::row_ops` runs on CUDA).

use candle_core::cuda_backend::cudarc::driver::{CudaView, LaunchConfig, PushKernelArg};
use candle_core::cuda_backend::{CudaStorage, WrapErr};
use candle_core::Layout;

use crate::kernels::row_ops::row_stride;

const PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/row_ops.ptx"));
/// `WR_NORM_THREADS` and `WR_GLU_THREADS` (row_ops.cuh): the norm's sums follow the first.
const NORM_THREADS: u32 = 128;
const GLU_THREADS: u32 = 256;
/// `WR_ROPE_THREADS`: a warp per head's row.
const ROPE_THREADS: u32 = 128;

/// `x` (+ `add`), contiguous f32 rows of `w`'s width → their norms times `w`; with an add, the
/// sums first and then the norms (`[2, ..x]`).
pub fn rms_norm(
    (x, xl): (&CudaStorage, &Layout),
    add: Option<(&CudaStorage, &Layout)>,
    (w, wl): (&CudaStorage, &Layout),
    eps: f32,
) -> candle_core::Result<CudaStorage> {
    let n = wl.shape().elem_count();
    let count = xl.shape().elem_count();
    let contiguous = xl.is_contiguous() && wl.is_contiguous() && add.is_none_or(|(_, l)| l.is_contiguous());
    if n == 0 || !count.is_multiple_of(n) || !contiguous || add.is_some_and(|(_, l)| l.shape() != xl.shape())
    {
        candle_core::bail!(
            "rms_norm: x {:?}, weight {:?} (contiguous rows of the weight's width)",
            xl.shape(),
            wl.shape()
        )
    }
    let rows = count / n;
    if rows == 0 || rows > i32::MAX as usize {
        candle_core::bail!("rms_norm: {rows} rows (one block a row)")
    }
    let dev = x.device.clone();
    let x = x.as_cuda_slice::<f32>()?.slice(xl.start_offset()..xl.start_offset() + count);
    let w = w.as_cuda_slice::<f32>()?.slice(wl.start_offset()..wl.start_offset() + n);
    // SAFETY: uninitialised; the kernel writes every sum (with an add) and every norm.
    let out = unsafe { dev.alloc::<f32>(if add.is_some() { 2 * count } else { count }) }?;
    let func = dev.get_or_load_custom_func("wick_rms_norm", "wick_row_ops", PTX)?;
    let cfg =
        LaunchConfig { grid_dim: (rows as u32, 1, 1), block_dim: (NORM_THREADS, 1, 1), shared_mem_bytes: 0 };
    let add = match add {
        Some((a, al)) => Some(a.as_cuda_slice::<f32>()?.slice(al.start_offset()..al.start_offset() + count)),
        None => None,
    };
    // The sums (written only with an add) first, then the norms.
    let (sums, norms) = (out.slice(..), out.slice(if add.is_some() { count } else { 0 }..));
    let (n_i, null) = (n as i32, 0u64);
    let mut launch = func.builder();
    launch.arg(&x);
    match &add {
        Some(a) => launch.arg(a),
        None => launch.arg(&null),
    };
    launch.arg(&w);
    launch.arg(&sums);
    launch.arg(&norms);
    candle_core::builder_arg!(launch, n_i, eps);
    // SAFETY: the arguments are the kernel's in order and type (a null add: no sums written);
    // it reads `rows` rows of n from x (and add) and n weights, and writes rows·n sums (with an
    // add) and rows·n norms after them, inside `out`.
    unsafe { launch.launch(cfg) }.w()?;
    Ok(CudaStorage::wrap_cuda_slice(out, dev))
}

/// `silu(g)·u` over `[m, n]` views whose rows are runs of adjacent values → `[m, n]`.
pub fn swiglu(g: (&CudaStorage, &Layout), u: (&CudaStorage, &Layout)) -> candle_core::Result<CudaStorage> {
    glu("wick_swiglu", g, u, None)
}

/// Gemma's `gelu(g)·u` by ggml's f16 table (65536 contiguous f16), rows as `swiglu`'s.
pub fn geglu(
    g: (&CudaStorage, &Layout),
    u: (&CudaStorage, &Layout),
    (t, tl): (&CudaStorage, &Layout),
) -> candle_core::Result<CudaStorage> {
    if !tl.is_contiguous() || tl.shape().elem_count() != 1 << 16 {
        candle_core::bail!("geglu: the table must be 65536 contiguous f16 values")
    }
    let table = t.as_cuda_slice::<half::f16>()?.slice(tl.start_offset()..tl.start_offset() + (1 << 16));
    glu("wick_geglu", g, u, Some(table))
}

/// The gated units' launch: `kernel` over the rows of `g` and `u` (with the GELU table).
fn glu(
    kernel: &str,
    (g, gl): (&CudaStorage, &Layout),
    (u, ul): (&CudaStorage, &Layout),
    table: Option<CudaView<'_, half::f16>>,
) -> candle_core::Result<CudaStorage> {
    let (m, n) = gl.shape().dims2()?;
    let (Some(gs), Some(us)) = (row_stride(gl), row_stride(ul)) else {
        candle_core::bail!("{kernel}: operands must be rows of adjacent values")
    };
    if ul.shape() != gl.shape() {
        candle_core::bail!("{kernel}: gate {:?}, up {:?}", gl.shape(), ul.shape())
    }
    let total = m * n;
    let dev = g.device.clone();
    let span = |stride: usize| m.saturating_sub(1) * stride + n;
    let g = g.as_cuda_slice::<f32>()?.slice(gl.start_offset()..gl.start_offset() + span(gs));
    let u = u.as_cuda_slice::<f32>()?.slice(ul.start_offset()..ul.start_offset() + span(us));
    // SAFETY: uninitialised; the kernel writes all m·n outputs.
    let out = unsafe { dev.alloc::<f32>(total.max(1)) }?;
    if total == 0 {
        return Ok(CudaStorage::wrap_cuda_slice(out, dev));
    }
    let blocks = total.div_ceil(GLU_THREADS as usize);
    if u32::try_from(blocks).is_err() {
        candle_core::bail!("{kernel}: {total} values exceed a grid")
    }
    let func = dev.get_or_load_custom_func(kernel, "wick_row_ops", PTX)?;
    let cfg =
        LaunchConfig { grid_dim: (blocks as u32, 1, 1), block_dim: (GLU_THREADS, 1, 1), shared_mem_bytes: 0 };
    let (total_i, n_i, gs_i, us_i) = (total as i64, n as i32, gs as i64, us as i64);
    let mut launch = func.builder();
    launch.arg(&g);
    launch.arg(&u);
    if let Some(t) = &table {
        launch.arg(t);
    }
    launch.arg(&out);
    candle_core::builder_arg!(launch, total_i, n_i, gs_i, us_i);
    // SAFETY: the arguments are the kernel's in order and type (the table for wick_geglu
    // alone); it reads m rows of n, gs and us apart, inside the slices above (and table
    // entries by f16 bits, all 65536 there), and writes m·n outputs.
    unsafe { launch.launch(cfg) }.w()?;
    Ok(CudaStorage::wrap_cuda_slice(out, dev))
}

/// `x` `[n, heads, hd]` (contiguous f32): each head's row normed by `w` `[hd]` when given, then
/// rotated by its token's `cos`/`sin` rows (hd/2 values each) → `[n, heads, hd]`.
pub fn norm_rope(
    (x, xl): (&CudaStorage, &Layout),
    w: Option<(&CudaStorage, &Layout)>,
    (cos, cl): (&CudaStorage, &Layout),
    (sin, sl): (&CudaStorage, &Layout),
    eps: f32,
    interleaved: bool,
) -> candle_core::Result<CudaStorage> {
    let (n, heads, hd) = xl.shape().dims3()?;
    let (rows, half) = (n * heads, hd / 2);
    let contiguous =
        [xl, cl, sl].iter().all(|l| l.is_contiguous()) && w.is_none_or(|(_, l)| l.is_contiguous());
    let tables = cl.shape().elem_count() == n * half && sl.shape().elem_count() == n * half;
    if !contiguous || !tables || hd % 2 != 0 || w.is_some_and(|(_, l)| l.shape().elem_count() != hd) {
        candle_core::bail!("norm_rope: x {:?}, tables {:?} and {:?}", xl.shape(), cl.shape(), sl.shape())
    }
    let dev = x.device.clone();
    // SAFETY: uninitialised; the kernel writes every value of every row.
    let out = unsafe { dev.alloc::<f32>((rows * hd).max(1)) }?;
    if rows == 0 {
        return Ok(CudaStorage::wrap_cuda_slice(out, dev));
    }
    let warps = ROPE_THREADS as usize / 32;
    let blocks = rows.div_ceil(warps);
    if rows * hd > i32::MAX as usize || u32::try_from(blocks).is_err() {
        candle_core::bail!("norm_rope: {rows} rows of {hd} exceed the kernel's indices")
    }
    let x = x.as_cuda_slice::<f32>()?.slice(xl.start_offset()..xl.start_offset() + rows * hd);
    let cos = cos.as_cuda_slice::<f32>()?.slice(cl.start_offset()..cl.start_offset() + n * half);
    let sin = sin.as_cuda_slice::<f32>()?.slice(sl.start_offset()..sl.start_offset() + n * half);
    let w = match w {
        Some((w, wl)) => Some(w.as_cuda_slice::<f32>()?.slice(wl.start_offset()..wl.start_offset() + hd)),
        None => None,
    };
    let func = dev.get_or_load_custom_func("wick_norm_rope", "wick_row_ops", PTX)?;
    let cfg = LaunchConfig {
        grid_dim: (blocks as u32, 1, 1),
        block_dim: (ROPE_THREADS, 1, 1),
        shared_mem_bytes: 0,
    };
    let (rows_i, heads_i, hd_i, inter, null) =
        (rows as i32, heads as i32, hd as i32, interleaved as i32, 0u64);
    let mut launch = func.builder();
    launch.arg(&x);
    match &w {
        Some(w) => launch.arg(w),
        None => launch.arg(&null),
    };
    launch.arg(&cos);
    launch.arg(&sin);
    launch.arg(&out);
    candle_core::builder_arg!(launch, rows_i, heads_i, hd_i, eps, inter);
    // SAFETY: the arguments are the kernel's in order and type (a null w: no norm); it reads
    // rows·hd values of x, hd/2 table values per token and hd weights, and writes rows·hd.
    unsafe { launch.launch(cfg) }.w()?;
    Ok(CudaStorage::wrap_cuda_slice(out, dev))
}
