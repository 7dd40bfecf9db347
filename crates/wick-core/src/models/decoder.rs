//! A pre-norm decoder stack shared by the architectures: each block is
//! `h = x + op(norm(x)); x = h + mlp(norm(h))` where `op` is attention or a short conv.
//! llama is all attention blocks; LFM2 mixes both. The model files only read their
//! hyperparameters and tensor names and build one of these. Gemma 3 adds an embedding scale,
//! norms after the op and the FFN ("sandwich" norms) and a second RoPE for its local layers.

use std::sync::Mutex;

use candle_core::Tensor;

use super::attention::{Attention, BatchPlan};
use super::ffn::Ffn;
use super::layers::{Embedding, Hparams, Linear, RmsNorm, RowPos};
use super::rope::Rope;
use super::shortconv::ShortConv;
use super::{Model, ModelHparams, StepOutput, StepSeq};
use crate::cache::{KvPool, LayerKind, SeqCache};
use crate::error::{Result, WickError};
use crate::runtime::device::Placement;
use crate::runtime::{pool, trace};

pub enum Operator {
    Attention(Attention),
    Conv(ShortConv),
}

pub struct Block {
    pub op_norm: RmsNorm,
    pub op: Operator,
    pub ffn_norm: RmsNorm,
    pub ffn: Ffn,
    /// Gemma 3: RMSNorm of the op's output before the residual add.
    pub post_op_norm: Option<RmsNorm>,
    /// Gemma 3: RMSNorm of the FFN's output before the residual add.
    pub post_ffn_norm: Option<RmsNorm>,
    /// Attention uses `Decoder::rope_local` (Gemma 3 sliding-window layers).
    pub local_rope: bool,
    /// Sliding-window attention span (Gemma 3's local layers); None = full causal.
    pub window: Option<usize>,
}

impl Block {
    pub fn new(op_norm: RmsNorm, op: Operator, ffn_norm: RmsNorm, ffn: Ffn) -> Self {
        Self {
            op_norm,
            op,
            ffn_norm,
            ffn,
            post_op_norm: None,
            post_ffn_norm: None,
            local_rope: false,
            window: None,
        }
    }
}

pub struct Decoder {
    pub info: ModelHparams,
    pub placement: Placement,
    pub embed: Embedding,
    pub blocks: Vec<Block>,
    pub norm: RmsNorm,
    pub head: Linear,
    pub rope: Rope,
    /// RoPE of the blocks marked `local_rope`.
    pub rope_local: Option<Rope>,
    /// Multiplies the token embeddings (Gemma 3: √d, as ggml_scale rounds it).
    pub embed_scale: Option<f32>,
    /// `{arch}.attention.causal` (default true): false for a bidirectional embedding model.
    pub causal: bool,
}

impl Decoder {
    /// What every architecture does after building its blocks: the output head
    /// (`output.weight`, else tied to the token embedding) and the facts the engine reports.
    /// Architecture extras (`rope_local`, `embed_scale`) start unset.
    pub fn assemble(
        hp: &Hparams,
        embed: Embedding,
        blocks: Vec<Block>,
        norm: RmsNorm,
        rope: Rope,
        (d, n_head, n_kv): (usize, usize, &[usize]),
        dev: &Placement,
    ) -> Result<Self> {
        let g = hp.gguf;
        let out = dev.output();
        let (embed, head) = if g.has("output.weight") {
            let head = Linear::load(g, "output", d, embed.n_vocab(), &out)?;
            (embed, head)
        } else if dev.input().exact() != out.exact() {
            // The head on the other side of a split from the embedding: its own copy there.
            let q = g.qtensor("token_embd.weight", &out)?;
            (embed, Linear::from_qtensor(std::sync::Arc::new(q), &out)?)
        } else {
            embed.tie(&out)?
        };
        let causal = g.metadata.opt_bool(&hp.key("attention.causal"))?.unwrap_or(true);
        let mut blocks = blocks;
        for b in &mut blocks {
            match &mut b.op {
                Operator::Attention(a) => a.causal = causal,
                Operator::Conv(c) if !causal && c.l_cache.is_multiple_of(2) => {
                    return Err(WickError::load(format!(
                        "a bidirectional short conv needs an odd window (shortconv.l_cache = {})",
                        c.l_cache
                    )))
                }
                Operator::Conv(c) => c.centred = !causal,
            }
        }
        let info = ModelHparams {
            architecture: hp.arch.into(),
            n_vocab: embed.n_vocab(),
            n_ctx_train: hp.opt_usize("context_length")?.unwrap_or(0),
            n_layer: blocks.len(),
            n_embd: d,
            n_head,
            n_head_kv: n_kv.iter().copied().max().unwrap_or(0),
            n_params: g.param_count(),
        };
        Ok(Self {
            info,
            placement: dev.clone(),
            embed,
            blocks,
            norm,
            head,
            rope,
            rope_local: None,
            embed_scale: None,
            causal,
        })
    }

    /// Shapes default-constructed caches for this model, rejects caches and pools made for a
    /// different one, and reserves KV blocks for every sequence's new tokens.
    fn prepare_caches(&self, batch: &mut [StepSeq<'_>], kv: &mut KvPool) -> Result<()> {
        let layout = self.cache_layout();
        if kv.layout() != layout.as_slice() {
            return Err(WickError::InvalidRequest("the KV pool was made for a different model".into()));
        }
        for s in batch.iter_mut() {
            if s.cache.n_layers() == 0 && s.cache.is_empty() {
                *s.cache = kv.new_seq();
            } else if s.cache.n_layers() != self.blocks.len() {
                return Err(WickError::InvalidRequest(format!(
                    "sequence cache has {} layers, the model has {}",
                    s.cache.n_layers(),
                    self.blocks.len()
                )));
            }
        }
        for s in batch.iter_mut() {
            kv.reserve(s.cache, s.tokens.len())?;
        }
        Ok(())
    }
}

impl Model for Decoder {
    fn info(&self) -> &ModelHparams {
        &self.info
    }

    fn cache_layout(&self) -> Vec<LayerKind> {
        self.blocks
            .iter()
            .map(|b| match &b.op {
                Operator::Attention(a) => {
                    LayerKind::Attention { n_kv_head: a.n_kv_head, head_dim: a.head_dim }
                }
                Operator::Conv(c) => LayerKind::Conv { rows: c.l_cache - 1, width: c.d },
            })
            .collect()
    }

    fn causal(&self) -> bool {
        self.causal
    }

    fn step(&self, batch: &mut [StepSeq<'_>], kv: &mut KvPool) -> Result<StepOutput> {
        // Validate before reserving: a bad token must not leave blocks taken.
        let plan = BatchPlan::new(batch, self.embed.n_vocab(), &self.placement.input())?;
        self.prepare_caches(batch, kv)?;
        let threads = pool::global().threads();
        // Not for a mixture of experts: each thread would stream every expert its share of
        // the tokens selects, where one pass over the batch streams each selected expert once.
        let moe = self.blocks.iter().any(|b| matches!(b.ffn, Ffn::Moe(_)));
        // Each share plans its own rows (LoRA groups included).
        if self.placement.exact() && threads > 1 && !moe && !plan.any_hidden() && row_parallel(batch, threads)
        {
            let logits = self.forward_row_parallel(batch, kv, threads)?;
            return Ok(StepOutput { logits: Some(logits), hidden: Vec::new() });
        }
        trace::span(trace::STEP, self.placement.device(), || self.forward_prepared(batch, kv, plan))
    }
}

/// Whether a step runs row-parallel: only one-token sequences (decodes), at least two per
/// thread. Each thread then takes its share of the sequences through the whole model with
/// single-thread ops, instead of every op splitting its rows' work over the threads: a few
/// hundred fork-joins per step (each ending in an idle wait for the slowest thread, with the
/// serial glue between ops leaving the others idle) become one. The weights stream through
/// every core's cache instead of once, which costs too much with a single row per thread.
/// Each row's arithmetic is the same either way (the kernels are row-independent).
fn row_parallel(batch: &[StepSeq<'_>], threads: usize) -> bool {
    batch.len() >= 2 * threads && batch.iter().all(|s| s.tokens.len() == 1)
}

/// The batch's sequences ordered by their adapters (the sequence at each place; stable, so
/// sequences with the same adapters keep their order); None when that is the batch's order.
fn by_adapters(batch: &[StepSeq<'_>]) -> Option<Vec<usize>> {
    // Most steps run no adapter: nothing to sort.
    if batch.iter().all(|s| s.lora.is_none_or(|m| m.is_empty())) {
        return None;
    }
    let key = |i: usize| -> Vec<(usize, u32)> {
        batch[i].lora.map(|m| m.iter().map(|(a, s)| (a.id, s.to_bits())).collect()).unwrap_or_default()
    };
    let mut order: Vec<usize> = (0..batch.len()).collect();
    order.sort_by_cached_key(|&i| key(i));
    (order.iter().enumerate().any(|(i, &j)| i != j)).then_some(order)
}

/// Reorders `v` in place so that place i holds what was at `order[i]` (a permutation).
fn permute<T>(v: &mut [T], order: &[usize]) {
    for i in 0..v.len() {
        // Where the element first at order[i] is now: places before i were filled by swaps
        // that moved what they held to the place the swap came from.
        let mut j = order[i];
        while j < i {
            j = order[j];
        }
        v.swap(i, j);
    }
}

impl Decoder {
    /// `forward_prepared` on `threads` contiguous shares of the batch at once, one per pool
    /// thread (ops inside a pool task run on that task's thread); logits in batch order.
    /// Sequences with the same LoRA adapters go to one share (the batch reordered for the
    /// step, then put back): each thread then streams its own adapters' weights, not every
    /// adapter of the step, and multiplies them for several rows at once.
    fn forward_row_parallel(&self, batch: &mut [StepSeq<'_>], kv: &KvPool, threads: usize) -> Result<Tensor> {
        let order = by_adapters(batch);
        if let Some(o) = &order {
            permute(batch, o);
        }
        let logits = self.forward_shares(batch, kv, threads);
        let Some(o) = order else { return logits };
        // Where each sequence went: the inverse order puts the batch and its logits back.
        let mut back = vec![0usize; o.len()];
        for (i, &j) in o.iter().enumerate() {
            back[j] = i;
        }
        permute(batch, &back);
        let rows: Vec<u32> = back.iter().map(|&i| i as u32).collect();
        Ok(logits?.index_select(&Tensor::from_vec(rows, o.len(), self.placement.device())?, 0)?)
    }

    /// The row-parallel step over the batch in its order.
    fn forward_shares(&self, batch: &mut [StepSeq<'_>], kv: &KvPool, threads: usize) -> Result<Tensor> {
        let per = batch.len().div_ceil(threads);
        let shares: Vec<Mutex<&mut [StepSeq<'_>]>> = batch.chunks_mut(per).map(Mutex::new).collect();
        let logits: Vec<Mutex<Option<Result<Tensor>>>> = shares.iter().map(|_| Mutex::new(None)).collect();
        pool::run(shares.len(), &|i| {
            let mut share = shares[i].lock().unwrap_or_else(|e| e.into_inner());
            let out = BatchPlan::new(&share, self.embed.n_vocab(), &self.placement)
                .and_then(|plan| self.forward_prepared(&mut share, kv, plan))
                .and_then(|o| {
                    o.logits.ok_or_else(|| WickError::Internal("a row-parallel share gave no logits".into()))
                });
            *logits[i].lock().unwrap_or_else(|e| e.into_inner()) = Some(out);
        });
        let parts = logits
            .into_iter()
            .map(|l| {
                l.into_inner()
                    .unwrap_or_else(|e| e.into_inner())
                    .unwrap_or_else(|| Err(WickError::Internal("a row-parallel share did not run".into())))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Tensor::cat(&parts, 0)?)
    }

    /// `x` (the token embeddings of the step) with the rows the sequences feed as embeddings
    /// (image positions) replaced by those, as llama.cpp takes `batch.embd` for them.
    fn with_input_embeds(&self, x: Tensor, batch: &[StepSeq<'_>], plan: &BatchPlan) -> Result<Tensor> {
        let d = self.info.n_embd;
        let mut v = x.flatten_all()?.to_vec1::<f32>()?;
        for (s, span) in batch.iter().zip(&plan.spans) {
            for e in &s.embeds {
                if e.data.len() != e.rows * d {
                    return Err(WickError::InvalidRequest(format!(
                        "input embeddings of width {} for a model of width {d}",
                        e.data.len() / e.rows.max(1)
                    )));
                }
                let at = (span.start + e.at) * d;
                v[at..at + e.data.len()].copy_from_slice(e.data);
            }
        }
        Ok(Tensor::from_vec(v, x.dims(), x.device())?)
    }

    /// The forward pass of a batch whose caches are prepared (`plan` made from it for the
    /// input's placement).
    fn forward_prepared(
        &self,
        batch: &mut [StepSeq<'_>],
        kv: &KvPool,
        plan: BatchPlan,
    ) -> Result<StepOutput> {
        let mut sides = Sides::new(self, plan, self.placement.layer_on_device(0))?;
        let mut x = self.embed.forward(&sides.now().plan.ids)?;
        if let Some(s) = self.embed_scale {
            x = (x * s as f64)?;
        }
        if batch.iter().any(|s| !s.embeds.is_empty()) {
            x = self.with_input_embeds(x, batch, &sides.now().plan)?;
        }
        let n_blocks = self.blocks.len();
        let mut x = Residual::new(x);
        for (il, b) in self.blocks.iter().enumerate() {
            x = sides.enter(self, batch, self.placement.layer_on_device(il), x)?;
            x = self.block(b, il, x, sides.now(), batch, kv, il + 1 == n_blocks)?;
        }
        if n_blocks == 0 {
            x = Residual::new(x.sum()?.index_select(&sides.now().plan.out_rows, 0)?);
        }
        for s in batch.iter_mut() {
            s.cache.advance(s.tokens.len());
        }
        let x = sides.enter(self, batch, self.placement.head_on_device(), x)?;
        let plan = &sides.now().plan;
        let x = x.normed(&self.norm)?.1;
        if !plan.any_hidden() {
            let logits = self.head.forward_lora(&x, &plan.out_row_pos, plan.deltas_out())?;
            return Ok(StepOutput { logits: Some(logits), hidden: Vec::new() });
        }
        let (mut hidden, mut logit_rows) = (vec![], vec![]);
        for o in &plan.outs {
            match o.hidden {
                true => hidden.push(x.narrow(0, o.at, o.len)?.to_dtype(candle_core::DType::F32)?),
                false => logit_rows.extend((o.at..o.at + o.len).map(|r| r as u32)),
            }
        }
        let logits = match logit_rows.len() {
            0 => None,
            n => {
                let rows = Tensor::from_vec(logit_rows, n, x.device())?;
                let x = x.index_select(&rows, 0)?;
                Some(self.head.forward_lora(&x, &vec![RowPos::SINGLE; n], plan.deltas_logits())?)
            }
        };
        Ok(StepOutput { logits, hidden })
    }

    /// Block `il` on `x`; the last block (`last`) keeps only the read-out rows.
    #[allow(clippy::too_many_arguments)]
    fn block(
        &self,
        b: &Block,
        il: usize,
        x: Residual,
        side: &Side,
        batch: &mut [StepSeq<'_>],
        kv: &KvPool,
        last: bool,
    ) -> Result<Residual> {
        let plan = &side.plan;
        let (x, h) = x.normed(&b.op_norm)?;
        let y = match &b.op {
            Operator::Attention(a) => {
                let caches: Vec<&SeqCache> = batch.iter().map(|s| &*s.cache).collect();
                let (rope, tables) = match (&side.local, b.local_rope, &self.rope_local) {
                    (Some((c, s)), true, Some(r)) => (r, (c, s)),
                    _ => (&self.rope, (&side.cos, &side.sin)),
                };
                a.forward(&h, plan, rope, tables, il, kv, &caches, b.window)?
            }
            Operator::Conv(c) => {
                let mut states =
                    batch.iter_mut().map(|s| s.cache.conv_mut(il)).collect::<Result<Vec<_>>>()?;
                c.forward(&h, plan, il, kv, &mut states)?
            }
        };
        let y = match &b.post_op_norm {
            Some(n) => n.forward(&y)?,
            None => y,
        };
        let mut x = Residual { x, pending: Some(y) };
        let (mut rows, mut lora) = (&plan.rows, plan.deltas());
        if last {
            // Only the last token of each sequence is read out (every token of one that
            // wants hidden states): skip the rest of the last FFN. llama.cpp does the
            // same, so those rows go through its single-row kernels.
            x = Residual::new(x.sum()?.index_select(&plan.out_rows, 0)?);
            (rows, lora) = (&plan.out_row_pos, plan.deltas_out());
        }
        let (x, h) = x.normed(&b.ffn_norm)?;
        let y = b.ffn.forward(&h, rows, lora)?;
        let y = match &b.post_ffn_norm {
            Some(n) => n.forward(&y)?,
            None => y,
        };
        Ok(Residual { x, pending: Some(y) })
    }
}

/// The residual stream between sublayers: `x`, and the last sublayer's output not yet added to
/// it — the next norm adds it (`RmsNorm::forward_sum`: on the device path in the norm's launch).
struct Residual {
    x: Tensor,
    pending: Option<Tensor>,
}

impl Residual {
    fn new(x: Tensor) -> Self {
        Self { x, pending: None }
    }
    /// The stream's value.
    fn sum(self) -> Result<Tensor> {
        Ok(match self.pending {
            Some(y) => (self.x + y)?,
            None => self.x,
        })
    }
    /// The stream's value and its norm by `norm`.
    fn normed(self, norm: &RmsNorm) -> Result<(Tensor, Tensor)> {
        norm.forward_sum(self.x, self.pending)
    }
}

/// A step's plan and RoPE tables for the blocks on one side of a split model (the exact CPU
/// path's, the device path's); a model that is not split has one side.
struct Side {
    plan: BatchPlan,
    cos: Tensor,
    sin: Tensor,
    /// The local layers' tables (Gemma 3).
    local: Option<(Tensor, Tensor)>,
}

impl Side {
    fn new(d: &Decoder, plan: BatchPlan) -> Result<Self> {
        let dev = plan.ids.device().clone();
        let (cos, sin) = d.rope.tables(&plan.positions, &dev)?;
        let local = d.rope_local.as_ref().map(|r| r.tables(&plan.positions, &dev)).transpose()?;
        Ok(Self { plan, cos, sin, local })
    }
}

/// The step's sides: the one its activations are on, and the other once they have been there.
struct Sides {
    now: Side,
    other: Option<Side>,
    on_device: bool,
}

impl Sides {
    fn new(d: &Decoder, plan: BatchPlan, on_device: bool) -> Result<Self> {
        Ok(Self { now: Side::new(d, plan)?, other: None, on_device })
    }
    fn now(&self) -> &Side {
        &self.now
    }
    /// Moves the step, with its activations `x`, to the device path (`on_device`) or the host.
    fn enter(
        &mut self,
        d: &Decoder,
        batch: &[StepSeq<'_>],
        on_device: bool,
        x: Residual,
    ) -> Result<Residual> {
        if on_device == self.on_device {
            return Ok(x);
        }
        let x = x.sum()?;
        let place = d.placement.part(on_device);
        let next = match self.other.take() {
            Some(s) => s,
            None => Side::new(d, BatchPlan::new(batch, d.embed.n_vocab(), &place)?)?,
        };
        self.other = Some(std::mem::replace(&mut self.now, next));
        self.on_device = on_device;
        let x = x.to_device(place.device())?;
        // The exact path computes in f32.
        Ok(Residual::new(if on_device { x } else { x.to_dtype(candle_core::DType::F32)? }))
    }
}

#[cfg(test)]
mod tests {
    use super::permute;

    /// Every permutation of up to 6 places (and some longer ones) lands as asked, and its
    /// inverse puts the places back.
    #[test]
    fn permute_places_each_element_and_its_inverse_restores() {
        fn all(n: usize) -> Vec<Vec<usize>> {
            if n == 0 {
                return vec![vec![]];
            }
            let mut out = vec![];
            for p in all(n - 1) {
                for at in 0..n {
                    let mut q = p.clone();
                    q.insert(at, n - 1);
                    out.push(q);
                }
            }
            out
        }
        let mut orders: Vec<Vec<usize>> = (0..=6).flat_map(all).collect();
        orders.push((0..64).rev().collect());
        orders.push((0..64).map(|i| (i * 37) % 64).collect());
        for order in orders {
            let mut v: Vec<String> = (0..order.len()).map(|i| i.to_string()).collect();
            permute(&mut v, &order);
            assert_eq!(v, order.iter().map(|i| i.to_string()).collect::<Vec<_>>(), "{order:?}");
            let mut back = vec![0; order.len()];
            for (i, &j) in order.iter().enumerate() {
                back[j] = i;
            }
            permute(&mut v, &back);
            assert_eq!(v, (0..order.len()).map(|i| i.to_string()).collect::<Vec<_>>(), "{order:?}");
        }
    }
}
