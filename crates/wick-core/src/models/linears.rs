//! Linear layers that read the same input, run as one product where the path allows: packed
//! CPU weights concatenated (the exact path), quantized weights stacked (the device path).

use std::borrow::Cow;
use std::sync::Arc;

use candle_core::quantized::{GgmlDType, QMatMul, QStorage, QTensor};
use candle_core::Tensor;

use super::layers::{candle_quantized, deltas_then_bias, device_qmatmul, Linear, RowPos, WeightDeltas};
use super::packs::packed_parts;
use crate::error::Result;
use crate::gguf::GgufFile;
use crate::kernels::{with_host_f32, PackedWeight};
use crate::runtime::device::Placement;

/// Linear layers that read the same input (Q, K and V; gate and up). Packed CPU weights of
/// one type run as one concatenated weight (`PackedWeight::concat`): the input is quantized
/// once and the pool makes one pass for all of them; each output is what its own layer gives.
pub enum Linears {
    Fused {
        w: PackedWeight,
        biases: Vec<Option<Tensor>>,
        names: Vec<Option<Arc<str>>>,
    },
    /// On the device path, quantized weights of one type stacked row after row into one
    /// (`Linears::load_stacked`): one launch quantizes the input and one multiplies, where each
    /// weight apart takes both; each output is a column range of the product.
    Stacked {
        w: QMatMul,
        widths: Vec<usize>,
        biases: Vec<Option<Tensor>>,
        names: Vec<Option<Arc<str>>>,
    },
    Apart(Vec<Linear>),
}

impl Linears {
    /// `layers`: (GGUF name without `.weight`, output width), all with input width `n_in`.
    pub fn load(g: &GgufFile, layers: &[(String, usize)], n_in: usize, dev: &Placement) -> Result<Self> {
        let parts: Vec<String> = layers.iter().map(|(name, _)| format!("{name}.weight")).collect();
        let widths: Vec<usize> = layers.iter().map(|l| l.1).collect();
        if let Some(w) = packed_parts(g, &parts, &widths, n_in, dev)? {
            let bias = |(name, n): &(String, usize)| Linear::load_bias(g, name, *n, dev);
            let names = parts.iter().map(|n| Some(n.as_str().into())).collect();
            return Ok(Self::Fused { w, biases: layers.iter().map(bias).collect::<Result<_>>()?, names });
        }
        let each = layers.iter().map(|(name, n)| Linear::load(g, name, n_in, *n, dev));
        Ok(Self::Apart(each.collect::<Result<Vec<_>>>()?))
    }

    /// `load`, with the device path's weights stacked into one product when they are of one
    /// quantized type that candle's kernels take. Only for outputs read element by element (gate
    /// and up): a column range of the product is a strided view, which a reshape would copy.
    pub fn load_stacked(
        g: &GgufFile,
        layers: &[(String, usize)],
        n_in: usize,
        dev: &Placement,
    ) -> Result<Self> {
        let parts: Vec<String> = layers.iter().map(|(name, _)| format!("{name}.weight")).collect();
        let Some(dtype) = stackable(g, &parts, dev) else { return Self::load(g, layers, n_in, dev) };
        let mut bytes = vec![];
        for (part, (_, n)) in parts.iter().zip(layers) {
            g.expect_dims(part, &[n_in, *n])?;
            bytes.extend_from_slice(g.bytes(part)?);
        }
        let widths: Vec<usize> = layers.iter().map(|l| l.1).collect();
        let rows = widths.iter().sum::<usize>();
        let q = QTensor::new(QStorage::from_data(Cow::Owned(bytes), dev.device(), dtype)?, (rows, n_in))?;
        let bias = |(name, n): &(String, usize)| Linear::load_bias(g, name, *n, dev);
        Ok(Self::Stacked {
            w: QMatMul::from_arc(Arc::new(q))?,
            widths,
            biases: layers.iter().map(bias).collect::<Result<_>>()?,
            names: parts.iter().map(|n| Some(n.as_str().into())).collect(),
        })
    }

    /// Each layer's `[n, out]` for `x`: `[n, in]` (see `Linear::forward_lora`).
    pub fn forward(
        &self,
        x: &Tensor,
        rows: &[RowPos],
        lora: Option<&dyn WeightDeltas>,
    ) -> Result<Vec<Tensor>> {
        match self {
            Self::Apart(ls) => ls.iter().map(|l| l.forward_lora(x, rows, lora)).collect(),
            Self::Stacked { w, widths, biases, names } => {
                let x = x.contiguous()?;
                let y = device_qmatmul(w, &x)?;
                let mut at = 0;
                widths
                    .iter()
                    .zip(biases)
                    .zip(names)
                    .map(|((&n, b), name)| {
                        let part = y.narrow(1, at, n)?;
                        at += n;
                        let lora = lora.zip(name.as_deref());
                        // The additions index rows of a whole tensor; the bias broadcasts over a view.
                        let part = if lora.is_some() { part.contiguous()? } else { part };
                        deltas_then_bias(lora, &x, part, b.as_ref())
                    })
                    .collect()
            }
            Self::Fused { w, biases, names } => {
                let x = x.contiguous()?;
                // Each part with its additions applied on the host where they are (and whether).
                let parts = with_host_f32(&x, |xs| -> Result<Vec<(Vec<f32>, bool)>> {
                    let parts = w.matmul_parts(xs, rows)?;
                    parts
                        .into_iter()
                        .zip(names)
                        .map(|(mut y, name)| {
                            let added = match (lora, name) {
                                (Some(l), Some(name)) => l.add_in_place(name, xs, &mut y)?,
                                _ => false,
                            };
                            Ok((y, added))
                        })
                        .collect()
                })??;
                parts
                    .into_iter()
                    .zip(biases)
                    .zip(names)
                    .map(|(((y, added), b), name)| {
                        let n = y.len() / rows.len().max(1);
                        let y = Tensor::from_vec(y, (rows.len(), n), x.device())?;
                        deltas_then_bias(lora.zip(name.as_deref()).filter(|_| !added), &x, y, b.as_ref())
                    })
                    .collect()
            }
        }
    }
}

/// The one quantized type of `parts` when the device path can stack them: a type candle's
/// quantized kernels take there (`device_weight`'s `Weight::Candle`).
fn stackable(g: &GgufFile, parts: &[String], dev: &Placement) -> Option<GgmlDType> {
    let dtype = g.info(parts.first()?)?.dtype;
    let same = parts.iter().all(|p| g.info(p).is_some_and(|i| i.dtype == dtype));
    (!dev.exact() && candle_quantized(dtype, dev.is_cpu()) && same).then_some(dtype)
}
