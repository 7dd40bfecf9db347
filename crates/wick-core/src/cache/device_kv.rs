//! The paged KV pool's keys and values on a candle device, for the device path
//! (`runtime::device`). The same blocks and block tables as the host pool (`paged.rs`), one
//! tensor per attention layer and side, `[n_blocks · BLOCK_SIZE, n_kv_head, head_dim]` f16
//! (llama.cpp's default cache type): block b holds slots `b·BLOCK_SIZE ..`. Writes copy a
//! sequence's new rows block run by block run; reads gather its slots through an index
//! tensor built from its block table, so any device's `index_select` reads the pages.
//! A step's one-token sequences (decodes) are written and read together (`DecodeBatch`):
//! one scatter and one gather per layer and side, whatever the batch size.

use std::sync::Mutex;

use candle_core::{DType, Device, Tensor};

use super::{LayerKind, SeqCache, BLOCK_SIZE};
use crate::error::{Result, WickError};

pub struct DeviceKv {
    /// Per layer: keys and values, or None for a conv layer.
    layers: Vec<Option<(Tensor, Tensor)>>,
    n_blocks: usize,
    device: Device,
    /// Bytes of one position's keys in the widest attention layer.
    row_bytes: usize,
}

impl DeviceKv {
    /// Storage for the attention layers of `layout` that run on the device (`here`).
    pub fn new(
        layout: &[LayerKind],
        here: impl Fn(usize) -> bool,
        n_blocks: usize,
        device: &Device,
    ) -> Result<Self> {
        let layers = layout
            .iter()
            .enumerate()
            .map(|(il, l)| match *l {
                LayerKind::Attention { .. } if !here(il) => Ok(None),
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
        let row_bytes = layout
            .iter()
            .enumerate()
            .map(|(il, l)| match *l {
                LayerKind::Attention { n_kv_head, head_dim } if here(il) => n_kv_head * head_dim * 2,
                _ => 0,
            })
            .max()
            .unwrap_or(0);
        Ok(Self { layers, n_blocks, device: device.clone(), row_bytes })
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
            let slot = slot(seq, p) as usize;
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
        let slots: Vec<u32> = (0..len).map(|p| slot(seq, p)).collect();
        let idx = Tensor::from_vec(slots, len, &self.device)?;
        Ok((ck.index_select(&idx, 0)?, cv.index_select(&idx, 0)?))
    }

    /// The slot tables of a step's one-token sequences (`seqs[b]` with its cache length after
    /// the step, blocks reserved), in batches of consecutive sequences that each read at most
    /// `READ_BYTES` of keys per layer. Made once per step; every attention layer reads
    /// through them.
    pub fn decode_batches(&self, seqs: &[(&SeqCache, usize)]) -> Result<Vec<DecodeBatch>> {
        let lens: Vec<usize> = seqs.iter().map(|&(_, len)| len).collect();
        split_reads(&lens, self.row_bytes, READ_BYTES)
            .into_iter()
            .map(|r| self.decode_batch(&seqs[r]))
            .collect()
    }

    fn decode_batch(&self, seqs: &[(&SeqCache, usize)]) -> Result<DecodeBatch> {
        let longest = seqs.iter().map(|&(_, len)| len).max().unwrap_or(0);
        if longest == 0 {
            return Err(WickError::Internal("a decode batch needs one token at least".into()));
        }
        let t_pad = longest.div_ceil(READ_PAD) * READ_PAD;
        let (mut writes, mut reads) =
            (Vec::with_capacity(seqs.len()), Vec::with_capacity(seqs.len() * t_pad));
        for &(seq, len) in seqs {
            self.check(seq, len)?;
            writes.push(slot(seq, len - 1));
            // Past its length a sequence reads its own first slot again: real values, masked.
            reads.extend((0..t_pad).map(|p| slot(seq, if p < len { p } else { 0 })));
        }
        Ok(DecodeBatch {
            lens: seqs.iter().map(|&(_, len)| len).collect(),
            t_pad,
            writes: Tensor::from_vec(writes, seqs.len(), &self.device)?,
            reads: Tensor::from_vec(reads, seqs.len() * t_pad, &self.device)?,
            write_index: Mutex::new(Vec::new()),
            masks: Mutex::new(Vec::new()),
            lens_on_device: std::sync::OnceLock::new(),
        })
    }

    /// Stores the batch's new keys and values `[B, n_kv_head, head_dim]` (rounded to f16) in
    /// layer `layer`.
    pub fn write_decodes(&self, layer: usize, batch: &DecodeBatch, k: &Tensor, v: &Tensor) -> Result<()> {
        let (ck, cv) = self.layer(layer)?;
        let index = memo(&batch.write_index, k.dims().to_vec(), || {
            Ok(batch.writes.reshape((batch.lens.len(), 1, 1))?.broadcast_as(k.shape())?.contiguous()?)
        })?;
        ck.scatter_set(&index, &k.to_dtype(DType::F16)?, 0)?;
        cv.scatter_set(&index, &v.to_dtype(DType::F16)?, 0)?;
        Ok(())
    }

    /// The batch's keys and values in layer `layer`, `[B, t_pad, n_kv_head, head_dim]` f16
    /// each; positions past a sequence's length hold finite values its mask hides.
    pub fn read_decodes(&self, layer: usize, batch: &DecodeBatch) -> Result<(Tensor, Tensor)> {
        let (ck, cv) = self.layer(layer)?;
        let (_, n_kv, hd) = ck.dims3()?;
        let shape = (batch.lens.len(), batch.t_pad, n_kv, hd);
        Ok((
            ck.index_select(&batch.reads, 0)?.reshape(shape)?,
            cv.index_select(&batch.reads, 0)?.reshape(shape)?,
        ))
    }

    /// The slot table of a prompt span of `seq` (positions `pos0..pos0 + len`, its blocks
    /// reserved) for the fused attention: its slots of positions `0..t_pad`, which every query
    /// row reads, and each row's length (its causal one, or the whole span's when `causal` is
    /// off).
    pub fn span_reads(&self, seq: &SeqCache, pos0: usize, len: usize, causal: bool) -> Result<SpanReads> {
        let total = pos0 + len;
        self.check(seq, total)?;
        let t_pad = total.div_ceil(READ_PAD) * READ_PAD;
        let reads: Vec<u32> = (0..t_pad).map(|p| slot(seq, if p < total { p } else { 0 })).collect();
        let lens: Vec<u32> = (0..len).map(|i| if causal { pos0 + i + 1 } else { total } as u32).collect();
        Ok(SpanReads {
            reads: Tensor::from_vec(reads, t_pad, &self.device)?,
            lens: Tensor::from_vec(lens, len, &self.device)?,
            t_pad,
        })
    }

    /// Layer `layer`'s keys and values, `[slots, n_kv_head, head_dim]` f16 each, for a kernel
    /// that reads the pages in place (the fused decode attention, `models::attention`).
    pub fn pages(&self, layer: usize) -> Result<(&Tensor, &Tensor)> {
        self.layer(layer).map(|(k, v)| (k, v))
    }
}

/// The pool slot of position `p` of `seq` (its block table's block, the offset within it).
fn slot(seq: &SeqCache, p: usize) -> u32 {
    seq.blocks[p / BLOCK_SIZE] * BLOCK_SIZE as u32 + (p % BLOCK_SIZE) as u32
}

/// Keys one `DecodeBatch` reads per layer at most (f16 bytes, before their f32 copies): many
/// long sequences decoding at once split into several batches, so the step's transient
/// gathers stay bounded on a small GPU.
const READ_BYTES: usize = 64 << 20;

/// `lens` (cache lengths) cut into runs of consecutive sequences whose padded reads
/// (`run length · longest padded length · row_bytes`) stay within `budget`; one sequence a
/// run at least.
fn split_reads(lens: &[usize], row_bytes: usize, budget: usize) -> Vec<std::ops::Range<usize>> {
    let pad = |len: usize| len.div_ceil(READ_PAD) * READ_PAD;
    let mut runs = Vec::new();
    let mut start = 0;
    while start < lens.len() {
        let (mut end, mut longest) = (start + 1, pad(lens[start]));
        while end < lens.len() {
            let l = longest.max(pad(lens[end]));
            if (end + 1 - start) * l * row_bytes > budget {
                break;
            }
            (end, longest) = (end + 1, l);
        }
        runs.push(start..end);
        start = end;
    }
    runs
}

/// Keys read per sequence of a `DecodeBatch` come in whole multiples of this: the padding then
/// adds only whole chunks of zero probabilities to the softmax's sum and to the probabilities
/// · values product (candle's CPU sums run 32 wide), so a sequence decodes to the same bits in
/// any batch on candle's CPU device.
const READ_PAD: usize = 64;

/// A prompt span's slot table for the fused attention (`DeviceKv::span_reads`).
pub struct SpanReads {
    /// `[t_pad]` u32: the sequence's slots (past its length, its first slot again).
    pub reads: Tensor,
    /// `[len]` u32: positions each query row attends to.
    pub lens: Tensor,
    pub t_pad: usize,
}

/// A step's one-token sequences on the device path, attended as one batch (`DeviceKv::
/// decode_batch`).
pub struct DecodeBatch {
    /// Each sequence's cache length after the step.
    lens: Vec<usize>,
    /// Keys read per sequence: the longest length rounded up to `READ_PAD`.
    t_pad: usize,
    /// `[B]`: the slot of each sequence's new key and value.
    writes: Tensor,
    /// `[B · t_pad]`: sequence b's slots of positions `0..t_pad`.
    reads: Tensor,
    /// `writes` broadcast to a layer's `[B, n_kv_head, head_dim]`, by shape.
    write_index: Mutex<Vec<(Vec<usize>, Tensor)>>,
    /// `mask` by window.
    masks: Mutex<Vec<(Option<usize>, Tensor)>>,
    /// `lens` on the device, for the fused attention (made by its first layer).
    lens_on_device: std::sync::OnceLock<Tensor>,
}

impl DecodeBatch {
    pub fn len(&self) -> usize {
        self.lens.len()
    }
    pub fn is_empty(&self) -> bool {
        self.lens.is_empty()
    }

    /// `[B · t_pad]` u32: sequence b's slots of positions `0..t_pad`.
    pub fn reads(&self) -> &Tensor {
        &self.reads
    }

    pub fn t_pad(&self) -> usize {
        self.t_pad
    }

    /// `[B]` u32 on the batch's device: each sequence's length (made once, for every layer).
    pub fn lens_on_device(&self) -> Result<&Tensor> {
        crate::runtime::kept(&self.lens_on_device, "a decode batch's lengths", || {
            let lens: Vec<u32> = self.lens.iter().map(|&l| l as u32).collect();
            Ok(Tensor::from_vec(lens, self.lens.len(), self.writes.device())?)
        })
    }

    /// `[B, 1, 1, t_pad]` f32: 0 where sequence b's one query sees key j (`j < len`, and within
    /// the last `window` positions when there is one), -∞ elsewhere.
    pub fn mask(&self, window: Option<usize>) -> Result<Tensor> {
        memo(&self.masks, window, || padded_mask(&self.lens, self.t_pad, window, self.writes.device()))
    }
}

/// `[B, 1, 1, t_pad]`: 0 where sequence b's one query may see position p (`p < lens[b]`, and
/// within its last `window` positions when there is one), -∞ elsewhere and on the padding.
pub fn padded_mask(lens: &[usize], t_pad: usize, window: Option<usize>, dev: &Device) -> Result<Tensor> {
    let mut m = vec![f32::NEG_INFINITY; lens.len() * t_pad];
    for (row, &len) in m.chunks_exact_mut(t_pad).zip(lens) {
        // A length past the padding sees all of it (a public fn: no slice panic on bad input).
        let len = len.min(t_pad);
        let from = window.map_or(0, |w| len.saturating_sub(w));
        row[from..len].fill(0.0);
    }
    Ok(Tensor::from_vec(m, (lens.len(), 1, 1, t_pad), dev)?)
}

/// The tensor kept under `key`, made by `make` the first time.
fn memo<K: PartialEq>(
    cache: &Mutex<Vec<(K, Tensor)>>,
    key: K,
    make: impl FnOnce() -> Result<Tensor>,
) -> Result<Tensor> {
    let mut kept =
        cache.lock().map_err(|_| WickError::Internal("a decode batch's table lock was poisoned".into()))?;
    if let Some((_, t)) = kept.iter().find(|(k, _)| *k == key) {
        return Ok(t.clone());
    }
    let t = make()?;
    kept.push((key, t.clone()));
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::split_reads;

    #[test]
    fn decodes_split_into_runs_within_the_read_budget() {
        // 64 padded positions × 100 bytes = 6400 per short sequence.
        assert_eq!(split_reads(&[10, 20, 30], 100, 1 << 20), vec![0..3]);
        assert_eq!(split_reads(&[10, 20, 30], 100, 12_800), vec![0..2, 2..3]);
        // A long one pads the run it joins: 2 × 128 × 100 > 20000.
        assert_eq!(split_reads(&[10, 100, 5], 100, 20_000), vec![0..1, 1..2, 2..3]);
        // One sequence over the budget still makes its own run.
        assert_eq!(split_reads(&[1000], 100, 10), vec![0..1]);
        assert!(split_reads(&[], 100, 10).is_empty());
    }
}
