//! What sequences keep between steps. Attention KV lives in one paged pool shared by all
//! sequences (`KvPool`: fixed-size token blocks, per-sequence block tables, a prefix cache of
//! full blocks); short-conv state (LFM2) is one small slot per sequence (`ConvState`), with
//! snapshots at block boundaries in the pool so a reused prefix restores it exactly.

mod blocks;
mod device_kv;
mod kv_type;
mod paged;
mod view;

pub use blocks::{chain_hash, BlockId, BlockPool};
pub(crate) use device_kv::DeviceKv;
pub use device_kv::{padded_mask, DecodeBatch, SpanReads};
pub use kv_type::{q8_0_inverse_scale, KvType, KvTypes, QBLOCK};
pub use paged::{KvPool, KvWrite, BLOCK_SIZE};
pub use view::PagedView;

use candle_core::{DType, Device, Tensor};

use crate::error::{Result, WickError};

/// The shape of one layer's state, as a model reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayerKind {
    Attention { n_kv_head: usize, head_dim: usize },
    Conv { rows: usize, width: usize },
}

/// Bytes of KV cache one token takes in the pool across the layers of `layout`: a key and a
/// value row per KV head of each attention layer, as `types` stores them. Conv layers hold
/// no per-token KV.
pub fn kv_bytes_per_token(layout: &[LayerKind], types: KvTypes) -> usize {
    layout
        .iter()
        .map(|l| match *l {
            LayerKind::Attention { n_kv_head, head_dim } => types.token_bytes(n_kv_head, head_dim),
            LayerKind::Conv { .. } => 0,
        })
        .sum()
}

/// A sequence's state: how many tokens it has seen, its KV block table, and per conv layer
/// its current conv state.
#[derive(Default)]
pub struct SeqCache {
    len: usize,
    blocks: Vec<BlockId>,
    /// Leading full blocks already entered in the prefix cache, and the hash chain up to them.
    registered: usize,
    chain: u64,
    layers: Vec<Option<ConvState>>,
}

impl SeqCache {
    pub fn new(layout: &[LayerKind]) -> Self {
        let layers = layout
            .iter()
            .map(|l| match *l {
                LayerKind::Conv { rows, width } => Some(ConvState::new(rows, width)),
                LayerKind::Attention { .. } => None,
            })
            .collect();
        Self { layers, ..Self::default() }
    }
    /// Tokens processed so far; the next token's position.
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    pub fn n_layers(&self) -> usize {
        self.layers.len()
    }
    /// The KV blocks holding positions `0..len` (and room after), in position order.
    pub fn blocks(&self) -> &[BlockId] {
        &self.blocks
    }
    /// Called by a model once all layers have consumed `n` new tokens.
    pub(crate) fn advance(&mut self, n: usize) {
        self.len += n;
    }
    /// Rewinds to the first `len` tokens, within the last step (a verified decode whose later
    /// drafts were rejected): the conv states return to where they were after position
    /// `len - 1`. Keys and values past `len` are left to be overwritten.
    pub(crate) fn rewind(&mut self, len: usize) -> Result<()> {
        if len > self.len {
            return Err(WickError::Internal(format!("rewind to {len} past the cache's {} tokens", self.len)));
        }
        if len < self.len {
            for state in self.layers.iter_mut().flatten() {
                state.rewind(len)?;
            }
        }
        for state in self.layers.iter_mut().flatten() {
            state.steps = None;
        }
        self.len = len;
        Ok(())
    }
    /// Where the sequence is now, to come back to with `KvPool::restore` after later steps.
    /// The conv states are shared, not copied: a step replaces a state, never changes it.
    pub fn checkpoint(&self) -> Checkpoint {
        let convs = self.layers.iter().map(|l| l.as_ref().and_then(|c| c.state.clone())).collect();
        Checkpoint { len: self.len, convs }
    }
    /// The conv state of `layer` together with the block table (for boundary snapshots).
    pub(crate) fn conv_mut(&mut self, layer: usize) -> Result<(&mut ConvState, &[BlockId])> {
        match self.layers.get_mut(layer) {
            Some(Some(c)) => Ok((c, &self.blocks)),
            _ => Err(WickError::Internal(format!("layer {layer} has no conv state in this sequence"))),
        }
    }
}

/// A sequence's length and conv states at one point (`SeqCache::checkpoint`).
#[derive(Clone)]
pub struct Checkpoint {
    len: usize,
    convs: Vec<Option<Tensor>>,
}

impl Checkpoint {
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// The last `L-1` conv inputs of one short-conv layer, `[L-1, d]` f32; `None` means zeros
/// (a fresh sequence), so the state is only allocated once the sequence runs.
pub struct ConvState {
    pub(crate) state: Option<Tensor>,
    pub(crate) rows: usize,
    pub(crate) width: usize,
    /// After a verified decode (`StepSeq::verify`): its first position, and the inputs before
    /// it followed by its own (`[rows + len, width]` on the host), so `rewind` can return to
    /// any of its positions.
    steps: Option<(usize, Vec<f32>)>,
}

impl ConvState {
    pub fn new(rows: usize, width: usize) -> Self {
        Self { state: None, rows, width, steps: None }
    }
    /// Keeps a verified step's inputs (see `steps`), after `set` put the state after it.
    pub(crate) fn keep_steps(&mut self, pos0: usize, inputs: Vec<f32>) {
        self.steps = Some((pos0, inputs));
    }
    /// The state after position `len - 1`, from the kept inputs of the last step.
    fn rewind(&mut self, len: usize) -> Result<()> {
        let (rows, width) = (self.rows, self.width);
        let Some((pos0, inputs)) = self.steps.as_ref() else {
            return Err(WickError::Internal("a conv state rewound without its step's inputs".into()));
        };
        let kept = len.checked_sub(*pos0).filter(|k| (k + rows) * width <= inputs.len());
        let Some(kept) = kept else {
            return Err(WickError::Internal(format!("a conv state rewound to {len}, outside its last step")));
        };
        let s = inputs[kept * width..(kept + rows) * width].to_vec();
        let device = match &self.state {
            Some(t) => t.device().clone(),
            None => Device::Cpu,
        };
        self.state = Some(Tensor::from_vec(s, (rows, width), &device)?);
        Ok(())
    }
    /// The current state, zeros if none yet.
    pub fn get(&self, device: &Device) -> Result<Tensor> {
        match &self.state {
            Some(s) => Ok(s.clone()),
            None => Ok(Tensor::zeros((self.rows, self.width), DType::F32, device)?),
        }
    }
    /// Back to a state `SeqCache::checkpoint` kept (None: zeros).
    fn restore(&mut self, state: Option<Tensor>) {
        self.state = state;
        self.steps = None;
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
        self.steps = None;
        Ok(())
    }
}
