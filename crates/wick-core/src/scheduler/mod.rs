//! The scheduler: one thread per loaded model. Each step admits waiting requests (FIFO, while
//! KV blocks last, starting each on its longest cached prefix), builds one ragged batch of
//! every running sequence's next tokens (decodes and prompt chunks together), preempts the
//! newest sequences if the step needs more KV blocks than are left, runs the model once,
//! samples, and streams events back.

mod budget;
mod draft;
mod draft_model;
mod faults;
pub(crate) mod images;
mod sequence;
mod stop;

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, TryRecvError};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub(crate) use draft_model::Drafter;
pub use faults::{Fault, Health};
pub(crate) use sequence::Sequence;

use crate::cache::KvPool;
use crate::embed::EmbedHead;
use crate::error::WickError;
use crate::kernels::with_host_f32;
use crate::metrics::Metrics;
use crate::models::vision::VisionModel;
use crate::models::{Model, StepSeq};
use crate::request::{FinishReason, SpecMethod};
use crate::tokenizer::Tokenizer;

pub(crate) enum Command {
    Submit(Box<Sequence>),
    /// Something changed (a cancel); look at the sequences again.
    Wake,
    /// Stop admitting and stepping (requests still queue and may be cancelled) until Resume:
    /// what was submitted in between starts in one deterministic schedule.
    Pause,
    Resume,
    Shutdown,
}

pub(crate) struct SchedulerConfig {
    pub max_seqs: usize,
    /// Tokens in one forward step (decodes plus prompt chunks); a lone chunk may exceed it.
    pub step_tokens: usize,
    /// Prompt chunks end at multiples of this many positions (or the prompt's end). Fixed
    /// per position, never cut to fit what others left: a sequence's numerics depend on how
    /// its prompt is split, so equal splits keep its output the same whether it runs alone,
    /// in a batch, or resumes on a cached prefix. None = the whole prompt in one chunk
    /// (`EngineOptions::prefill_chunk`, passed on unchanged).
    pub prefill_chunk: Option<usize>,
    /// The `WICK_FAULT` test hook (None in normal use).
    pub fault: Option<Fault>,
}

pub(crate) struct Scheduler {
    model: Box<dyn Model>,
    /// Pools embedding requests' hidden states.
    embed_head: Arc<EmbedHead>,
    tokenizer: Arc<Tokenizer>,
    rx: Receiver<Command>,
    cfg: SchedulerConfig,
    metrics: Arc<Metrics>,
    kv: KvPool,
    waiting: VecDeque<Box<Sequence>>,
    /// In admission order (oldest first). Boxed, as in `waiting`: admission and preemption
    /// move a pointer between the queues, not the whole sequence.
    #[allow(clippy::vec_box)]
    running: Vec<Box<Sequence>>,
    admissions: u64,
    paused: bool,
    /// The image projector, when one is loaded, and recent images' embeddings.
    vision: Option<Arc<VisionModel>>,
    image_cache: images::ImageCache,
    /// The sequences (by admission order) the current step feeds; who failed if it fails.
    in_step: Vec<u64>,
    /// Time steps that ran an embedding beside decodes took, not yet given back to decodes
    /// alone (see `plan`).
    embed_debt: Duration,
    /// The draft model, when one is loaded (`SpecMethod::DraftModel`).
    drafter: Option<Drafter>,
}

impl Scheduler {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        model: Box<dyn Model>,
        embed_head: Arc<EmbedHead>,
        tokenizer: Arc<Tokenizer>,
        rx: Receiver<Command>,
        cfg: SchedulerConfig,
        kv: KvPool,
        metrics: Arc<Metrics>,
        vision: Option<Arc<VisionModel>>,
        drafter: Option<Drafter>,
    ) -> Self {
        metrics.kv_blocks_total.store(kv.n_blocks(), Ordering::Relaxed);
        Self {
            model,
            embed_head,
            tokenizer,
            rx,
            cfg,
            metrics,
            kv,
            waiting: VecDeque::new(),
            running: Vec::new(),
            admissions: 0,
            paused: false,
            vision,
            image_cache: images::ImageCache::new(8),
            in_step: Vec::new(),
            embed_debt: Duration::ZERO,
            drafter,
        }
    }

    /// Serves until shutdown. A panic in the loop outside a step's guard kills the engine
    /// (recorded in `health`, every request answered with ENGINE_DEAD) instead of leaving
    /// requests waiting on a thread that is gone.
    pub fn run(mut self, health: Arc<Health>) {
        let served = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.serve()));
        if let Err(p) = served {
            let reason = format!("the scheduler thread panicked: {}", crate::error::panic_message(&p));
            self.die(&health, reason);
            return;
        }
        for mut seq in self.running.drain(..).chain(self.waiting.drain(..)) {
            self.kv.release(&mut seq.cache);
            seq.fail(WickError::EngineStopped);
        }
    }

    fn serve(&mut self) {
        loop {
            if !self.receive() {
                break;
            }
            self.retire_cancelled();
            if self.paused {
                self.publish();
                continue;
            }
            self.admit();
            if !self.running.is_empty() {
                // A panic inside the model step (a kernel, sampling, a grammar mask, the image
                // encoder) must not take the engine down: its sequences are failed instead.
                let step = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.step()));
                match step {
                    Ok(Ok(())) => self.clear_suspects(),
                    Ok(Err(WickError::Internal(m))) => self.fail_step(format!("the model step failed: {m}")),
                    Ok(Err(e)) => self.fail_step(format!("the model step failed: {e}")),
                    Err(p) => self
                        .fail_step(format!("the model step panicked: {}", crate::error::panic_message(&p))),
                }
                self.in_step.clear();
            }
            self.publish();
        }
    }

    /// Takes in commands; blocks only when there is nothing to run (or paused). False on
    /// shutdown.
    fn receive(&mut self) -> bool {
        let mut block = self.paused || (self.running.is_empty() && self.waiting.is_empty());
        loop {
            let cmd = if block {
                match self.rx.recv() {
                    Ok(cmd) => cmd,
                    Err(_) => return false,
                }
            } else {
                match self.rx.try_recv() {
                    Ok(cmd) => cmd,
                    Err(TryRecvError::Empty) => return true,
                    Err(TryRecvError::Disconnected) => return false,
                }
            };
            block = false;
            if !self.handle(cmd) {
                return false;
            }
        }
    }

    fn handle(&mut self, cmd: Command) -> bool {
        match cmd {
            Command::Submit(seq) => {
                self.waiting.push_back(seq);
                if let Some(seq) = self.waiting.back() {
                    self.inject_exit_fault(seq);
                }
            }
            Command::Wake => {}
            Command::Pause => self.paused = true,
            Command::Resume => self.paused = false,
            Command::Shutdown => return false,
        }
        true
    }

    /// Frees a sequence's blocks and sends its last event. The gauges are published first,
    /// so a client that reads them after its last event sees its blocks returned.
    fn retire(&mut self, mut seq: Box<Sequence>, reason: FinishReason) {
        self.kv.release(&mut seq.cache);
        self.publish();
        seq.finish(reason);
    }

    /// As `retire`, for a sequence that failed on its own (its grammar, mid-generation).
    fn retire_failed(&mut self, mut seq: Box<Sequence>, err: WickError) {
        self.kv.release(&mut seq.cache);
        self.publish();
        seq.fail(err);
    }

    fn retire_cancelled(&mut self) {
        let (cancelled, waiting): (Vec<_>, Vec<_>) = self.waiting.drain(..).partition(|s| s.is_cancelled());
        self.waiting = waiting.into();
        self.metrics.waiting.fetch_sub(cancelled.len(), Ordering::Relaxed);
        let (gone, running): (Vec<_>, Vec<_>) = self.running.drain(..).partition(|s| s.is_cancelled());
        self.running = running;
        for seq in cancelled.into_iter().chain(gone) {
            self.retire(seq, FinishReason::Cancelled);
        }
    }

    /// FIFO admission while sequence slots and KV blocks last. Each sequence starts on the
    /// longest cached prefix it may skip, and needs blocks for the rest of its known tokens
    /// plus one block of headroom per running sequence (so admitting it does not force an
    /// immediate preemption).
    fn admit(&mut self) {
        while self.running.len() < self.cfg.max_seqs {
            let Some(mut seq) = self.waiting.pop_front() else { break };
            let mut cache = self.kv.new_seq();
            // An embedding needs every prompt token's hidden state: nothing can be skipped.
            let skippable = if seq.embed.is_some() { 0 } else { self.skippable(&seq) };
            let reused = match self.kv.reuse_prefix(&mut cache, &seq.tokens[..skippable], seq.lora_salt) {
                Ok(n) => n,
                Err(e) => {
                    self.metrics.waiting.fetch_sub(1, Ordering::Relaxed);
                    self.kv.release(&mut cache);
                    seq.fail(e);
                    continue;
                }
            };
            let need = self.kv.blocks_needed(&cache, seq.tokens.len() - reused + 1);
            if !self.running.is_empty() && need + self.running.len() > self.kv.n_available() {
                self.kv.release(&mut cache);
                self.waiting.push_front(seq);
                break;
            }
            if seq.admitted == 0 {
                let s = &self.metrics;
                s.prefix_query_tokens_total.fetch_add(seq.n_prompt, Ordering::Relaxed);
                s.prefix_hit_tokens_total.fetch_add(reused.min(seq.n_prompt), Ordering::Relaxed);
            }
            self.metrics.waiting.fetch_sub(1, Ordering::Relaxed);
            self.admissions += 1;
            seq.admit(cache, self.admissions);
            self.running.push(seq);
        }
    }

    /// How many leading tokens of `seq` a cached prefix may stand in for: all but the last
    /// (its logits are needed), and never so many that the first prompt chunk left would be
    /// a single token where the uncached run had a longer chunk (one-token steps take
    /// llama.cpp's single-row kernels, which round differently).
    fn skippable(&self, seq: &Sequence) -> usize {
        let bs = crate::cache::BLOCK_SIZE;
        let mut r = (seq.tokens.len() - 1) / bs * bs;
        let c = self.chunk_positions();
        while r > 0 && r < seq.n_prompt {
            let resumed = seq.n_prompt.min((r / c + 1) * c) - r;
            let original = seq.n_prompt.min((r / c + 1) * c) - r / c * c;
            if (resumed == 1) == (original == 1) {
                break;
            }
            r -= bs;
        }
        r
    }

    /// The chunk length prompt chunks end at multiples of (no chunking: beyond any prompt).
    fn chunk_positions(&self) -> usize {
        self.cfg.prefill_chunk.map_or(usize::MAX, |c| c.max(1))
    }

    /// Tokens each running sequence feeds this step (0 = sits out): every decode (or replay
    /// of an already generated token) first, then prompt chunks in admission order while
    /// the token budget lasts.
    fn plan(&self) -> Vec<usize> {
        let mut take = vec![0usize; self.running.len()];
        let c = self.chunk_positions();
        // After a failed step its sequences run alone, oldest first, until each is past the
        // point where it failed (see `fail_step`).
        let suspect = (0..self.running.len())
            .filter(|&i| self.running[i].suspect.is_some())
            .min_by_key(|&i| self.running[i].admitted);
        if let Some(i) = suspect {
            let seq = &self.running[i];
            let at = seq.n_cached();
            take[i] = if at < seq.n_prompt { seq.chunk_end(at, c) - at } else { seq.decode_take() };
            return take;
        }
        let mut budget = self.cfg.step_tokens.max(1);
        for (i, seq) in self.running.iter().enumerate() {
            if seq.n_cached() >= seq.n_prompt {
                take[i] = seq.decode_take();
                budget = budget.saturating_sub(take[i]);
            }
        }
        let mut any = take.iter().any(|&n| n > 0);
        let mut first_prompt = true;
        for (i, seq) in self.running.iter().enumerate() {
            let at = seq.n_cached();
            if at < seq.n_prompt {
                let n = seq.chunk_end(at, c) - at;
                // An embedding's input is one chunk, which may exceed what the decodes leave.
                // The first prompt in line then runs over the budget — else a steady
                // generation load would hold it back forever — once the decodes have had as
                // much time alone as such steps took: half the time each while both wait.
                let whole = first_prompt && seq.embed.is_some() && self.embed_debt.is_zero();
                first_prompt = false;
                if any && n > budget && !whole {
                    break; // FIFO: later prompts wait rather than overtake this one
                }
                take[i] = n;
                budget = budget.saturating_sub(n);
                any = true;
            }
        }
        take
    }

    /// Preempts the newest running sequences until the step's KV blocks fit; they go back to
    /// the front of the queue and recompute (mostly from the prefix cache) when re-admitted.
    fn plan_within_kv(&mut self) -> Vec<usize> {
        loop {
            let take = self.plan();
            let need: usize =
                self.running.iter().zip(&take).map(|(s, &n)| self.kv.blocks_needed(&s.cache, n)).sum();
            if need <= self.kv.n_available() || self.running.len() <= 1 {
                return take;
            }
            let newest = (0..self.running.len()).max_by_key(|&i| self.running[i].admitted).unwrap_or(0);
            let mut seq = self.running.remove(newest);
            self.kv.release(&mut seq.cache);
            self.metrics.preemptions_total.fetch_add(1, Ordering::Relaxed);
            self.requeue(seq);
        }
    }

    /// Notes which sequences `take` feeds (see `in_step`).
    fn note_step(&mut self, take: &[usize]) {
        self.in_step.clear();
        let fed = self.running.iter().zip(take).filter(|(_, &n)| n > 0);
        self.in_step.extend(fed.map(|(s, _)| s.admitted));
    }

    /// Drafts for the sequences that decode this step (`Sequence::propose`), while the step's
    /// token budget and the free KV blocks (beyond a block of headroom per sequence) last.
    /// None while a failed step's sequences run alone, nor in a batch big enough for the
    /// row-parallel decode (two sequences per kernel thread): its rows already share each weight
    /// read, and that path takes one-token rows only.
    fn propose_drafts(&mut self) {
        let busy = self.running.len() >= 2 * crate::runtime::pool::global().threads();
        let off = busy || self.running.iter().any(|s| s.suspect.is_some());
        let mut budget = self.cfg.step_tokens.saturating_sub(self.running.len());
        let mut blocks = self.kv.n_available().saturating_sub(self.running.len());
        let mut asks = Vec::new();
        for (index, seq) in self.running.iter_mut().enumerate() {
            seq.draft.clear();
            if off || budget == 0 {
                continue;
            }
            if seq.spec.method == SpecMethod::DraftModel && self.drafter.is_some() {
                // The draft model's guesses come later, all sequences at once: the room is
                // taken whole (a draft may come out shorter).
                let Some(mut room) = seq.draft_room(budget) else { continue };
                while room > 0 && self.kv.blocks_needed(&seq.cache, room + 1) > blocks {
                    room -= 1;
                }
                if room > 0 {
                    blocks -= self.kv.blocks_needed(&seq.cache, room + 1);
                    budget -= room;
                    asks.push(draft_model::DraftAsk { index, room });
                }
                continue;
            }
            seq.propose(budget);
            let need = self.kv.blocks_needed(&seq.cache, seq.draft.len());
            if need > blocks {
                seq.draft.clear();
                continue;
            }
            blocks -= need;
            budget -= seq.draft.len().saturating_sub(1);
        }
        if let (Some(drafter), false) = (self.drafter.as_mut(), asks.is_empty()) {
            // A failed draft step costs only its drafts: the sequences decode without.
            let _ = drafter.propose(&mut self.running, &asks);
        }
    }

    fn step(&mut self) -> crate::Result<()> {
        self.propose_drafts();
        let mut take = self.plan_within_kv();
        self.note_step(&take);
        if self.encode_images(&take) {
            take = self.plan_within_kv();
            self.note_step(&take);
            if take.iter().all(|&n| n == 0) {
                return Ok(());
            }
        }
        self.inject_step_fault(&take);
        let fed = |s: &Sequence, n: usize| n > 0 && (s.n_cached() >= s.n_prompt || s.embed.is_some());
        let decodes = self.running.iter().zip(&take).any(|(s, &n)| fed(s, n) && s.embed.is_none());
        let embeds = self.running.iter().zip(&take).any(|(s, &n)| fed(s, n) && s.embed.is_some());
        let t0 = Instant::now();
        let result = self.forward_and_sample(&take);
        match (decodes, embeds) {
            (true, true) => self.embed_debt += t0.elapsed(),
            (true, false) => self.embed_debt = self.embed_debt.saturating_sub(t0.elapsed()),
            _ => {}
        }
        result
    }

    /// Runs the model over the step `take` plans and samples (or pools) its outputs.
    fn forward_and_sample(&mut self, take: &[usize]) -> crate::Result<()> {
        let n_embd = self.model.info().n_embd;
        let out = {
            let mut batch: Vec<StepSeq<'_>> = Vec::with_capacity(self.running.len());
            for (seq, &n) in self.running.iter_mut().zip(take) {
                if n > 0 {
                    let Sequence { tokens, cache, images, embed, lora, draft, .. } = &mut **seq;
                    let at = cache.len();
                    let lora = Some(&*lora).filter(|l| !l.is_empty());
                    if !draft.is_empty() {
                        batch.push(StepSeq { verify: true, lora, ..StepSeq::tokens(draft, cache) });
                        continue;
                    }
                    let embeds = images::row_embeds(images, at, at + n, n_embd);
                    let hidden = embed.is_some();
                    let tokens = &tokens[at..at + n];
                    batch.push(StepSeq { tokens, embeds, cache, hidden, lora, verify: false });
                }
            }
            self.model.step(&mut batch, &mut self.kv)?
        };
        match &out.logits {
            // Read in place: a copy of every row's logits is megabytes per step at batch 8.
            Some(logits) => {
                let n_vocab = logits.dim(1)?;
                with_host_f32(logits, |logits| self.sample_rows(take, logits, n_vocab, &out.hidden))?
            }
            None => self.sample_rows(take, &[], 0, &out.hidden),
        }
    }

    /// Encodes the images whose positions this step feeds (the encoder runs inside the step,
    /// so text-only sequences batch with image ones). A sequence whose image fails to encode
    /// ends with the error; returns whether any did (the step is then planned again).
    fn encode_images(&mut self, take: &[usize]) -> bool {
        let Some(vision) = self.vision.clone() else { return false };
        let mut failed = vec![];
        for (i, (seq, &n)) in self.running.iter_mut().zip(take).enumerate() {
            let at = seq.n_cached();
            if n == 0 || seq.images.is_empty() || at >= seq.n_prompt {
                continue;
            }
            let enc = images::ensure_encoded(
                &mut seq.images,
                at,
                at + n,
                &vision,
                &mut self.image_cache,
                &self.metrics,
            );
            if let Err(e) = enc {
                failed.push((i, e));
            }
        }
        let any = !failed.is_empty();
        for (i, e) in failed.into_iter().rev() {
            let seq = self.running.remove(i);
            self.retire_failed(seq, e);
        }
        any
    }

    /// Samples every sequence whose step ended its unfed tokens, from its row of `logits`,
    /// pools the embedding requests' `hidden` states, and retires those that finished.
    fn sample_rows(
        &mut self,
        take: &[usize],
        logits: &[f32],
        n_vocab: usize,
        hidden: &[candle_core::Tensor],
    ) -> crate::Result<()> {
        self.metrics.steps_total.fetch_add(1, Ordering::Relaxed);
        let mut finished: Vec<(usize, Result<FinishReason, WickError>)> = Vec::new();
        let planned = take.iter().enumerate().filter(|(_, &n)| n > 0);
        let (mut row, mut hidden) = (0, hidden.iter());
        for (i, &n) in planned {
            let seq = &mut self.running[i];
            let at = seq.n_cached();
            let prompt_fed = at.min(seq.n_prompt) - (at - n).min(seq.n_prompt);
            self.metrics.prompt_tokens_total.fetch_add(prompt_fed, Ordering::Relaxed);
            if seq.embed.is_some() {
                // Never shared: a bidirectional model's KV depends on the whole input.
                let h = hidden.next().ok_or_else(|| WickError::Internal("missing hidden states".into()))?;
                let end = with_host_f32(h, |h| seq.on_hidden(h, &self.embed_head))?;
                finished.push((i, end));
                continue;
            }
            let row_now = row;
            if !seq.draft.is_empty() {
                let rows = seq.draft.len();
                row += rows;
                let before = seq.generated();
                let logits = &logits[row_now * n_vocab..(row_now + rows) * n_vocab];
                let (end, kept) = seq.on_verified(logits, &self.tokenizer, &self.metrics);
                self.metrics.generation_tokens_total.fetch_add(seq.generated() - before, Ordering::Relaxed);
                let pos0 = seq.n_cached() - rows;
                self.kv.truncate(&mut seq.cache, pos0 + kept)?;
                self.kv.register_full(&mut seq.cache, &seq.tokens);
                if let Some(end) = end {
                    finished.push((i, end));
                }
                continue;
            }
            row += 1;
            self.kv.register_full(&mut seq.cache, &seq.tokens);
            if seq.unfed() > 0 {
                continue; // more prompt chunks, or generated tokens to replay, to go
            }
            seq.feed_run = false;
            let before = seq.generated();
            let row = &logits[row_now * n_vocab..(row_now + 1) * n_vocab];
            let end = seq.on_logits(row, &self.tokenizer, &self.metrics).transpose();
            self.metrics.generation_tokens_total.fetch_add(seq.generated() - before, Ordering::Relaxed);
            if let Some(end) = end {
                finished.push((i, end));
            }
        }
        // Highest index first so removing one never moves another still to be removed.
        for (i, end) in finished.into_iter().rev() {
            let seq = self.running.remove(i);
            match end {
                Ok(reason) => self.retire(seq, reason),
                Err(e) => self.retire_failed(seq, e),
            }
        }
        Ok(())
    }

    fn publish(&self) {
        let s = &self.metrics;
        s.running.store(self.running.len(), Ordering::Relaxed);
        s.kv_blocks_used.store(self.kv.n_used(), Ordering::Relaxed);
        s.kv_blocks_cached.store(self.kv.n_cached(), Ordering::Relaxed);
    }
}
