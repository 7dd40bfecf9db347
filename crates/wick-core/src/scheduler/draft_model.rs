//! Drafts from a small model that shares the target's vocabulary (llama-server's
//! `--model-draft`): it reads each decoding sequence's tokens into a cache of its own and
//! guesses the next few greedily, one batched step per drafted position. What it guessed wrong
//! is undone by returning its cache to the checkpoint after the last guess the target kept
//! (conv states included), so each round feeds only the tokens it has not seen — the target's
//! last sample, and any guesses it kept — in the same step that drafts the first new token.

use super::Sequence;
use crate::cache::{Checkpoint, KvPool, SeqCache};
use crate::error::{Result, WickError};
use crate::kernels::with_host_f32;
use crate::models::{Model, StepSeq};

/// Tokens of a sequence the draft model reads per step while it catches up (a long prompt).
const CATCH_UP_CHUNK: usize = 512;

pub(crate) struct Drafter {
    model: Box<dyn Model>,
    kv: KvPool,
    /// Token ids both models have (their vocabularies may differ in size at the end).
    n_vocab: usize,
    /// Per running sequence, by admission order.
    seqs: Vec<(u64, DraftSeq)>,
}

/// One sequence's state in the draft model.
struct DraftSeq {
    cache: SeqCache,
    /// The sequence's length when the last round caught up: `marks[i]` is the cache at
    /// `base + i` tokens, after the guesses `fed[..i]`.
    base: usize,
    fed: Vec<u32>,
    marks: Vec<Checkpoint>,
}

/// A sequence to draft for: its index among the running ones and the most tokens it may take.
pub(crate) struct DraftAsk {
    pub index: usize,
    pub room: usize,
}

/// One sequence's part of a drafting round.
struct Round {
    slot: usize,
    index: usize,
    room: usize,
    p_min: f32,
    /// Tokens still to read before the first guess (the sequence's unseen tokens).
    pending: std::ops::Range<usize>,
    guesses: Vec<u32>,
    drafting: bool,
}

impl Drafter {
    /// `target_vocab`: the size of the model's vocabulary the guesses are for.
    pub fn new(model: Box<dyn Model>, kv: KvPool, target_vocab: usize) -> Self {
        let n_vocab = model.info().n_vocab.min(target_vocab);
        Self { model, kv, n_vocab, seqs: Vec::new() }
    }

    /// Fills `draft` (the last sampled token, then the guesses) of each asked sequence the
    /// draft model is sure enough of. On an error every draft state is dropped (the next round
    /// starts them over) and the asked sequences decode without drafts.
    pub fn propose(&mut self, running: &mut [Box<Sequence>], asks: &[DraftAsk]) -> Result<()> {
        self.seqs.retain_mut(|(id, d)| {
            let live = running.iter().any(|s| s.admitted == *id);
            if !live {
                self.kv.release(&mut d.cache);
            }
            live
        });
        let result = self.draft(running, asks);
        if result.is_err() {
            for (_, d) in self.seqs.iter_mut() {
                self.kv.release(&mut d.cache);
            }
            self.seqs.clear();
            for a in asks {
                running[a.index].draft.clear();
            }
        }
        result
    }

    fn draft(&mut self, running: &mut [Box<Sequence>], asks: &[DraftAsk]) -> Result<()> {
        let n_vocab = self.n_vocab;
        let mut rounds = Vec::with_capacity(asks.len());
        for a in asks {
            let seq = &running[a.index];
            let slot = self.rewind(seq)?;
            let at = self.seqs[slot].1.cache.len();
            let (p_min, pending) = (seq.spec.p_min, at..seq.tokens.len());
            // A token one of the models does not have: no guesses for it this round.
            if seq.tokens[pending.clone()].iter().any(|&t| t as usize >= n_vocab) {
                continue;
            }
            if !pending.is_empty() {
                rounds.push(Round {
                    slot,
                    index: a.index,
                    room: a.room,
                    p_min,
                    pending,
                    guesses: vec![],
                    drafting: true,
                });
            }
        }
        // Long catch-ups first, a chunk a step, until every sequence has one chunk left.
        while rounds.iter().any(|r| r.pending.len() > CATCH_UP_CHUNK) {
            let feeding: Vec<usize> =
                (0..rounds.len()).filter(|&i| rounds[i].pending.len() > CATCH_UP_CHUNK).collect();
            self.step(running, &mut rounds, &feeding, CATCH_UP_CHUNK)?;
        }
        let mut feeding: Vec<usize> = (0..rounds.len()).collect();
        while !feeding.is_empty() {
            let best = self.step(running, &mut rounds, &feeding, CATCH_UP_CHUNK)?;
            for (&i, (tok, p)) in feeding.iter().zip(best) {
                let r = &mut rounds[i];
                if p < r.p_min || tok as usize >= n_vocab {
                    r.drafting = false;
                    continue;
                }
                r.guesses.push(tok);
                r.drafting = r.guesses.len() < r.room;
            }
            feeding.retain(|&i| rounds[i].drafting);
        }
        for r in rounds {
            let seq = &mut running[r.index];
            if r.guesses.len() >= seq.spec.draft_min.max(1) {
                let last = seq.tokens[seq.tokens.len() - 1];
                seq.draft = std::iter::once(last).chain(r.guesses).collect();
            }
        }
        Ok(())
    }

    /// The slot of `seq`'s draft state, returned to the last checkpoint its tokens still
    /// agree with (a new state starts on the draft pool's longest cached prefix).
    fn rewind(&mut self, seq: &Sequence) -> Result<usize> {
        let tokens = &seq.tokens;
        let slot = match self.seqs.iter().position(|(id, _)| *id == seq.admitted) {
            Some(slot) => slot,
            None => {
                let mut cache = self.kv.new_seq();
                let base = self.kv.reuse_prefix(&mut cache, &tokens[..tokens.len().saturating_sub(1)], 0)?;
                let marks = vec![cache.checkpoint()];
                self.seqs.push((seq.admitted, DraftSeq { cache, base, fed: vec![], marks }));
                return Ok(self.seqs.len() - 1);
            }
        };
        let d = &mut self.seqs[slot].1;
        let kept = match tokens.get(d.base..) {
            Some(after) => d.fed.iter().zip(after).take_while(|(a, b)| a == b).count(),
            None => 0,
        };
        match d.marks.get(kept) {
            Some(mark) if d.base <= tokens.len() => self.kv.restore(&mut d.cache, mark)?,
            _ => {
                return Err(WickError::Internal(format!(
                    "the draft model's cache ({} tokens) lost its place in a sequence of {}",
                    d.cache.len(),
                    tokens.len()
                )))
            }
        }
        Ok(slot)
    }

    /// One draft-model step over `rounds[feeding]`: each reads up to `chunk` of its pending
    /// tokens, or, once none are pending, its last guess. Returns each one's most likely next
    /// token and its probability, in `feeding` order, and keeps a checkpoint after every guess read.
    fn step(
        &mut self,
        running: &[Box<Sequence>],
        rounds: &mut [Round],
        feeding: &[usize],
        chunk: usize,
    ) -> Result<Vec<(u32, f32)>> {
        // A draft pool too small for the step is an error: the round's drafts are dropped.
        let need: usize = feeding
            .iter()
            .map(|&i| {
                let r = &rounds[i];
                let n = if r.pending.is_empty() { 1 } else { r.pending.len().min(chunk) };
                self.kv.blocks_needed(&self.seqs[r.slot].1.cache, n)
            })
            .sum();
        if need > self.kv.n_available() {
            return Err(WickError::Internal("the draft model's KV pool is full".into()));
        }
        let mut inputs: Vec<(usize, Vec<u32>)> = Vec::with_capacity(feeding.len());
        for &i in feeding {
            let r = &mut rounds[i];
            let d = &mut self.seqs[r.slot].1;
            let toks = match r.pending.is_empty() {
                true => {
                    let g = r.guesses[r.guesses.len() - 1];
                    d.fed.push(g);
                    vec![g]
                }
                false => {
                    let end = r.pending.start + r.pending.len().min(chunk);
                    let t = running[r.index].tokens[r.pending.start..end].to_vec();
                    r.pending.start = end;
                    t
                }
            };
            inputs.push((r.slot, toks));
        }
        let mut caches: Vec<Option<&mut SeqCache>> =
            self.seqs.iter_mut().map(|(_, d)| Some(&mut d.cache)).collect();
        let mut batch: Vec<StepSeq<'_>> = Vec::with_capacity(inputs.len());
        for (slot, toks) in &inputs {
            let cache =
                caches[*slot].take().ok_or_else(|| WickError::Internal("a draft cache fed twice".into()))?;
            batch.push(StepSeq::tokens(toks, cache));
        }
        let logits = self.model.forward(&mut batch, &mut self.kv)?;
        drop(batch);
        for &i in feeding {
            let r = &rounds[i];
            let d = &mut self.seqs[r.slot].1;
            if r.pending.is_empty() && r.guesses.is_empty() {
                // Caught up: the checkpoints start here, and its full blocks (of the sequence's
                // own tokens, never guesses) may start later sequences.
                self.kv.register_full(&mut d.cache, &running[r.index].tokens);
                d.base = d.cache.len();
                d.fed.clear();
                d.marks = vec![d.cache.checkpoint()];
            } else if !r.guesses.is_empty() {
                d.marks.push(d.cache.checkpoint());
            }
        }
        let row = self.model.info().n_vocab.max(1);
        with_host_f32(&logits, |l| l.chunks_exact(row).map(most_likely).collect())
    }
}

/// The most likely token of a row of logits and its probability.
fn most_likely(logits: &[f32]) -> (u32, f32) {
    let (mut best, mut max) = (0, f32::NEG_INFINITY);
    for (i, &l) in logits.iter().enumerate() {
        if l > max {
            (best, max) = (i, l);
        }
    }
    let sum: f64 = logits.iter().map(|&l| ((l - max) as f64).exp()).sum();
    (best as u32, (1.0 / sum) as f32)
}
