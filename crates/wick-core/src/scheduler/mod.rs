//! The scheduler: one thread per loaded model. Each step admits waiting requests, builds one
//! ragged batch of every running sequence's next tokens (decodes and prompt chunks together),
//! runs the model once, samples, and streams events back.

mod sequence;
mod stop;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, TryRecvError};
use std::sync::Arc;

pub(crate) use sequence::Sequence;

use crate::engine::FinishReason;
use crate::error::WickError;
use crate::models::{Model, StepSeq};
use crate::tokenizer::Tokenizer;

pub(crate) enum Command {
    Submit(Box<Sequence>),
    /// Something changed (a cancel); look at the sequences again.
    Wake,
    Shutdown,
}

/// Counters shared with the engine handle for `metrics()`.
#[derive(Default)]
pub struct SchedulerStats {
    pub running: AtomicUsize,
    /// Submitted but not yet admitted (includes commands still in the channel).
    pub waiting: AtomicUsize,
    pub prompt_tokens_total: AtomicUsize,
    pub generation_tokens_total: AtomicUsize,
    pub steps_total: AtomicUsize,
}

pub(crate) struct SchedulerConfig {
    pub max_seqs: usize,
    /// Tokens in one forward step (decodes plus prompt chunks); a lone chunk may exceed it.
    pub step_tokens: usize,
    /// Prompt tokens a sequence feeds per step. Fixed per sequence, never cut to fit what
    /// others left: a sequence's numerics depend on how its prompt is split, so equal splits
    /// keep its output the same whether it runs alone or in a batch.
    pub prefill_chunk: usize,
}

pub(crate) struct Scheduler {
    model: Box<dyn Model>,
    tokenizer: Arc<Tokenizer>,
    rx: Receiver<Command>,
    cfg: SchedulerConfig,
    stats: Arc<SchedulerStats>,
    waiting: VecDeque<Box<Sequence>>,
    running: Vec<Box<Sequence>>,
}

impl Scheduler {
    pub fn new(
        model: Box<dyn Model>,
        tokenizer: Arc<Tokenizer>,
        rx: Receiver<Command>,
        cfg: SchedulerConfig,
        stats: Arc<SchedulerStats>,
    ) -> Self {
        Self { model, tokenizer, rx, cfg, stats, waiting: VecDeque::new(), running: Vec::new() }
    }

    pub fn run(mut self) {
        loop {
            if !self.receive() {
                break;
            }
            self.retire_cancelled();
            self.admit();
            if self.running.is_empty() {
                continue;
            }
            // A panic inside a kernel must not take the process down: fail the batch instead.
            let step = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.step()));
            let err = match step {
                Ok(Ok(())) => continue,
                Ok(Err(e)) => e,
                Err(p) => WickError::Internal(format!("forward step panicked: {}", panic_message(&p))),
            };
            for seq in self.running.drain(..) {
                seq.fail(WickError::Internal(err.to_string()));
            }
            self.stats.running.store(0, Ordering::Relaxed);
        }
        for seq in self.running.drain(..).chain(self.waiting.drain(..)) {
            seq.fail(WickError::EngineStopped);
        }
    }

    /// Takes in commands; blocks only when there is nothing to run. False on shutdown.
    fn receive(&mut self) -> bool {
        if self.running.is_empty() && self.waiting.is_empty() {
            match self.rx.recv() {
                Ok(cmd) => {
                    if !self.handle(cmd) {
                        return false;
                    }
                }
                Err(_) => return false,
            }
        }
        loop {
            match self.rx.try_recv() {
                Ok(cmd) => {
                    if !self.handle(cmd) {
                        return false;
                    }
                }
                Err(TryRecvError::Empty) => return true,
                Err(TryRecvError::Disconnected) => return false,
            }
        }
    }

    fn handle(&mut self, cmd: Command) -> bool {
        match cmd {
            Command::Submit(seq) => self.waiting.push_back(seq),
            Command::Wake => {}
            Command::Shutdown => return false,
        }
        true
    }

    fn retire_cancelled(&mut self) {
        let (cancelled, waiting): (Vec<_>, Vec<_>) = self.waiting.drain(..).partition(|s| s.is_cancelled());
        self.waiting = waiting.into();
        self.stats.waiting.fetch_sub(cancelled.len(), Ordering::Relaxed);
        for seq in cancelled {
            seq.finish(FinishReason::Cancelled);
        }
        let mut i = 0;
        while i < self.running.len() {
            if self.running[i].is_cancelled() {
                let seq = self.running.swap_remove(i);
                seq.finish(FinishReason::Cancelled);
            } else {
                i += 1;
            }
        }
        self.stats.running.store(self.running.len(), Ordering::Relaxed);
    }

    /// FIFO admission up to the sequence limit.
    fn admit(&mut self) {
        while self.running.len() < self.cfg.max_seqs {
            let Some(mut seq) = self.waiting.pop_front() else { break };
            self.stats.waiting.fetch_sub(1, Ordering::Relaxed);
            seq.admit(self.model.new_cache());
            self.running.push(seq);
        }
        self.stats.running.store(self.running.len(), Ordering::Relaxed);
    }

    fn step(&mut self) -> crate::Result<()> {
        // Decodes first (one token each, so running streams keep flowing while prompts are
        // prefilled), then whole prompt chunks in admission order while the budget lasts.
        let mut take = vec![0usize; self.running.len()];
        let mut budget = self.cfg.step_tokens.max(1);
        for (i, seq) in self.running.iter().enumerate() {
            if seq.unfed() == 1 {
                take[i] = 1;
                budget = budget.saturating_sub(1);
            }
        }
        let mut any = take.iter().any(|&n| n > 0);
        for (i, seq) in self.running.iter().enumerate() {
            if seq.unfed() > 1 {
                let n = seq.unfed().min(self.cfg.prefill_chunk.max(1));
                if any && n > budget {
                    break; // FIFO: later prompts wait rather than overtake this one
                }
                take[i] = n;
                budget = budget.saturating_sub(n);
                any = true;
            }
        }
        let logits = {
            let mut batch: Vec<StepSeq<'_>> = Vec::with_capacity(self.running.len());
            for (seq, &n) in self.running.iter_mut().zip(&take) {
                let Sequence { tokens, cache: Some(cache), n_cached, .. } = &mut **seq else { continue };
                if n > 0 {
                    batch.push(StepSeq { tokens: &tokens[*n_cached..*n_cached + n], cache });
                }
            }
            self.model.forward(&mut batch)?
        };
        let n_vocab = logits.dim(1)?;
        let logits = logits.flatten_all()?.to_vec1::<f32>()?;
        self.stats.steps_total.fetch_add(1, Ordering::Relaxed);
        let mut finished: Vec<(usize, FinishReason)> = Vec::new();
        let planned = take.iter().enumerate().filter(|(_, &n)| n > 0);
        for (row, (i, &n)) in planned.enumerate() {
            let seq = &mut self.running[i];
            if seq.n_cached < seq.n_prompt {
                self.stats.prompt_tokens_total.fetch_add(n, Ordering::Relaxed);
            }
            seq.n_cached += n;
            if seq.unfed() > 0 {
                continue; // more prompt chunks to go
            }
            let mut row_logits = logits[row * n_vocab..(row + 1) * n_vocab].to_vec();
            self.stats.generation_tokens_total.fetch_add(1, Ordering::Relaxed);
            if let Some(reason) = seq.on_logits(&mut row_logits, &self.tokenizer) {
                finished.push((i, reason));
            }
        }
        // Highest index first so swap_remove never moves a sequence still to be removed.
        for (i, reason) in finished.into_iter().rev() {
            self.running.swap_remove(i).finish(reason);
        }
        self.stats.running.store(self.running.len(), Ordering::Relaxed);
        Ok(())
    }
}

fn panic_message(p: &Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}
