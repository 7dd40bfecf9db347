//! A pre-norm decoder stack shared by the architectures: each block is
//! `h = x + op(norm(x)); x = h + mlp(norm(h))` where `op` is attention or a short conv.
//! llama is all attention blocks; LFM2 mixes both. The model files only read their
//! hyperparameters and tensor names and build one of these.

use candle_core::{Device, Tensor};

use super::attention::{Attention, BatchPlan};
use super::layers::{Embedding, Linear, Mlp, RmsNorm, Rope};
use super::shortconv::ShortConv;
use super::{Model, ModelInfo, StepSeq};
use crate::cache::{ConvState, KvCache, LayerCache, SeqCache};
use crate::error::{Result, WickError};

pub enum Operator {
    Attention(Attention),
    Conv(ShortConv),
}

pub struct Block {
    pub op_norm: RmsNorm,
    pub op: Operator,
    pub ffn_norm: RmsNorm,
    pub mlp: Mlp,
}

pub struct Decoder {
    pub info: ModelInfo,
    pub device: Device,
    pub embed: Embedding,
    pub blocks: Vec<Block>,
    pub norm: RmsNorm,
    pub head: Linear,
    pub rope: Rope,
}

impl Decoder {
    /// Gives an empty default-constructed cache this model's layers; rejects a cache made by
    /// a different model.
    fn prepare_caches(&self, batch: &mut [StepSeq<'_>]) -> Result<()> {
        for s in batch.iter_mut() {
            if s.cache.n_layers() == 0 && s.cache.is_empty() {
                *s.cache = self.new_cache();
            } else if s.cache.n_layers() != self.blocks.len() {
                return Err(WickError::InvalidRequest(format!(
                    "sequence cache has {} layers, the model has {}",
                    s.cache.n_layers(),
                    self.blocks.len()
                )));
            }
        }
        Ok(())
    }
}

impl Model for Decoder {
    fn info(&self) -> &ModelInfo {
        &self.info
    }

    fn new_cache(&self) -> SeqCache {
        let layers = self
            .blocks
            .iter()
            .map(|b| match &b.op {
                Operator::Attention(a) => LayerCache::Attention(KvCache::new(a.n_kv_head, a.head_dim)),
                Operator::Conv(c) => LayerCache::Conv(ConvState::new(c.l_cache - 1, c.d)),
            })
            .collect();
        SeqCache::new(layers)
    }

    fn forward(&self, batch: &mut [StepSeq<'_>]) -> Result<Tensor> {
        self.prepare_caches(batch)?;
        let plan = BatchPlan::new(batch, self.embed.n_vocab(), &self.device)?;
        let (cos, sin) = self.rope.tables(&plan.positions, &self.device)?;
        let mut x = self.embed.forward(&plan.ids)?;
        let n_blocks = self.blocks.len();
        for (il, b) in self.blocks.iter().enumerate() {
            let h = b.op_norm.forward(&x)?;
            let y = match &b.op {
                Operator::Attention(a) => {
                    let mut kvs = batch.iter_mut().map(|s| s.cache.kv_mut(il)).collect::<Result<Vec<_>>>()?;
                    a.forward(&h, &plan, &self.rope, (&cos, &sin), &mut kvs)?
                }
                Operator::Conv(c) => {
                    let mut states = batch.iter_mut().map(|s| s.cache.conv_mut(il)).collect::<Result<Vec<_>>>()?;
                    c.forward(&h, &plan, &mut states)?
                }
            };
            x = (x + y)?;
            let mut rows = &plan.rows;
            if il + 1 == n_blocks {
                // Only the last token of each sequence is read out: skip the rest of the
                // last FFN. llama.cpp does the same, so those rows go through its
                // single-row kernels.
                x = x.index_select(&plan.last_rows, 0)?;
                rows = &plan.last_row_pos;
            }
            let h = b.ffn_norm.forward(&x)?;
            x = (x + b.mlp.forward(&h, rows)?)?;
        }
        if n_blocks == 0 {
            x = x.index_select(&plan.last_rows, 0)?;
        }
        for s in batch.iter_mut() {
            s.cache.advance(s.tokens.len());
        }
        self.head.forward(&self.norm.forward(&x)?, &plan.last_row_pos)
    }
}
