//! Per-sequence cache state: attention KV (f16, as llama.cpp's default cache type) and
//! short-conv state (f32, as llama.cpp's recurrent state). One `SeqCache` per sequence; a
//! paged KV pool shared by all sequences will replace the per-sequence buffers later.

use candle_core::{DType, Device, Tensor};

use crate::error::{Result, WickError};

/// Smallest KV capacity allocated, in tokens; later growth doubles, so appending one token
/// at a time costs amortised O(1) copies instead of a full copy every step.
const MIN_KV_CAPACITY: usize = 64;

/// What a layer keeps between steps, by layer kind.
pub enum LayerCache {
    Attention(KvCache),
    Conv(ConvState),
}

/// A sequence's state across all layers, plus how many tokens it has seen.
#[derive(Default)]
pub struct SeqCache {
    len: usize,
    layers: Vec<LayerCache>,
}

impl SeqCache {
    pub fn new(layers: Vec<LayerCache>) -> Self {
        Self { len: 0, layers }
    }
    /// Tokens processed so far; the next token's position.
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Drops all state so the sequence starts over (positions from 0, zero conv state).
    pub fn clear(&mut self) {
        self.len = 0;
        for l in &mut self.layers {
            match l {
                LayerCache::Attention(kv) => kv.len = 0,
                LayerCache::Conv(c) => c.state = None,
            }
        }
    }
    pub fn n_layers(&self) -> usize {
        self.layers.len()
    }
    /// Called by a model once all layers have consumed `n` new tokens.
    pub(crate) fn advance(&mut self, n: usize) {
        self.len += n;
    }
    pub(crate) fn kv_mut(&mut self, layer: usize) -> Result<&mut KvCache> {
        match self.layers.get_mut(layer) {
            Some(LayerCache::Attention(kv)) => Ok(kv),
            _ => Err(WickError::Internal(format!("layer {layer} has no KV cache in this sequence"))),
        }
    }
    pub(crate) fn conv_mut(&mut self, layer: usize) -> Result<&mut ConvState> {
        match self.layers.get_mut(layer) {
            Some(LayerCache::Conv(c)) => Ok(c),
            _ => Err(WickError::Internal(format!("layer {layer} has no conv state in this sequence"))),
        }
    }
    /// Bytes held by this sequence's buffers (allocated capacity, not just the used part).
    pub fn size_in_bytes(&self) -> usize {
        self.layers
            .iter()
            .map(|l| match l {
                LayerCache::Attention(kv) => kv.capacity * kv.n_kv_head * kv.head_dim * 2 * 2,
                LayerCache::Conv(c) => c.state.as_ref().map_or(0, |s| s.elem_count() * 4),
            })
            .sum()
    }
}

/// Keys and values of one attention layer, `[n_kv_head, capacity, head_dim]` f16 each;
/// positions `0..len` are valid. Cached keys are post-norm, post-RoPE.
pub struct KvCache {
    k: Option<Tensor>,
    v: Option<Tensor>,
    len: usize,
    capacity: usize,
    n_kv_head: usize,
    head_dim: usize,
}

impl KvCache {
    pub fn new(n_kv_head: usize, head_dim: usize) -> Self {
        Self { k: None, v: None, len: 0, capacity: 0, n_kv_head, head_dim }
    }

    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Appends `k`, `v` of shape `[n_kv_head, n_new, head_dim]` (any float dtype; rounded to
    /// f16 here) and returns the whole cache so far as f16 views `[n_kv_head, len, head_dim]`.
    pub fn append(&mut self, k: &Tensor, v: &Tensor) -> Result<(Tensor, Tensor)> {
        let (h, n_new, d) = k.dims3()?;
        if (h, d) != (self.n_kv_head, self.head_dim) || v.dims3()? != (h, n_new, d) {
            return Err(WickError::Internal(format!(
                "kv append: got k {:?} v {:?}, cache holds {} heads of {}",
                k.dims(),
                v.dims(),
                self.n_kv_head,
                self.head_dim
            )));
        }
        let needed = self.len + n_new;
        if needed > self.capacity || self.k.is_none() {
            self.grow(needed, k.device())?;
        }
        let (kc, vc) = match (&self.k, &self.v) {
            (Some(k), Some(v)) => (k, v),
            _ => return Err(WickError::Internal("kv cache not allocated".into())),
        };
        kc.slice_set(&k.to_dtype(DType::F16)?.contiguous()?, 1, self.len)?;
        vc.slice_set(&v.to_dtype(DType::F16)?.contiguous()?, 1, self.len)?;
        self.len = needed;
        Ok((kc.narrow(1, 0, needed)?, vc.narrow(1, 0, needed)?))
    }

    fn grow(&mut self, needed: usize, device: &Device) -> Result<()> {
        let cap = needed.max(self.capacity * 2).max(MIN_KV_CAPACITY);
        let shape = (self.n_kv_head, cap, self.head_dim);
        let nk = Tensor::zeros(shape, DType::F16, device)?;
        let nv = Tensor::zeros(shape, DType::F16, device)?;
        if let (Some(k), Some(v)) = (&self.k, &self.v) {
            if self.len > 0 {
                nk.slice_set(&k.narrow(1, 0, self.len)?.contiguous()?, 1, 0)?;
                nv.slice_set(&v.narrow(1, 0, self.len)?.contiguous()?, 1, 0)?;
            }
        }
        self.k = Some(nk);
        self.v = Some(nv);
        self.capacity = cap;
        Ok(())
    }
}

/// The last `L-1` conv inputs of one short-conv layer, `[L-1, d]` f32; `None` means zeros
/// (a fresh sequence), so the state is only allocated once the sequence runs.
pub struct ConvState {
    pub(crate) state: Option<Tensor>,
    pub(crate) rows: usize,
    pub(crate) width: usize,
}

impl ConvState {
    pub fn new(rows: usize, width: usize) -> Self {
        Self { state: None, rows, width }
    }
    /// The current state, zeros if none yet.
    pub fn get(&self, device: &Device) -> Result<Tensor> {
        match &self.state {
            Some(s) => Ok(s.clone()),
            None => Ok(Tensor::zeros((self.rows, self.width), DType::F32, device)?),
        }
    }
    pub fn set(&mut self, state: Tensor) -> Result<()> {
        if state.dims() != [self.rows, self.width] {
            return Err(WickError::Internal(format!(
                "conv state shape {:?}, expected [{}, {}]",
                state.dims(),
                self.rows,
                self.width
            )));
        }
        self.state = Some(state);
        Ok(())
    }
}
