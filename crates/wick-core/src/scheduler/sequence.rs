//! One request's life inside the scheduler: its cache, sampler, grammar, detokenizer and stop
//! matcher.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use super::budget::Budget;
use super::draft::ngram_draft;
use super::images::{Expanded, SeqImage};
use super::stop::{StopMatcher, StopScan};
use crate::cache::{chain_hash, SeqCache};
use crate::embed::{EmbedHead, EmbedOptions};
use crate::lora::LoraMix;
use crate::metrics::Metrics;
use crate::request::{
    DoneEvent, Event, EventSender, FinishReason, GenerateRequest, SpecOptions, Timings, TokenEvent, Usage,
};
use crate::sampling::grammar::{Commit, Constraint};
use crate::sampling::{top_logprobs, Sampler, TokenLogprob};
use crate::tokenizer::{Detokenizer, Tokenizer};

pub(crate) struct Sequence {
    pub cancel: Arc<AtomicBool>,
    tx: EventSender,
    /// Prompt followed by generated tokens (image positions hold placeholder ids).
    pub tokens: Vec<u32>,
    pub n_prompt: usize,
    /// The prompt's images and where prompt chunks must end around them.
    pub images: Vec<SeqImage>,
    pub breaks: Vec<usize>,
    /// Generation may not go past this many tokens in total.
    pub limit: usize,
    /// KV blocks and conv state; `cache.len()` tokens of `tokens` are in it.
    pub cache: SeqCache,
    /// Prompt tokens the prefix cache supplied at admission (reported in usage).
    pub cached_tokens: usize,
    /// Order of first admission: preemption takes the newest.
    pub admitted: u64,
    /// It was in a batch whose step failed: it runs alone until its cache holds this many
    /// tokens (see `Scheduler::fail_step`).
    pub suspect: Option<usize>,
    /// Its last event (done or error) was sent.
    ended: bool,
    sampler: Sampler,
    /// The request's grammar, compiled at submit.
    grammar: Option<Constraint>,
    /// The thinking block's budget, when the request set one.
    budget: Option<Budget>,
    /// The stop string that ended the sequence, if one did.
    stopped_by: Option<String>,
    /// An embedding request: the prompt's hidden states are pooled, nothing is generated.
    pub embed: Option<EmbedOptions>,
    /// The LoRA adapters it runs with, and the prefix cache's salt for them (0: none).
    pub lora: LoraMix,
    pub lora_salt: u64,
    /// The last sample appended a grammar's forced run: the next step feeds every unfed token
    /// at once (a chunk, as a prompt's) rather than one.
    pub feed_run: bool,
    /// Speculative decoding's settings (off unless the request or the engine turned it on).
    pub spec: SpecOptions,
    /// This step's input when it verifies drafts: the sampled token, then the drafted ones
    /// (`propose`); empty when it does not.
    pub draft: Vec<u32>,
    /// How far drafting reaches now (`Pace`).
    pace: Pace,
    /// Control tokens rendered as text (sorted).
    markers: Vec<u32>,
    detok: Detokenizer,
    stop: StopMatcher,
    ignore_eos: bool,
    top_logprobs: Option<usize>,
    t_submit: Instant,
    t_admit: Option<Instant>,
    t_first: Option<Instant>,
}

impl Sequence {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        req: GenerateRequest,
        prompt: Expanded,
        grammar: Option<Constraint>,
        lora: LoraMix,
        limit: usize,
        tx: EventSender,
        cancel: Arc<AtomicBool>,
    ) -> Self {
        let n_prompt = prompt.tokens.len();
        let mut markers = req.marker_tokens;
        markers.sort_unstable();
        Self {
            cancel,
            tx,
            tokens: prompt.tokens,
            n_prompt,
            images: prompt.images,
            breaks: prompt.breaks,
            limit,
            cache: SeqCache::default(),
            cached_tokens: 0,
            admitted: 0,
            suspect: None,
            ended: false,
            sampler: Sampler::new(req.sampling),
            grammar,
            budget: req.reasoning_budget.map(Budget::new),
            feed_run: false,
            spec: req.speculative.unwrap_or(SpecOptions::OFF),
            draft: Vec::new(),
            pace: Pace::default(),
            stopped_by: None,
            embed: req.embed,
            lora_salt: lora_salt(&lora),
            lora,
            markers,
            detok: Detokenizer::new(),
            stop: StopMatcher::new(req.stop),
            ignore_eos: req.ignore_eos,
            top_logprobs: req.top_logprobs,
            t_submit: Instant::now(),
            t_admit: None,
            t_first: None,
        }
    }

    /// Enters the running set with `cache` (possibly starting on a reused prefix). A
    /// preempted sequence comes back here with its generated tokens to replay.
    pub fn admit(&mut self, cache: SeqCache, order: u64) {
        if self.t_admit.is_none() {
            self.t_admit = Some(Instant::now());
            self.cached_tokens = cache.len().min(self.n_prompt);
            self.admitted = order;
        }
        self.cache = cache;
        self.draft.clear();
    }

    pub fn n_cached(&self) -> usize {
        self.cache.len()
    }

    /// Where the prompt chunk starting at `at` ends: at the next multiple of `chunk`
    /// positions counted from the start of `at`'s segment (the prompt is cut into segments
    /// at its images' edges), at the segment's end, or at the prompt's end.
    pub fn chunk_end(&self, at: usize, chunk: usize) -> usize {
        // An embedding reads every prompt token's hidden state at once (and a bidirectional
        // model's tokens see each other): one chunk.
        if self.embed.is_some() {
            return self.n_prompt;
        }
        let seg = self.breaks.iter().rev().find(|&&b| b <= at).copied().unwrap_or(0);
        let next = self.breaks.iter().find(|&&b| b > at).copied().unwrap_or(self.n_prompt);
        // Saturating: `chunk` is usize::MAX when prompts go in one piece.
        seg.saturating_add(((at - seg) / chunk + 1).saturating_mul(chunk)).min(next).min(self.n_prompt)
    }

    pub fn is_cancelled(&self) -> bool {
        self.cancel.load(Ordering::Relaxed) || self.tx.is_closed() || self.tx.is_stalled()
    }

    pub fn generated(&self) -> usize {
        self.tokens.len() - self.n_prompt
    }

    /// Tokens still to be fed to the model (the rest of the prompt, or the last sampled token).
    pub fn unfed(&self) -> usize {
        self.tokens.len() - self.n_cached()
    }

    /// Tokens a step past the prompt feeds: the sampled one, with a grammar's forced run after
    /// it when it has one (one forward for the whole run), else one (a replay, token by token).
    pub fn decode_take(&self) -> usize {
        if !self.draft.is_empty() {
            self.draft.len()
        } else if self.feed_run {
            self.unfed()
        } else {
            1
        }
    }

    /// How many tokens it may draft now, at most `room`: None unless speculation is on and it
    /// is decoding one sampled token, while drafting pauses (`Pace`), or at its token limit.
    pub fn draft_room(&mut self, room: usize) -> Option<usize> {
        let decoding = self.n_cached() >= self.n_prompt && self.unfed() == 1 && !self.feed_run;
        if !self.spec.is_on() || self.embed.is_some() || !decoding {
            return None;
        }
        let len = self.pace.next(self.spec.draft_max)?;
        // A last drafted token past the limit could never be sampled after.
        Some(room.min(len).min(self.limit.saturating_sub(self.tokens.len() + 1))).filter(|&r| r > 0)
    }

    /// Drafts at most `room` tokens by n-gram lookup to verify with the next decode (`draft`).
    pub fn propose(&mut self, room: usize) {
        self.draft.clear();
        let Some(room) = self.draft_room(room) else { return };
        let drafted = ngram_draft(&self.tokens, &self.spec, room);
        if let (false, Some(&last)) = (drafted.is_empty(), self.tokens.last()) {
            self.draft.push(last);
            self.draft.extend(drafted);
        }
    }

    /// Samples a verified step's rows (`logits`, one per token of `draft`) in order, each
    /// from its row as decoding one by one would, for as long as each sampled token is the
    /// next drafted one: every row after a mismatch saw a wrong input. Returns the finish
    /// reason when the sequence ended, and how many of the step's inputs turned out to be the
    /// sequence's tokens (the cache keeps those; at least the first).
    pub fn on_verified(
        &mut self,
        logits: &[f32],
        tok: &Tokenizer,
        metrics: &Metrics,
    ) -> (Option<crate::Result<FinishReason>>, usize) {
        let draft = std::mem::take(&mut self.draft);
        let pos0 = self.tokens.len() - 1;
        let n_vocab = logits.len() / draft.len().max(1);
        let mut end = None;
        for (i, row) in logits.chunks_exact(n_vocab.max(1)).enumerate() {
            end = self.on_logits(row, tok, metrics).transpose();
            // Exactly one new token, and the next input: else the rows after saw wrong inputs.
            let next = pos0 + i + 1;
            let on_track = self.tokens.len() == next + 1 && draft.get(i + 1) == Some(&self.tokens[next]);
            if end.is_some() || !on_track {
                break;
            }
        }
        let same = draft.iter().zip(&self.tokens[pos0..]).take_while(|(a, b)| a == b).count();
        // A fed token's logits are always read: the last token stays unfed.
        let kept = same.min(self.tokens.len() - pos0 - 1).max(1);
        self.pace.verified(draft.len() - 1, kept - 1, self.spec.draft_max);
        metrics.spec_drafts_total.fetch_add(1, Ordering::Relaxed);
        metrics.spec_draft_tokens_total.fetch_add(draft.len() - 1, Ordering::Relaxed);
        metrics.spec_accepted_tokens_total.fetch_add(kept - 1, Ordering::Relaxed);
        (end, kept)
    }

    /// Samples from the logits of the last fed token and emits the event. Returns the finish
    /// reason when the sequence is done; an error (a grammar failing mid-way) ends it too.
    pub fn on_logits(
        &mut self,
        logits: &[f32],
        tok: &Tokenizer,
        metrics: &Metrics,
    ) -> crate::Result<Option<FinishReason>> {
        if self.t_first.is_none() {
            self.t_first = Some(Instant::now());
        }
        let generated = self.generated();
        let mask = match self.grammar.as_mut().filter(|g| g.is_active()) {
            Some(g) => {
                let t = Instant::now();
                let computed = g.ready()?;
                let us = |d: std::time::Duration| d.as_micros() as usize;
                metrics.grammar_masks_total.fetch_add(1, Ordering::Relaxed);
                metrics.grammar_mask_wait_us_total.fetch_add(us(t.elapsed()), Ordering::Relaxed);
                metrics.grammar_mask_compute_us_total.fetch_add(us(computed), Ordering::Relaxed);
                g.mask()
            }
            None => None,
        };
        // A spent reasoning budget closes the block (never against a grammar holding the text).
        let forced = self.budget.as_ref().and_then(Budget::forced).filter(|_| mask.is_none());
        let id = forced.unwrap_or_else(|| self.sampler.sample(logits, &self.tokens, generated, mask));
        // The model's own distribution: sampling never edits `logits`.
        let logprobs = self.top_logprobs.map(|n| vec![top_logprobs(logits, id, n)]).unwrap_or_default();
        if !self.ignore_eos && tok.is_eog(id) {
            self.tokens.push(id);
            // The end token itself is not text; release what was held back for stop strings.
            self.detok.finish();
            let rest = self.stop.flush();
            self.send_token(vec![id], rest, logprobs);
            return Ok(Some(FinishReason::Stop));
        }
        let run = self.forced_run(id);
        let (ids, mut text, mut finished) = self.push_tokens(std::iter::once(id).chain(run), tok);
        self.feed_run = ids.len() > 1;
        if let (None, Some(g)) = (finished, self.grammar.as_mut()) {
            // Also starts the next mask on a helper thread, overlapping the next forward pass.
            if g.commit(&ids)? == Commit::Complete {
                finished = Some(FinishReason::Stop);
                text += &self.flush_held();
            }
        }
        self.send_token(ids, text, logprobs);
        Ok(finished.or_else(|| (self.tokens.len() >= self.limit).then_some(FinishReason::Length)))
    }

    /// Pools the prompt's final hidden states (`rows × n_embd`) into the request's embedding
    /// and sends it; the sequence is then done.
    pub fn on_hidden(&mut self, hidden: &[f32], head: &EmbedHead) -> crate::Result<FinishReason> {
        self.t_first = Some(Instant::now());
        let opts = self
            .embed
            .as_ref()
            .ok_or_else(|| crate::WickError::Internal("hidden states for a generation".into()))?;
        let vectors = head.embed(hidden, opts)?;
        let _ = self.tx.send(Event::Embedding(vectors));
        Ok(FinishReason::Stop)
    }

    /// The tokens the grammar forces after `id` (llguidance's fast-forward run, when `id` began
    /// it), within the token limit. They go into the cache in one step, as a prompt chunk does;
    /// with logprobs asked for they are sampled one by one instead, each with its own.
    fn forced_run(&self, id: u32) -> Vec<u32> {
        let Some(g) = self.grammar.as_ref().filter(|_| self.top_logprobs.is_none()) else {
            return Vec::new();
        };
        match g.forced() {
            [first, rest @ ..] if *first == id => {
                rest.iter().copied().take(self.limit.saturating_sub(self.tokens.len() + 1)).collect()
            }
            _ => Vec::new(),
        }
    }

    /// Appends `ids` to the sequence: their text through the detokenizer and the stop matcher,
    /// up to a stop string. Returns the ids taken, their text, and Stop if a stop string ended it.
    fn push_tokens(
        &mut self,
        ids: impl Iterator<Item = u32>,
        tok: &Tokenizer,
    ) -> (Vec<u32>, String, Option<FinishReason>) {
        let (mut taken, mut text) = (Vec::new(), String::new());
        for id in ids {
            self.tokens.push(id);
            taken.push(id);
            if let Some(b) = self.budget.as_mut() {
                b.observe(&self.tokens[self.n_prompt..]);
            }
            let rendered = self.markers.binary_search(&id).is_ok();
            let delta = self.detok.push(tok, id, !rendered);
            match self.stop.push(&delta) {
                StopScan::Emit(t) => text += &t,
                StopScan::Stopped(t, stop) => {
                    self.stopped_by = Some(stop);
                    return (taken, text + &t, Some(FinishReason::Stop));
                }
            }
        }
        (taken, text, None)
    }

    fn send_token(&mut self, ids: Vec<u32>, text: String, logprobs: Vec<(TokenLogprob, Vec<TokenLogprob>)>) {
        // A closed or stalled receiver means the client left; the scheduler notices via is_cancelled().
        let _ = self.tx.send(Event::Token(TokenEvent { ids, text, logprobs }));
    }

    /// The text still held back for a possible stop string, once generation ended without one
    /// (an unfinished character is dropped: `Detokenizer::finish`).
    fn flush_held(&mut self) -> String {
        self.detok.finish();
        self.stop.flush()
    }

    pub fn finish(mut self, reason: FinishReason) {
        if reason == FinishReason::Length {
            let rest = self.flush_held();
            if !rest.is_empty() {
                self.send_token(Vec::new(), rest, Vec::new());
            }
        }
        let now = Instant::now();
        let ms = |a: Instant, b: Instant| b.saturating_duration_since(a).as_secs_f64() * 1e3;
        let admit = self.t_admit.unwrap_or(now);
        let first = self.t_first.unwrap_or(now);
        let done = DoneEvent {
            finish_reason: reason,
            usage: Usage {
                prompt_tokens: self.n_prompt,
                completion_tokens: self.generated(),
                cached_tokens: self.cached_tokens,
            },
            timings: Timings {
                queue_ms: ms(self.t_submit, admit),
                prompt_ms: ms(admit, first),
                decode_ms: ms(first, now),
            },
            stop: self.stopped_by.take(),
        };
        let _ = self.tx.send(Event::Done(done));
        self.ended = true;
    }

    pub fn fail(mut self, err: crate::WickError) {
        let _ = self.tx.send(Event::Error(err));
        self.ended = true;
    }
}

/// How many tokens to draft: a checked draft row costs about a third of a decode step on a CPU,
/// so drafting pays where the text copies itself for a while and costs where it does not.
/// The reach doubles while whole drafts are accepted and falls back to what was accepted;
/// after drafts that were wholly rejected, drafting pauses for 1, 2, 4 … (at most 16) steps.
#[derive(Debug, Default)]
struct Pace {
    /// Tokens the next draft may have (0: not set yet, `draft_max / 2`).
    len: usize,
    /// Drafts in a row that were wholly rejected.
    misses: u32,
    /// Steps still to go without drafting.
    wait: u32,
}

impl Pace {
    /// The next draft's length, or None while drafting pauses.
    fn next(&mut self, max: usize) -> Option<usize> {
        if self.wait > 0 {
            self.wait -= 1;
            return None;
        }
        if self.len == 0 {
            self.len = max.div_ceil(2);
        }
        Some(self.len.clamp(1, max.max(1)))
    }

    fn verified(&mut self, drafted: usize, accepted: usize, max: usize) {
        if accepted == 0 {
            self.misses += 1;
            self.wait = 1 << (self.misses - 1).min(4);
        } else {
            self.misses = 0;
        }
        self.len = match accepted == drafted {
            true => (2 * drafted).min(max),
            false => accepted.max(1),
        };
    }
}

/// What the prefix cache keys a sequence's blocks by besides its tokens: its adapters (ids and
/// scales), hashed as a block of tokens is, so no KV is shared across adapters. 0 without any.
fn lora_salt(mix: &LoraMix) -> u64 {
    if mix.is_empty() {
        return 0;
    }
    let words: Vec<u32> = mix.iter().flat_map(|(a, scale)| [a.id as u32, scale.to_bits()]).collect();
    chain_hash(0, &words)
}

/// The last guard: a sequence dropped without its last event (still in the channel when the
/// engine stopped, or lost while the scheduler thread unwound) ends with an error, so its
/// client never waits on a stream that will not end.
impl Drop for Sequence {
    fn drop(&mut self) {
        if !self.ended {
            let _ = self.tx.send(Event::Error(crate::WickError::EngineStopped));
        }
    }
}
