//! The ragged batch layout and GQA attention over each sequence's KV cache (causal, or
//! bidirectional for an embedding model).
//! Projections, norms and RoPE run once on all tokens of the step; only the cache append and
//! the attention product itself are per sequence.

use std::sync::{Arc, OnceLock};

use candle_core::{DType, Tensor};

use super::layers::{Linear, RmsNorm, RowPos, WeightDeltas};
use super::linears::Linears;
use super::rope::Rope;
use super::StepSeq;
use crate::cache::{DecodeBatch, DeviceKv, KvPool, KvWrite, SeqCache, SpanReads};
use crate::error::{Result, WickError};
use crate::gguf::GgufFile;
use crate::kernels::{attend_many, decode_attention, rotate_runs, with_host_f32, SeqAttn};
use crate::lora::{LoraMix, LoraRows};
use crate::runtime::device::Placement;
use crate::runtime::{kept, trace};

/// Where one sequence's new tokens sit in the step.
#[derive(Debug, Clone, Copy)]
pub struct SeqSpan {
    /// First row of this sequence in the concatenated `[n_tokens, d]` activations.
    pub start: usize,
    pub len: usize,
    /// Position of the first new token (the cache length before the step).
    pub pos0: usize,
    /// A decode and its drafts (`StepSeq::verify`): each row attends as a one-token step.
    pub verify: bool,
}

/// A sequence's rows of the read-out (`BatchPlan::out_rows`).
#[derive(Debug, Clone, Copy)]
pub struct OutRows {
    /// Where they start in the read-out.
    pub at: usize,
    pub len: usize,
    /// Hidden states, not logits.
    pub hidden: bool,
}

/// The step's tokens concatenated, with per-token positions and per-sequence spans.
pub struct BatchPlan {
    pub spans: Vec<SeqSpan>,
    pub ids: Tensor,
    pub positions: Vec<usize>,
    /// Each row's place in its sequence's part of the step (kernel choice per sequence).
    pub rows: Vec<RowPos>,
    /// The rows the last layer's FFN and the output norm run on: every row of a sequence that
    /// wants hidden states (as llama.cpp outputs every token of an embedding batch), the last
    /// row of the others.
    pub out_rows: Tensor,
    pub out_row_pos: Vec<RowPos>,
    /// Each sequence's part of `out_rows`.
    pub outs: Vec<OutRows>,
    /// The step's LoRA work on all rows, on the read-out rows, and (only beside hidden states,
    /// else those are the read-out rows) on the rows whose logits are taken; None without
    /// adapters.
    pub lora: Option<LoraRows>,
    pub lora_out: Option<LoraRows>,
    pub lora_logits: Option<LoraRows>,
    /// The exact CPU path runs the step (else the device path: `runtime::device`).
    pub exact: bool,
    /// On the device path, the spans of one-token sequences (decodes, not drafts being
    /// verified): their attention and conv steps run as one batch.
    pub decodes: Vec<usize>,
    /// Their cache slots (a batch per run of them, `DeviceKv::decode_batches`), made by the
    /// first attention layer (the blocks are reserved after the plan is made) and read by the
    /// others.
    decode_slots: OnceLock<Vec<DecodeBatch>>,
    /// Their rows of the step's activations, when the step holds other sequences too.
    decode_rows: OnceLock<Tensor>,
    /// The device path's causal masks of the step's other spans, by span and window: made by
    /// the first attention layer that needs one, uploaded once for all of them.
    masks: std::sync::Mutex<Vec<(usize, Option<usize>, Tensor)>>,
    /// The fused attention's slot tables of the step's other spans, by span: made by the first
    /// attention layer, uploaded once for all of them.
    span_reads: std::sync::Mutex<Vec<(usize, Arc<SpanReads>)>>,
}

impl BatchPlan {
    pub fn new(batch: &[StepSeq<'_>], n_vocab: usize, dev: &Placement) -> Result<Self> {
        if batch.is_empty() {
            return Err(WickError::InvalidRequest("empty batch".into()));
        }
        let (mut spans, mut ids, mut positions, mut rows) = (vec![], vec![], vec![], vec![]);
        for s in batch {
            if s.tokens.is_empty() {
                return Err(WickError::InvalidRequest("a sequence in the batch has no tokens".into()));
            }
            // Rows fed as embeddings keep placeholder ids (image positions): look up id 0 there.
            let mut fed = vec![false; s.tokens.len()];
            for e in &s.embeds {
                if e.at + e.rows > s.tokens.len() {
                    return Err(WickError::Internal("input embeddings past the step's tokens".into()));
                }
                fed[e.at..e.at + e.rows].fill(true);
            }
            if let Some((_, &bad)) =
                s.tokens.iter().enumerate().find(|&(i, &t)| !fed[i] && t as usize >= n_vocab)
            {
                return Err(WickError::InvalidRequest(format!(
                    "token id {bad} is out of range for a vocabulary of {n_vocab}"
                )));
            }
            if s.verify && (s.hidden || !s.embeds.is_empty()) {
                return Err(WickError::Internal("drafts are verified on plain token decodes only".into()));
            }
            let span =
                SeqSpan { start: ids.len(), len: s.tokens.len(), pos0: s.cache.len(), verify: s.verify };
            ids.extend(s.tokens.iter().zip(&fed).map(|(&t, &f)| if f { 0 } else { t }));
            positions.extend(span.pos0..span.pos0 + span.len);
            rows.extend((0..span.len).map(|i| match s.verify {
                true => RowPos::SINGLE,
                false => RowPos { seq_len: span.len as u32, idx: i as u32 },
            }));
            spans.push(span);
        }
        let n = ids.len();
        // The read-out rows, and the sequence each belongs to.
        let (mut out, mut out_row_pos, mut out_seq, mut outs) = (vec![], vec![], vec![], vec![]);
        for (si, (s, span)) in batch.iter().zip(&spans).enumerate() {
            let read = match s.hidden || s.verify {
                true => span.start..span.start + span.len,
                false => span.start + span.len - 1..span.start + span.len,
            };
            outs.push(OutRows { at: out.len(), len: read.len(), hidden: s.hidden });
            for r in read {
                out.push(r as u32);
                out_row_pos.push(if s.hidden { rows[r] } else { RowPos::SINGLE });
                out_seq.push(si);
            }
        }
        let any_hidden = batch.iter().any(|s| s.hidden);
        let mixes: Vec<Option<&LoraMix>> = batch.iter().map(|s| s.lora.filter(|m| !m.is_empty())).collect();
        let (lora, lora_out, lora_logits) = match mixes.iter().any(Option::is_some) {
            false => (None, None, None),
            true => {
                let seq_of_row =
                    spans.iter().enumerate().flat_map(|(si, sp)| std::iter::repeat_n(si, sp.len));
                let all: Vec<(usize, RowPos)> = seq_of_row.zip(rows.iter().copied()).collect();
                let read: Vec<(usize, RowPos)> =
                    out_seq.iter().copied().zip(out_row_pos.iter().copied()).collect();
                // The logit rows differ from the read-out rows only beside hidden states.
                let logits: Vec<(usize, RowPos)> = match any_hidden {
                    true => (0..batch.len())
                        .filter(|&si| !batch[si].hidden)
                        .flat_map(|si| std::iter::repeat_n((si, RowPos::SINGLE), outs[si].len))
                        .collect(),
                    false => vec![],
                };
                (
                    LoraRows::new(&all, &mixes, dev)?,
                    LoraRows::new(&read, &mixes, dev)?,
                    LoraRows::new(&logits, &mixes, dev)?,
                )
            }
        };
        let n_out = out.len();
        let decodes = match dev.exact() {
            true => Vec::new(),
            false => (0..spans.len()).filter(|&i| spans[i].len == 1 && !spans[i].verify).collect(),
        };
        Ok(Self {
            spans,
            ids: Tensor::from_vec(ids, n, dev)?,
            positions,
            out_rows: Tensor::from_vec(out, n_out, dev)?,
            out_row_pos,
            outs,
            lora,
            lora_out,
            lora_logits,
            rows,
            exact: dev.exact(),
            decodes,
            decode_slots: OnceLock::new(),
            decode_rows: OnceLock::new(),
            masks: Default::default(),
            span_reads: Default::default(),
        })
    }

    /// `t`'s rows of the one-token sequences (`decodes`), in their order: `t` itself when every
    /// sequence of the step decodes.
    pub fn decode_rows_of(&self, t: &Tensor) -> Result<Tensor> {
        if self.decodes.len() == self.spans.len() {
            return Ok(t.clone());
        }
        let rows = kept(&self.decode_rows, "a step's decode rows", || {
            let at: Vec<u32> = self.decodes.iter().map(|&i| self.spans[i].start as u32).collect();
            Ok(Tensor::from_vec(at, self.decodes.len(), t.device())?)
        })?;
        Ok(t.contiguous()?.index_select(rows, 0)?)
    }

    /// The step's output rows `[n_tokens, ..]` from the decodes' batched rows (`decoded`, in
    /// `decodes` order) and, for every other span in order, `each(span index)`.
    pub fn merge_decodes(
        &self,
        decoded: Option<Tensor>,
        mut each: impl FnMut(usize) -> Result<Tensor>,
    ) -> Result<Tensor> {
        if let (Some(d), true) = (&decoded, self.decodes.len() == self.spans.len()) {
            return Ok(d.clone());
        }
        let mut outs = Vec::with_capacity(self.spans.len());
        let mut next = 0;
        for i in 0..self.spans.len() {
            match (&decoded, self.decodes.get(next) == Some(&i)) {
                (Some(d), true) => {
                    outs.push(d.narrow(0, next, 1)?);
                    next += 1;
                }
                _ => outs.push(each(i)?),
            }
        }
        Ok(Tensor::cat(&outs, 0)?)
    }
    /// Span `i`'s causal mask with `window` (`causal_mask`), made once a step.
    fn causal_mask(&self, i: usize, window: Option<usize>, dev: &candle_core::Device) -> Result<Tensor> {
        let mut masks = self.masks.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, _, m)) = masks.iter().find(|(s, w, _)| *s == i && *w == window) {
            return Ok(m.clone());
        }
        let span = self.spans[i];
        let m = causal_mask(span.pos0, span.len, window, dev)?;
        masks.push((i, window, m.clone()));
        Ok(m)
    }

    /// Span `i`'s slot table for the fused attention (`DeviceKv::span_reads`), made once a step.
    fn span_reads(&self, i: usize, store: &DeviceKv, seq: &SeqCache, causal: bool) -> Result<Arc<SpanReads>> {
        let mut kept = self.span_reads.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, r)) = kept.iter().find(|(s, _)| *s == i) {
            return Ok(r.clone());
        }
        let span = self.spans[i];
        let r = Arc::new(store.span_reads(seq, span.pos0, span.len, causal)?);
        kept.push((i, r.clone()));
        Ok(r)
    }

    pub fn n_tokens(&self) -> usize {
        self.positions.len()
    }

    /// Some sequence of the step wants hidden states.
    pub fn any_hidden(&self) -> bool {
        self.outs.iter().any(|o| o.hidden)
    }

    /// The step's LoRA additions on all rows, on the read-out rows, on the logit rows.
    pub fn deltas(&self) -> Option<&dyn WeightDeltas> {
        self.lora.as_ref().map(|l| l as &dyn WeightDeltas)
    }
    pub fn deltas_out(&self) -> Option<&dyn WeightDeltas> {
        self.lora_out.as_ref().map(|l| l as &dyn WeightDeltas)
    }
    pub fn deltas_logits(&self) -> Option<&dyn WeightDeltas> {
        self.lora_logits.as_ref().map(|l| l as &dyn WeightDeltas)
    }
}

/// Multi-head attention with grouped KV heads, optional per-head Q/K RMSNorm (LFM2), RoPE.
pub struct Attention {
    /// Q, K and V.
    qkv: Linears,
    o: Linear,
    q_norm: Option<RmsNorm>,
    k_norm: Option<RmsNorm>,
    pub n_head: usize,
    pub n_kv_head: usize,
    pub head_dim: usize,
    /// False for a bidirectional model (`{arch}.attention.causal = false`): every token of a
    /// step sees all of it.
    pub causal: bool,
}

impl Attention {
    #[allow(clippy::too_many_arguments)]
    pub fn load(
        g: &GgufFile,
        prefix: &str,
        d: usize,
        n_head: usize,
        n_kv_head: usize,
        head_dim: usize,
        qk_norm_eps: Option<f32>,
        dev: &Placement,
    ) -> Result<Self> {
        if n_kv_head == 0 || !n_head.is_multiple_of(n_kv_head) {
            return Err(WickError::load(format!(
                "{prefix}: {n_head} query heads cannot share {n_kv_head} KV heads"
            )));
        }
        let (q_norm, k_norm) = match qk_norm_eps {
            Some(eps) => (
                Some(RmsNorm::load(g, &format!("{prefix}.attn_q_norm.weight"), head_dim, eps, dev)?),
                Some(RmsNorm::load(g, &format!("{prefix}.attn_k_norm.weight"), head_dim, eps, dev)?),
            ),
            None => (None, None),
        };
        Ok(Self {
            qkv: Linears::load(
                g,
                &[
                    (format!("{prefix}.attn_q"), n_head * head_dim),
                    (format!("{prefix}.attn_k"), n_kv_head * head_dim),
                    (format!("{prefix}.attn_v"), n_kv_head * head_dim),
                ],
                d,
                dev,
            )?,
            o: Linear::load(g, &format!("{prefix}.attn_output"), n_head * head_dim, d, dev)?,
            q_norm,
            k_norm,
            n_head,
            n_kv_head,
            head_dim,
            causal: true,
        })
    }

    /// `x`: normed input `[n_tokens, d]`; `caches[i]` belongs to `plan.spans[i]` and has its
    /// blocks reserved; this is attention layer `layer` of `kv`. `cos`/`sin` from
    /// `rope.tables(&plan.positions)`. Returns `[n_tokens, d]`.
    #[allow(clippy::too_many_arguments)]
    pub fn forward(
        &self,
        x: &Tensor,
        plan: &BatchPlan,
        rope: &Rope,
        (cos, sin): (&Tensor, &Tensor),
        layer: usize,
        kv: &KvPool,
        caches: &[&SeqCache],
        window: Option<usize>,
    ) -> Result<Tensor> {
        let n = plan.n_tokens();
        let hd = self.head_dim;
        let rows = &plan.rows;
        let [q, k, v]: [Tensor; 3] = self
            .qkv
            .forward(x, rows, plan.deltas())?
            .try_into()
            .map_err(|_| WickError::Internal("attention: Q, K and V expected".into()))?;
        let q = q.reshape((n, self.n_head, hd))?;
        let k = k.reshape((n, self.n_kv_head, hd))?;
        let v = v.reshape((n, self.n_kv_head, hd))?;
        let (qn, kn) = match (&self.q_norm, &self.k_norm) {
            (Some(qn), Some(kn)) => (Some(qn), Some(kn)),
            _ => (None, None),
        };
        let q = rope.apply_normed(&q, qn, (cos, sin), plan.exact)?;
        let k = rope.apply_normed(&k, kn, (cos, sin), plan.exact)?;
        let scale = 1.0 / (hd as f64).sqrt();
        if !plan.exact {
            let at = OnDevice { plan, layer, kv, caches, window, scale };
            let o = trace::span("attention, between its projections", q.device(), || {
                self.attend_on_device(&q, &k, &v, &at)
            })?;
            return self.o.forward_lora(&o, rows, plan.deltas());
        }
        // A quantized cache stores rotated keys and values, as llama.cpp's (`KvTypes::rotation`).
        let (rot_k, rot_v) = kv.types().rotation(hd);
        let rotated = |t: &Tensor, n: usize| -> Result<Tensor> {
            let mut x = t.flatten_all()?.to_vec1::<f32>()?;
            rotate_runs(&mut x, n);
            Ok(Tensor::from_vec(x, t.shape(), t.device())?)
        };
        let (q, k) = match rot_k {
            Some(run) => (rotated(&q, run)?, rotated(&k, run)?),
            None => (q, k),
        };
        let v = match rot_v {
            Some(run) => rotated(&v, run)?,
            None => v,
        };
        let row = self.n_kv_head * hd;
        with_host_f32(&k, |kh| {
            with_host_f32(&v, |vh| {
                let writes: Vec<KvWrite<'_>> = plan
                    .spans
                    .iter()
                    .zip(caches)
                    .map(|(span, seq)| {
                        let new = span.start * row..(span.start + span.len) * row;
                        KvWrite { seq, pos0: span.pos0, k: &kh[new.clone()], v: &vh[new] }
                    })
                    .collect();
                kv.write_many(layer, &writes)
            })
        })???;
        // Every sequence in one pass over the thread pool.
        let q_row = self.n_head * hd;
        let views = caches.iter().map(|c| kv.view(layer, c)).collect::<Result<Vec<_>>>()?;
        let o = with_host_f32(&q, |qh| {
            // A verified decode's rows attend one by one, as each would alone.
            let parts = |span: SeqSpan| {
                let (n, len) = if span.verify { (span.len, 1) } else { (1, span.len) };
                (0..n).map(move |i| (span.start + i, len, span.pos0 + i))
            };
            let seqs: Vec<SeqAttn<'_>> = plan
                .spans
                .iter()
                .zip(&views)
                .flat_map(|(span, view)| {
                    parts(*span).map(move |(start, len, pos0)| SeqAttn {
                        q: &qh[start * q_row..(start + len) * q_row],
                        kv: view,
                        len,
                        pos0,
                        causal: self.causal,
                    })
                })
                .collect();
            attend_many(&seqs, self.n_head, scale as f32, window)
        })?;
        let mut o = o;
        if let Some(run) = rot_v {
            rotate_runs(&mut o, run);
        }
        let o = Tensor::from_vec(o, (n, q_row), x.device())?;
        self.o.forward_lora(&o, rows, plan.deltas())
    }

    /// The device path's cache append and attention, `softmax(q·Kᵀ·scale + mask)·V` with the
    /// causal (and sliding-window) mask: the step's one-token sequences as one batch, the others
    /// one by one; through the fused op over the pages where it is built (`fused_attention`),
    /// else on candle ops. Both round as ggml's CPU backend does with flash attention off — keys
    /// and values stored f16, Q rounded to f16 for `q·Kᵀ` and the probabilities for `·V`, f32
    /// sums — so they follow the exact path up to summation order (and `expf`: the fused op's is
    /// ggml's, candle's softmax takes libm's). Returns `[n_tokens, n_head · head_dim]`.
    fn attend_on_device(&self, q: &Tensor, k: &Tensor, v: &Tensor, at: &OnDevice<'_>) -> Result<Tensor> {
        let OnDevice { plan, layer, kv, caches, window, scale } = *at;
        let decoded = match plan.decodes.is_empty() {
            true => None,
            false => Some(self.attend_decodes(q, k, v, at)?),
        };
        let store = kv.on_device()?;
        let (hd, group, n_kv) = (self.head_dim, self.n_head / self.n_kv_head, self.n_kv_head);
        plan.merge_decodes(decoded, |i| {
            let (span, seq) = (plan.spans[i], caches[i]);
            let (k, v) = (k.narrow(0, span.start, span.len)?, v.narrow(0, span.start, span.len)?);
            store.write(layer, seq, span.pos0, &k, &v)?;
            if fused_attention(q.device()) {
                // Each row as its one-token decode would attend, straight from the pages.
                let r = plan.span_reads(i, store, seq, self.causal)?;
                let at = decode_attention::Reads {
                    reads: &r.reads,
                    lens: &r.lens,
                    t_pad: r.t_pad,
                    one_sequence: true,
                };
                let q = q.narrow(0, span.start, span.len)?.to_dtype(DType::F32)?;
                return decode_attention::decode_attention(
                    &q,
                    store.pages(layer)?,
                    &at,
                    window,
                    scale as f32,
                );
            }
            let (total, len) = (span.pos0 + span.len, span.len);
            let (ks, vs) = store.gather(layer, seq, total)?;
            // Grouped by KV head, no copy of K or V per query head: the `group` query heads of
            // KV head g (adjacent in Q) are rows of one `[group · len, hd]` matrix against it.
            let per_kv =
                |t: Tensor| -> Result<Tensor> { Ok(t.to_dtype(DType::F32)?.transpose(0, 1)?.contiguous()?) };
            let (ks, vs) = (per_kv(ks)?, per_kv(vs)?); // [n_kv, total, hd]
            let qs = q.narrow(0, span.start, len)?.to_dtype(DType::F16)?.to_dtype(DType::F32)?;
            let qs = qs.transpose(0, 1)?.contiguous()?.reshape((n_kv, group * len, hd))?;
            let scores = (qs.matmul(&ks.t()?)? * scale)?.reshape((n_kv, group, len, total))?;
            let scores = match self.causal {
                true => scores.broadcast_add(&plan.causal_mask(i, window, q.device())?)?,
                false => scores,
            };
            let p = candle_nn::ops::softmax_last_dim(&scores)?;
            let p = p.to_dtype(DType::F16)?.to_dtype(DType::F32)?.reshape((n_kv, group * len, total))?;
            let o = p.matmul(&vs)?.reshape((self.n_head, len, hd))?;
            Ok(o.transpose(0, 1)?.reshape((span.len, self.n_head * hd))?)
        })
    }

    /// `attend_on_device` for the step's one-token sequences (`plan.decodes`) at once: per
    /// batch of them (usually one), one scatter of their new keys and values, one padded
    /// gather of their caches, batched products. Returns `[B, n_head · head_dim]` in
    /// `plan.decodes` order.
    fn attend_decodes(&self, q: &Tensor, k: &Tensor, v: &Tensor, at: &OnDevice<'_>) -> Result<Tensor> {
        let OnDevice { plan, layer, kv, caches, window, scale } = *at;
        let store = kv.on_device()?;
        let batches = kept(&plan.decode_slots, "a step's decode slots", || {
            let seqs: Vec<(&SeqCache, usize)> =
                plan.decodes.iter().map(|&i| (caches[i], plan.spans[i].pos0 + 1)).collect();
            store.decode_batches(&seqs)
        })?;
        let (q, k, v) = (plan.decode_rows_of(q)?, plan.decode_rows_of(k)?, plan.decode_rows_of(v)?);
        let mut outs = Vec::with_capacity(batches.len());
        let mut at = 0;
        for slots in batches {
            let b = slots.len();
            let (q, k, v) = (q.narrow(0, at, b)?, k.narrow(0, at, b)?, v.narrow(0, at, b)?);
            at += b;
            store.write_decodes(layer, slots, &k, &v)?;
            if fused_attention(q.device()) {
                // Straight from the pages, their new keys and values written first.
                let at = decode_attention::Reads {
                    reads: slots.reads(),
                    lens: slots.lens_on_device()?,
                    t_pad: slots.t_pad(),
                    one_sequence: false,
                };
                let q = q.to_dtype(DType::F32)?;
                outs.push(decode_attention::decode_attention(
                    &q,
                    store.pages(layer)?,
                    &at,
                    window,
                    scale as f32,
                )?);
                continue;
            }
            let (ks, vs) = store.read_decodes(layer, slots)?;
            outs.push(attend_decode_batch(&q, &ks, &vs, &slots.mask(window)?, scale)?);
        }
        match outs.len() {
            1 => outs.pop().ok_or_else(|| WickError::Internal("attention: no decodes".into())),
            _ => Ok(Tensor::cat(&outs, 0)?),
        }
    }
}

/// A decode batch's one-token attention on composed candle ops (the device path's, where the
/// fused kernel is off): `q` `[B, n_head · hd]` (or `[B, n_head, hd]`), the gathered keys and
/// values `ks`, `vs` `[B, t_pad, n_kv, hd]` f16, `mask` `[B, 1, 1, t_pad]`
/// (`cache::padded_mask`). Rounds as ggml's CPU backend with flash attention off: the query and
/// each probability to f16, f32 sums. Each KV head's query heads are rows of one matrix against
/// it, so no key or value is copied per query head. Returns `[B, n_head · hd]`.
pub fn attend_decode_batch(
    q: &Tensor,
    ks: &Tensor,
    vs: &Tensor,
    mask: &Tensor,
    scale: f64,
) -> Result<Tensor> {
    let (b, _, n_kv, hd) = ks.dims4()?;
    let width = q.elem_count() / b.max(1);
    let per_kv =
        |t: &Tensor| -> Result<Tensor> { Ok(t.to_dtype(DType::F32)?.transpose(1, 2)?.contiguous()?) };
    let (ks, vs) = (per_kv(ks)?, per_kv(vs)?); // [b, n_kv, t_pad, hd]
    let qs = q.to_dtype(DType::F16)?.to_dtype(DType::F32)?.reshape((b, n_kv, width / (n_kv * hd), hd))?;
    let scores = (qs.matmul(&ks.t()?)? * scale)?.broadcast_add(mask)?;
    let p = candle_nn::ops::softmax_last_dim(&scores)?;
    let p = p.to_dtype(DType::F16)?.to_dtype(DType::F32)?;
    Ok(p.matmul(&vs)?.reshape((b, width))?)
}

/// Whether the device path's decodes and prompt spans attend through the fused op over the
/// paged cache (`kernels::decode_attention`: one launch per layer; its host twin on candle's
/// CPU device, so the check device runs the GPU's graph) instead of the composed candle ops:
/// where it is built, unless `WICK_DEVICE_ATTENTION=composed` (the A/B, and their check).
fn fused_attention(device: &candle_core::Device) -> bool {
    static COMPOSED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    decode_attention::available(device)
        && !*COMPOSED.get_or_init(|| std::env::var("WICK_DEVICE_ATTENTION").as_deref() == Ok("composed"))
}

/// What the device path's attention of one layer reads beside Q, K and V.
#[derive(Clone, Copy)]
struct OnDevice<'a> {
    plan: &'a BatchPlan,
    layer: usize,
    kv: &'a KvPool,
    caches: &'a [&'a SeqCache],
    window: Option<usize>,
    scale: f64,
}

/// `[len, pos0 + len]`: 0 where query `pos0 + i` may see key `j` (`j ≤ pos0 + i`, and within
/// the last `window` positions when there is one), -∞ elsewhere.
fn causal_mask(pos0: usize, len: usize, window: Option<usize>, dev: &candle_core::Device) -> Result<Tensor> {
    let total = pos0 + len;
    let mut m = vec![f32::NEG_INFINITY; len * total];
    for i in 0..len {
        let p = pos0 + i;
        let from = window.map_or(0, |w| (p + 1).saturating_sub(w));
        m[i * total + from..i * total + p + 1].fill(0.0);
    }
    Ok(Tensor::from_vec(m, (len, total), dev)?)
}
