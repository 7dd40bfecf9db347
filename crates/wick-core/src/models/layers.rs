//! Building blocks shared by the model files: quantized linear layers, RMSNorm, SwiGLU MLP,
//! the token embedding, and RoPE tables. Numerics follow llama.cpp's CPU backend.

use std::borrow::Cow;
use std::sync::Arc;

use candle_core::quantized::{GgmlDType, QMatMul, QStorage, QTensor};
use candle_core::{DType, Module, Tensor};

use crate::error::{Result, WickError};
use crate::gguf::GgufFile;
use crate::kernels::cpu::elementwise::rms_norm;
use crate::kernels::cpu::{host_f16, matmul};
use crate::kernels::{qmatvec, row_ops};
use crate::kernels::{with_host_f32, PackedWeight};
use crate::runtime::device::Placement;
use crate::runtime::trace;

use super::packs::{cached, cached_pack};

/// Width, depth, heads, KV heads per layer, FFN width and norm ε of a llama-style stack.
pub struct DenseShape {
    pub d: usize,
    pub n_layer: usize,
    pub n_head: usize,
    pub n_kv: Vec<usize>,
    pub ff: usize,
    pub eps: f32,
}

/// `{arch}.{key}` metadata lookups for one architecture.
pub struct Hparams<'a> {
    pub gguf: &'a GgufFile,
    pub arch: &'a str,
}

impl Hparams<'_> {
    pub fn key(&self, k: &str) -> String {
        format!("{}.{k}", self.arch)
    }
    pub fn usize(&self, k: &str) -> Result<usize> {
        self.gguf.metadata.usize(&self.key(k))
    }
    pub fn opt_usize(&self, k: &str) -> Result<Option<usize>> {
        self.gguf.metadata.opt_usize(&self.key(k))
    }
    pub fn opt_f32(&self, k: &str) -> Result<Option<f32>> {
        self.gguf.metadata.opt_f32(&self.key(k))
    }
    pub fn opt_str(&self, k: &str) -> Result<Option<&str>> {
        self.gguf.metadata.opt_str(&self.key(k))
    }
    /// `block_count`, checked before anything is sized by it: every layer has tensors, so a
    /// count above the file's tensor count is corrupt (and must not allocate per-layer tables).
    pub fn layers(&self) -> Result<usize> {
        let n = self.usize("block_count")?;
        if n == 0 || n > self.gguf.tensor_count() {
            return Err(WickError::load(format!(
                "{} is {n}, but the file has {} tensors",
                self.key("block_count"),
                self.gguf.tensor_count()
            )));
        }
        Ok(n)
    }
    /// The shape llama-style stacks (llama, qwen, gemma3) read from the same keys.
    pub fn dense_shape(&self) -> Result<DenseShape> {
        let n_layer = self.layers()?;
        let n_head = self.usize("attention.head_count")?;
        Ok(DenseShape {
            d: self.usize("embedding_length")?,
            n_layer,
            n_head,
            n_kv: self.head_count_kv(n_layer, n_head)?,
            ff: self.usize("feed_forward_length")?,
            eps: self.gguf.metadata.f32(&self.key("attention.layer_norm_rms_epsilon"))?,
        })
    }
    /// KV heads per layer: a scalar or a per-layer array; `head_count` (no GQA) when absent.
    pub fn head_count_kv(&self, n_layer: usize, n_head: usize) -> Result<Vec<usize>> {
        let key = self.key("attention.head_count_kv");
        match self.gguf.metadata.get(&key) {
            Some(_) => self.gguf.metadata.per_layer_usize(&key, n_layer),
            None => Ok(vec![n_head; n_layer]),
        }
    }
}

/// A weight ready for matmul. On the exact CPU path, types with a packed kernel are repacked at
/// load (`kernels::cpu::repack`); the other types `matmul::supported` lists use its row-dot
/// matmul (rounds as llama.cpp does); other quantized types stay `QTensor`s so candle converts
/// activations to the weight's dot-product type (q8_K, ...) as ggml does; f32 weights become
/// plain tensors. On the device path every weight is a candle `QMatMul` (`device_weight`).
enum Weight {
    Candle(QMatMul),
    /// Device path, a half-precision weight (`dtype` F16 or BF16): inputs rounded to `dtype`
    /// as ggml rounds them for such a weight, products summed in f32. On a GPU the weight
    /// stays half (cuBLAS sums half GEMMs in f32); on candle's CPU device it is widened to
    /// f32, since that device's half GEMM sums in half precision.
    Half {
        w: Tensor,
        dtype: DType,
    },
    Ggml(Arc<QTensor>),
    /// Shared with a tied embedding, which looks its rows up in the panels.
    Packed(Arc<PackedWeight>),
    /// A small F16 weight held on the host in its own layout: LoRA adapters, whose matmuls
    /// are too small for candle's tensor path per call.
    HostF16(host_f16::HostF16),
}

fn weight(w: Arc<QTensor>, dev: &Placement) -> Result<Weight> {
    if !dev.exact() {
        return device_weight(w);
    }
    let n_out = w.shape().dims().first().copied().unwrap_or(0);
    if let Some(p) = PackedWeight::pack(&w)? {
        return Ok(Weight::Packed(Arc::new(p)));
    }
    Ok(match w.dtype() {
        dt if matmul::supported(dt, n_out) => Weight::Ggml(w),
        GgmlDType::F32 => Weight::Candle(QMatMul::from_arc(w)?),
        _ => Weight::Candle(QMatMul::QTensor(w)),
    })
}

/// The device path's weight: a candle `QMatMul` on the weight's device, multiplied by
/// `device_qmatmul` (Wick's kernel, or candle's CUDA and Metal kernels, which run every GGUF
/// quant type). Half-precision weights stay half (f16 activations, as ggml converts them for an
/// f16 weight) instead of doubling their memory as f32.
///
/// One exception, on candle's CPU device when Wick's kernel does not take the product there
/// (`candle_quantized`): candle's CPU q8_1 activation blocks (for Q4_1 and Q5_1 weights) round
/// the block sum through f16 twice where ggml rounds once, a 1e-3 relative error that moves
/// SmolLM2's greedy text. Then those types take Wick's row dots, which take tensors on that
/// device as well.
fn device_weight(w: Arc<QTensor>) -> Result<Weight> {
    if QMatMulPath::get() == QMatMulPath::Dmmv {
        #[cfg(feature = "cuda")]
        candle_core::quantized::cuda::set_force_dmmv(true);
    }
    let dt = w.dtype();
    if dt == GgmlDType::F32 || candle_quantized(dt, w.device().is_cpu()) {
        return Ok(Weight::Candle(QMatMul::from_arc(w)?));
    }
    let dtype = match dt {
        GgmlDType::F16 => DType::F16,
        GgmlDType::BF16 => DType::BF16,
        _ => return Ok(Weight::Ggml(w)),
    };
    let dev = w.device();
    let t = w.dequantize(&dev)?;
    let t = if dev.is_cpu() { t } else { t.to_dtype(dtype)? };
    Ok(Weight::Half { w: t, dtype })
}

/// Whether the device path keeps a weight of `dtype` as a candle `QMatMul` (the half-precision
/// types are dequantized instead, and Q4_1/Q5_1 on candle's CPU device take Wick's row dots
/// unless Wick's kernel takes them there: `device_weight`).
pub(super) fn candle_quantized(dtype: GgmlDType, on_cpu: bool) -> bool {
    match dtype {
        GgmlDType::F32 | GgmlDType::F16 | GgmlDType::BF16 => false,
        GgmlDType::Q4_1 | GgmlDType::Q5_1 => {
            !on_cpu
                || (matches!(QMatMulPath::get(), QMatMulPath::Wick | QMatMulPath::WickVec)
                    && qmatvec::available(dtype, &candle_core::Device::Cpu))
        }
        _ => true,
    }
}

/// How the device path multiplies by a quantized weight. `WICK_DEVICE_QMATMUL` picks one, as a
/// check (tests/device_kernels.rs compares them against the CPU on a GPU):
/// - `wick` (the default): Wick's own kernels at every row count (`kernels::qmatvec`: the
///   activations rounded as the exact path rounds them, each row's result independent of the
///   others; a warp per weight row up to 8 rows, int8 tensor-core tiles above, to the same
///   bits; on candle's CPU device their host twin); types they do not take (Q2_K, Q3_K) and
///   builds without them (the twin is built for Linux only) take candle's choice;
/// - `wick-vec`: Wick's vector kernel at every row count (the tiles' A/B);
/// - `candle`: candle's choice — on CUDA ggml's MMVQ kernels up to 8 rows and MMQ above, both
///   on q8_1 activations as llama.cpp's CUDA backend runs them (MMVQ parted from the exact path
///   by 2e-3–8e-3 on the H200: it rounds each activation block's sum through f16, and rounds
///   K-quant activations in blocks of 32 where ggml's CPU takes q8_K); on candle's CPU device
///   its q8 kernels;
/// - `f16`: above 8 rows the weight dequantized to f16 for a GEMM (cuBLAS on CUDA), as
///   llama.cpp does without MMQ;
/// - `dmmv`: candle's older CUDA kernels (dequantize-and-dot, f32 GEMM above one row);
/// - `mmq`: candle's MMQ kernels at every row count, a product of up to 8 rows padded with
///   zero rows to 9.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QMatMulPath {
    Wick,
    WickVec,
    Candle,
    F16,
    Dmmv,
    Mmq,
}

impl QMatMulPath {
    /// Rows up to which candle's vector kernels take the product.
    pub const VECTOR_ROWS: usize = 8;

    pub fn get() -> Self {
        static PATH: std::sync::OnceLock<QMatMulPath> = std::sync::OnceLock::new();
        *PATH.get_or_init(|| match std::env::var("WICK_DEVICE_QMATMUL").as_deref() {
            Ok("wick-vec") => Self::WickVec,
            Ok("candle") => Self::Candle,
            Ok("f16") => Self::F16,
            Ok("dmmv") => Self::Dmmv,
            Ok("mmq") => Self::Mmq,
            _ => Self::Wick,
        })
    }
}

/// `x · wᵀ` for a quantized weight on the device path, by `QMatMulPath` (the same choice on
/// candle's CPU device, so that the check device runs the GPU's graph).
pub(super) fn device_qmatmul(w: &QMatMul, x: &Tensor) -> Result<Tensor> {
    let part = match x.dim(0)? > QMatMulPath::VECTOR_ROWS {
        true => "quantized products, > 8 rows",
        false => "quantized products, ≤ 8 rows",
    };
    trace::span(part, x.device(), || qmatmul_by_path(w, x))
}

fn qmatmul_by_path(w: &QMatMul, x: &Tensor) -> Result<Tensor> {
    let m = x.dim(0)?;
    let gemm = m > QMatMulPath::VECTOR_ROWS;
    Ok(match (w, QMatMulPath::get()) {
        (QMatMul::QTensor(q), path @ (QMatMulPath::Wick | QMatMulPath::WickVec))
            if x.rank() == 2 && qmatvec::available(q.dtype(), x.device()) =>
        {
            let kernel =
                if path == QMatMulPath::Wick { qmatvec::Kernel::Tiles } else { qmatvec::Kernel::Vector };
            return qmatvec::qmatvec(q, x, kernel);
        }
        (QMatMul::QTensor(_), QMatMulPath::F16) if gemm => w.forward_via_f16(x)?,
        (QMatMul::QTensor(_), QMatMulPath::Mmq) if !gemm => {
            w.forward(&pad_rows(x, QMatMulPath::VECTOR_ROWS + 1)?)?.narrow(0, 0, m)?
        }
        _ => w.forward(x)?,
    })
}

/// `x` (`[m, k]`) with zero rows after it up to `rows`.
fn pad_rows(x: &Tensor, rows: usize) -> Result<Tensor> {
    let (m, k) = x.dims2()?;
    let pad = Tensor::zeros((rows.saturating_sub(m), k), x.dtype(), x.device())?;
    Ok(Tensor::cat(&[x, &pad], 0)?)
}

/// GGUF weight `name` of dims `{n_in, n_out}`: on the exact path packed straight from the
/// mapped file when a panel kernel takes its type (no candle copy first), else as `weight`
/// makes it.
fn gguf_weight(g: &GgufFile, name: &str, n_in: usize, n_out: usize, dev: &Placement) -> Result<Weight> {
    g.expect_dims(name, &[n_in, n_out])?;
    if let (true, Some(info)) = (dev.exact(), g.info(name)) {
        let pack = || PackedWeight::pack_raw(g.bytes(name)?, info.dtype, n_out, n_in);
        if let Some(p) = cached_pack(dev, name, pack)? {
            return Ok(Weight::Packed(Arc::new(p)));
        }
    }
    weight(Arc::new(g.qtensor(name, dev)?), dev)
}

pub use crate::kernels::RowPos;

/// Additions to linear layers' outputs, by weight name, for the rows of a step: the LoRA
/// adapters (`lora::LoraRows`).
pub trait WeightDeltas {
    /// `y` (`W·x` of weight `name`, before its bias) with the additions for `name`.
    fn add(&self, name: &str, x: &Tensor, y: Tensor) -> Result<Tensor>;

    /// `add` on host rows in place (`xs`: `[m, in]`, `y`: `[m, out]`), where a weight's product
    /// is a host vector before it becomes a tensor: no copy of `y`. False, with `y`
    /// untouched, when the additions are not on the host (then `add`).
    fn add_in_place(&self, name: &str, xs: &[f32], y: &mut [f32]) -> Result<bool>;
}

/// `y = x Wᵀ (+ b)`: a GGUF weight of ggml dims `{in, out}` with an optional bias `{out}`.
pub struct Linear {
    w: Weight,
    bias: Option<Tensor>,
    /// The weight's GGUF name, which LoRA adapters name their targets by.
    name: Option<Arc<str>>,
}

impl Linear {
    pub fn load(g: &GgufFile, name: &str, n_in: usize, n_out: usize, dev: &Placement) -> Result<Self> {
        let weight_name = format!("{name}.weight");
        let w = gguf_weight(g, &weight_name, n_in, n_out, dev)?;
        let bias = Self::load_bias(g, name, n_out, dev)?;
        Ok(Self { w, bias, name: Some(weight_name.into()) })
    }

    /// `{name}.bias` of dims `{n_out}`, when the file has one.
    pub(super) fn load_bias(
        g: &GgufFile,
        name: &str,
        n_out: usize,
        dev: &Placement,
    ) -> Result<Option<Tensor>> {
        let bias_name = format!("{name}.bias");
        if !g.has(&bias_name) {
            return Ok(None);
        }
        g.expect_dims(&bias_name, &[n_out])?;
        Ok(Some(g.f32_tensor(&bias_name, dev)?))
    }

    /// GGUF tensor `name` (the whole name) as a weight of dims `{n_in, n_out}`, no bias; an
    /// F16 one kept as f16 on the host on the exact path (small weights: LoRA adapters).
    pub fn load_weight(g: &GgufFile, name: &str, n_in: usize, n_out: usize, dev: &Placement) -> Result<Self> {
        let f16 = g.info(name).is_some_and(|t| t.dtype == GgmlDType::F16);
        if f16 && dev.exact() {
            g.expect_dims(name, &[n_in, n_out])?;
            let w = g.f32_tensor(name, dev)?.flatten_all()?.to_vec1::<f32>()?;
            let w = w.into_iter().map(half::f16::from_f32).collect(); // f16 values: exact
            let w = Weight::HostF16(host_f16::HostF16::new(w, n_out, n_in)?);
            return Ok(Self { w, bias: None, name: None });
        }
        Ok(Self { w: gguf_weight(g, name, n_in, n_out, dev)?, bias: None, name: None })
    }

    /// The weight, when it is an F16 one kept on the host (`load_weight`).
    pub fn host_f16(&self) -> Option<&host_f16::HostF16> {
        match &self.w {
            Weight::HostF16(w) => Some(w),
            _ => None,
        }
    }

    /// `host_f16`, to move.
    pub fn host_f16_mut(&mut self) -> Option<&mut host_f16::HostF16> {
        match &mut self.w {
            Weight::HostF16(w) => Some(w),
            _ => None,
        }
    }

    pub fn from_qtensor(w: Arc<QTensor>, dev: &Placement) -> Result<Self> {
        Ok(Self { w: weight(w, dev)?, bias: None, name: None })
    }

    /// `x`: `[n, in]` f32 → `[n, out]` f32; `rows[i]` says where row i sits in its sequence's
    /// part of the step (it picks llama.cpp's single- or multi-row kernel for that row).
    pub fn forward(&self, x: &Tensor, rows: &[RowPos]) -> Result<Tensor> {
        self.forward_lora(x, rows, None)
    }

    /// `forward` with the step's LoRA adapters added on their rows before the bias, as
    /// llama.cpp's `build_lora_mm` adds them.
    pub fn forward_lora(
        &self,
        x: &Tensor,
        rows: &[RowPos],
        lora: Option<&dyn WeightDeltas>,
    ) -> Result<Tensor> {
        let x = x.contiguous()?;
        let lora = lora.zip(self.name.as_deref());
        let mut added = false;
        let y = match &self.w {
            Weight::Candle(w) => device_qmatmul(w, &x)?,
            Weight::Half { w, dtype } => trace::span("float products", x.device(), || {
                let xh = x.to_dtype(*dtype)?;
                Ok(match w.dtype() {
                    DType::F32 => xh.to_dtype(DType::F32)?.matmul(&w.t()?)?,
                    _ => xh.matmul(&w.t()?)?.to_dtype(DType::F32)?,
                })
            })?,
            Weight::Ggml(w) => trace::span("host products", x.device(), || matmul::matmul(&x, w, rows))?,
            Weight::HostF16(w) => trace::span("host products", x.device(), || w.matmul(&x, rows))?,
            Weight::Packed(w) => {
                let y = with_host_f32(&x, |xs| -> Result<Vec<f32>> {
                    let mut y = w.matmul(xs, rows)?;
                    if let Some((l, name)) = lora {
                        added = l.add_in_place(name, xs, &mut y)?;
                    }
                    Ok(y)
                })??;
                Tensor::from_vec(y, (rows.len(), w.dims().0), x.device())?
            }
        };
        deltas_then_bias(lora.filter(|_| !added), &x, y, self.bias.as_ref())
    }
}

/// `y` (a weight's product with `x`) with the step's additions for that weight (`lora`: the
/// deltas and the weight's name; None when there are none, or they were added on the host),
/// then its bias — llama.cpp's order.
pub(super) fn deltas_then_bias(
    lora: Option<(&dyn WeightDeltas, &str)>,
    x: &Tensor,
    y: Tensor,
    bias: Option<&Tensor>,
) -> Result<Tensor> {
    let y = match lora {
        Some((l, name)) => l.add(name, x, y)?,
        None => y,
    };
    Ok(match bias {
        Some(b) => y.broadcast_add(b)?,
        None => y,
    })
}

/// RMSNorm over the last dim, in f32: `w ⊙ x / sqrt(mean(x²) + ε)`; Wick's kernel on the exact
/// path, its device op (`row_ops`, the same arithmetic) or candle-nn's on the device path.
pub struct RmsNorm {
    w: Tensor,
    eps: f32,
    exact: bool,
}

impl RmsNorm {
    pub fn load(g: &GgufFile, name: &str, dim: usize, eps: f32, dev: &Placement) -> Result<Self> {
        g.expect_dims(name, &[dim])?;
        Ok(Self { w: g.f32_tensor(name, dev)?.to_dtype(DType::F32)?, eps, exact: dev.exact() })
    }
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        if self.exact {
            return rms_norm(x, &self.w, self.eps);
        }
        // One launch per norm: Wick's in ggml's CPU arithmetic where it is built (`row_ops`),
        // else candle-nn's (f32 sums, as llama.cpp's Metal kernel).
        trace::span("norms", x.device(), || match row_ops::available(x.device()) {
            true => row_ops::rms_norm(x, &self.w, self.eps),
            false => Ok(candle_nn::ops::rms_norm(&x.contiguous()?, &self.w, self.eps)?),
        })
    }
    /// The weight and ε, for an op that folds the norm in.
    pub fn weights(&self) -> (&Tensor, f32) {
        (&self.w, self.eps)
    }
    /// `(x + y, norm(x + y))` (`x` and its norm without a `y`): on the device path with Wick's
    /// row ops the add and the norm are one launch (`row_ops::add_rms_norm`, the same sum).
    pub fn forward_sum(&self, x: Tensor, y: Option<Tensor>) -> Result<(Tensor, Tensor)> {
        match y {
            Some(y) if !self.exact && row_ops::available(x.device()) => {
                trace::span("norms", x.device(), || row_ops::add_rms_norm(&x, &y, &self.w, self.eps))
            }
            Some(y) => {
                let sum = (x + y)?;
                let normed = self.forward(&sum)?;
                Ok((sum, normed))
            }
            None => {
                let normed = self.forward(&x)?;
                Ok((x, normed))
            }
        }
    }
}

/// The token embedding, kept quantized; rows are dequantized on lookup (ggml `get_rows`).
pub struct Embedding {
    table: Table,
    n_vocab: usize,
    d: usize,
    /// The table's GGUF name (a tied head's name in the pack cache).
    name: String,
}

enum Table {
    Quant(Arc<QTensor>),
    /// Tied to a packed output head: rows are unpacked from its panels, so the model holds
    /// the table once (74 MB of a 128k-vocabulary Q4_0 LFM2-350M).
    Panels(Arc<PackedWeight>),
}

impl Embedding {
    pub fn load(g: &GgufFile, name: &str, d: usize, dev: &Placement) -> Result<Self> {
        let info = g.info(name).ok_or_else(|| WickError::load(format!("missing tensor `{name}`")))?;
        if info.dims.len() != 2 || info.dims[0] != d {
            return Err(WickError::load(format!(
                "tensor `{name}` has dims {:?}, expected [{d}, n_vocab]",
                info.dims
            )));
        }
        let n_vocab = info.dims[1];
        // Saved as a tied head by an earlier load: its panels hold the same rows, and no copy
        // of the table is made.
        let table = match cached(dev, name).filter(|p| p.dims() == (n_vocab, d)) {
            Some(p) => Table::Panels(Arc::new(p)),
            None => Table::Quant(Arc::new(g.qtensor(name, dev)?)),
        };
        Ok(Self { table, n_vocab, d, name: name.to_string() })
    }
    pub fn n_vocab(&self) -> usize {
        self.n_vocab
    }
    /// The same weights as the output head too (tied embeddings); when they pack (exact
    /// path), the lookups read the head's panels from then on.
    pub fn tie(self, dev: &Placement) -> Result<(Self, Linear)> {
        let packed = match &self.table {
            Table::Quant(q) => match dev
                .exact()
                .then(|| cached_pack(dev, &self.name, || PackedWeight::pack(q)))
                .transpose()?
                .flatten()
            {
                Some(p) => Arc::new(p),
                None => {
                    let head = Linear::from_qtensor(q.clone(), dev)?;
                    return Ok((self, head));
                }
            },
            Table::Panels(p) => p.clone(),
        };
        // Tied: llama.cpp's head is the embedding tensor, which adapters cannot target.
        let head = Linear { w: Weight::Packed(packed.clone()), bias: None, name: None };
        Ok((Self { table: Table::Panels(packed), ..self }, head))
    }
    /// `ids`: `[n]` u32 → `[n, d]` f32.
    pub fn forward(&self, ids: &Tensor) -> Result<Tensor> {
        match &self.table {
            Table::Quant(q) => Ok(q.embedding(ids)?),
            Table::Panels(p) => {
                let list = ids.flatten_all()?.to_dtype(DType::U32)?.to_vec1::<u32>()?;
                if let Some(bad) = list.iter().find(|&&i| i as usize >= self.n_vocab) {
                    return Err(WickError::Internal(format!(
                        "token id {bad} is past the vocabulary ({})",
                        self.n_vocab
                    )));
                }
                // The unpacked blocks dequantized as candle's lookup does (the same `to_float`).
                let (raw, dtype) = p.rows_raw(&list)?;
                let dev = ids.device();
                let rows =
                    QTensor::new(QStorage::from_data(Cow::Owned(raw), dev, dtype)?, (list.len(), self.d))?;
                let mut shape = ids.dims().to_vec();
                shape.push(self.d);
                Ok(rows.dequantize(dev)?.reshape(shape)?)
            }
        }
    }
}
