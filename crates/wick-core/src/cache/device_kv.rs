//! The paged KV pool's keys and values on a candle device, for the device path
//! (`runtime::device`). The same blocks and block tables as the host pool (`paged.rs`), one
//! tensor per attention layer and side, `[n_blocks · BLOCK_SIZE, n_kv_head, head_dim]` f16
//! (llama.cpp's default cache type): block b holds slots `b·BLOCK_SIZE ..`. Writes copy a
//! sequence's new rows block run by block run; reads gather its slots through an index
//! tensor built from its block table, so any device's `index_select` reads the pages.

use candle_core::{DType, Device, Tensor};

use super::{LayerKind, SeqCache, BLOCK_SIZE};
use crate::error::{Result, WickError};

pub struct DeviceKv {
    /// Per layer: keys and values, or None for a conv layer.
    layers: Vec<Option<(Tensor, Tensor)>>,
    n_blocks: usize,
    device: Device,
}

impl DeviceKv {
    pub fn new(layout: &[LayerKind], n_blocks: usize, device: &Device) -> Result<Self> {
        let layers = layout
            .iter()
            .map(|l| match *l {
                LayerKind::Attention { n_kv_head, head_dim } => {
                    let shape = (n_blocks * BLOCK_SIZE, n_kv_head, head_dim);
                    Ok(Some((
                        Tensor::zeros(shape, DType::F16, device)?,
                        Tensor::zeros(shape, DType::F16, device)?,
                    )))
                }
                LayerKind::Conv { .. } => Ok(None),
            })
            .collect::<Result<_>>()?;
        Ok(Self { layers, n_blocks, device: device.clone() })
    }

    fn layer(&self, layer: usize) -> Result<&(Tensor, Tensor)> {
        self.layers
            .get(layer)
            .and_then(Option::as_ref)
            .ok_or_else(|| WickError::Internal(format!("layer {layer} has no KV storage in this pool")))
    }

    fn check(&self, seq: &SeqCache, end: usize) -> Result<()> {
        if end.div_ceil(BLOCK_SIZE) > seq.blocks.len() {
            return Err(WickError::Internal("kv access past the sequence's reserved blocks".into()));
        }
        if seq.blocks.iter().any(|&b| b as usize >= self.n_blocks) {
            return Err(WickError::Internal("a sequence holds a block outside the KV pool".into()));
        }
        Ok(())
    }

    /// Stores keys and values `[n, n_kv_head, head_dim]` (any float type; rounded to f16) of
    /// positions `pos0..pos0 + n` of `seq` in layer `layer`.
    pub fn write(&self, layer: usize, seq: &SeqCache, pos0: usize, k: &Tensor, v: &Tensor) -> Result<()> {
        let (ck, cv) = self.layer(layer)?;
        let n = k.dim(0)?;
        self.check(seq, pos0 + n)?;
        let (k, v) = (k.to_dtype(DType::F16)?, v.to_dtype(DType::F16)?);
        let mut i = 0;
        while i < n {
            let p = pos0 + i;
            let run = (BLOCK_SIZE - p % BLOCK_SIZE).min(n - i);
            let slot = seq.blocks[p / BLOCK_SIZE] as usize * BLOCK_SIZE + p % BLOCK_SIZE;
            ck.slice_set(&k.narrow(0, i, run)?, 0, slot)?;
            cv.slice_set(&v.narrow(0, i, run)?, 0, slot)?;
            i += run;
        }
        Ok(())
    }

    /// `seq`'s keys and values of positions `0..len` in layer `layer`, `[len, n_kv_head,
    /// head_dim]` f16 each.
    pub fn gather(&self, layer: usize, seq: &SeqCache, len: usize) -> Result<(Tensor, Tensor)> {
        let (ck, cv) = self.layer(layer)?;
        self.check(seq, len)?;
        let slots: Vec<u32> = (0..len)
            .map(|p| seq.blocks[p / BLOCK_SIZE] * BLOCK_SIZE as u32 + (p % BLOCK_SIZE) as u32)
            .collect();
        let idx = Tensor::from_vec(slots, len, &self.device)?;
        Ok((ck.index_select(&idx, 0)?, cv.index_select(&idx, 0)?))
    }
}
