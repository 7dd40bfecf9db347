//! Per-sequence cache state: attention KV (f16, as llama.cpp's default cache type) and
//! short-conv state (f32, as llama.cpp's recurrent state). One `SeqCache` per sequence; a
//! paged KV pool shared by all sequences will replace the per-sequence buffers later.

use candle_core::{DType, Device, Tensor};
use half::f16;

use crate::error::{Result, WickError};

/// Smallest device KV capacity, in tokens; later growth doubles, so appending one token at a
/// time costs amortised O(1) copies instead of a full copy every step.
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
                LayerCache::Attention(kv) => kv.clear(),
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
                LayerCache::Attention(kv) => kv.capacity_bytes(),
                LayerCache::Conv(c) => c.state.as_ref().map_or(0, |s| s.elem_count() * 4),
            })
            .sum()
    }
}

/// A host KV cache borrowed for attention: keys `[head][t·hd + d]`, values transposed
/// `[head·hd + d][t]`, all f16.
pub struct HostKv<'a> {
    pub k: &'a [Vec<f16>],
    pub v: &'a [Vec<f16>],
}

/// Keys and values of one attention layer for one sequence; cached keys are post-norm,
/// post-RoPE. On the CPU they live in host vectors (keys `[head][t·hd + d]`, values
/// transposed `[head·hd + d][t]`, as llama.cpp's `v_trans` cache) that grow by amortised
/// doubling; on other devices in `[head, capacity, hd]` tensors.
pub struct KvCache {
    len: usize,
    n_kv_head: usize,
    head_dim: usize,
    store: KvStore,
}

enum KvStore {
    Empty,
    Host { k: Vec<Vec<f16>>, v: Vec<Vec<f16>> },
    Device { k: Tensor, v: Tensor, capacity: usize },
}

impl KvCache {
    pub fn new(n_kv_head: usize, head_dim: usize) -> Self {
        Self { len: 0, n_kv_head, head_dim, store: KvStore::Empty }
    }

    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    pub fn n_kv_head(&self) -> usize {
        self.n_kv_head
    }
    pub fn head_dim(&self) -> usize {
        self.head_dim
    }

    fn clear(&mut self) {
        self.len = 0;
        if let KvStore::Host { k, v } = &mut self.store {
            k.iter_mut().chain(v.iter_mut()).for_each(Vec::clear);
        }
    }

    fn capacity_bytes(&self) -> usize {
        match &self.store {
            KvStore::Empty => 0,
            KvStore::Host { k, v } => k.iter().chain(v).map(|x| x.capacity() * 2).sum(),
            KvStore::Device { capacity, .. } => capacity * self.n_kv_head * self.head_dim * 2 * 2,
        }
    }

    /// Appends `k`, `v` of shape `[n_kv_head, n_new, head_dim]` (any float dtype; rounded to
    /// f16 here).
    pub fn append(&mut self, k: &Tensor, v: &Tensor) -> Result<()> {
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
        if matches!(self.store, KvStore::Empty) && k.device().is_cpu() {
            self.store = KvStore::Host { k: vec![Vec::new(); h], v: vec![Vec::new(); h * d] };
        }
        if let KvStore::Host { k: hk, v: hv } = &mut self.store {
            let kx = k.to_dtype(DType::F16)?.to_vec3::<f16>()?;
            let vx = v.to_dtype(DType::F16)?.to_vec3::<f16>()?;
            for (head, rows) in kx.iter().enumerate() {
                for row in rows {
                    hk[head].extend_from_slice(row);
                }
            }
            for (head, rows) in vx.iter().enumerate() {
                for row in rows {
                    for (dim, &x) in row.iter().enumerate() {
                        hv[head * d + dim].push(x);
                    }
                }
            }
            self.len += n_new;
            return Ok(());
        }
        let needed = self.len + n_new;
        self.grow_device(needed, k.device())?;
        if let KvStore::Device { k: kc, v: vc, .. } = &self.store {
            kc.slice_set(&k.to_dtype(DType::F16)?.contiguous()?, 1, self.len)?;
            vc.slice_set(&v.to_dtype(DType::F16)?.contiguous()?, 1, self.len)?;
        }
        self.len = needed;
        Ok(())
    }

    /// The host vectors (keys per head, transposed values per head·dim), if on the CPU.
    pub fn host(&self) -> Option<HostKv<'_>> {
        match &self.store {
            KvStore::Host { k, v } => Some(HostKv { k, v }),
            _ => None,
        }
    }

    /// Device views `[n_kv_head, len, head_dim]` f16 of the keys and values so far.
    pub fn device_views(&self) -> Result<(Tensor, Tensor)> {
        match &self.store {
            KvStore::Device { k, v, .. } => Ok((k.narrow(1, 0, self.len)?, v.narrow(1, 0, self.len)?)),
            _ => Err(WickError::Internal("kv cache has no device tensors".into())),
        }
    }

    fn grow_device(&mut self, needed: usize, device: &Device) -> Result<()> {
        let old_cap = match &self.store {
            KvStore::Device { capacity, .. } => *capacity,
            _ => 0,
        };
        if needed <= old_cap {
            return Ok(());
        }
        let cap = needed.max(old_cap * 2).max(MIN_KV_CAPACITY);
        let shape = (self.n_kv_head, cap, self.head_dim);
        let nk = Tensor::zeros(shape, DType::F16, device)?;
        let nv = Tensor::zeros(shape, DType::F16, device)?;
        if let KvStore::Device { k, v, .. } = &self.store {
            if self.len > 0 {
                nk.slice_set(&k.narrow(1, 0, self.len)?.contiguous()?, 1, 0)?;
                nv.slice_set(&v.narrow(1, 0, self.len)?.contiguous()?, 1, 0)?;
            }
        }
        self.store = KvStore::Device { k: nk, v: nv, capacity: cap };
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
