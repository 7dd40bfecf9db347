//! What the scheduler does when something goes wrong that is no request's fault: a step that
//! panics or errors (its sequences are found out and failed, the others go on), and the
//! scheduler thread itself dying (the engine is marked dead and every request answered).
//! Also the `WICK_FAULT` test hook that provokes both.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};

use super::{Command, Scheduler, Sequence};
use crate::error::{Result, WickError};
use crate::runtime::pool;

/// A fault to inject, for tests: `WICK_FAULT=step-panic:<token id>` panics inside every step
/// whose batch holds a sequence whose prompt contains that token (in the kernel pool's tasks,
/// as a kernel bug would); `WICK_FAULT=scheduler-exit:<token id>` panics in the scheduler loop,
/// outside the step's guard, when such a request arrives (the thread dies).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    StepPanic(u32),
    SchedulerExit(u32),
}

impl Fault {
    /// `WICK_FAULT`, read once per engine load; unset is None.
    pub fn from_env() -> Result<Option<Fault>> {
        match std::env::var("WICK_FAULT") {
            Ok(v) if !v.is_empty() => Fault::parse(&v).map(Some),
            _ => Ok(None),
        }
    }

    pub fn parse(v: &str) -> Result<Fault> {
        let bad = || {
            WickError::InvalidRequest(format!(
                "WICK_FAULT={v}: expected step-panic:<token id> or scheduler-exit:<token id>"
            ))
        };
        let (kind, id) = v.split_once(':').ok_or_else(bad)?;
        let id: u32 = id.trim().parse().map_err(|_| bad())?;
        match kind.trim() {
            "step-panic" => Ok(Fault::StepPanic(id)),
            "scheduler-exit" => Ok(Fault::SchedulerExit(id)),
            _ => Err(bad()),
        }
    }
}

fn prompt_has(seq: &Sequence, id: u32) -> bool {
    seq.tokens[..seq.n_prompt].contains(&id)
}

/// Whether the scheduler thread is alive; shared by the engine (which reads it and refuses
/// requests once it is dead) and the scheduler (which records its death).
#[derive(Default)]
pub struct Health {
    dead: Mutex<Option<String>>,
}

impl Health {
    /// Why the scheduler died, if it did.
    pub fn reason(&self) -> Option<String> {
        self.lock().clone()
    }

    /// Held while a request is handed to the scheduler: once `die` has marked the engine dead
    /// no request gets into the channel, so draining it after that answers every request.
    pub(crate) fn lock(&self) -> MutexGuard<'_, Option<String>> {
        self.dead.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records the first death (a later one would only restate it).
    pub(crate) fn die(&self, reason: String) {
        self.lock().get_or_insert(reason);
    }
}

impl Scheduler {
    /// The `WICK_FAULT=step-panic` hook, called inside a step with its plan.
    pub(super) fn inject_step_fault(&self, take: &[usize]) {
        let Some(Fault::StepPanic(id)) = self.cfg.fault else { return };
        let hit = self.running.iter().zip(take).any(|(s, &n)| n > 0 && prompt_has(s, id));
        if hit {
            // Every task panics, so whichever threads run them (helpers or the caller), the
            // pool's panic path is the one taken.
            pool::run(pool::threads().max(2), &|_| panic!("injected fault (WICK_FAULT=step-panic:{id})"));
        }
    }

    /// The `WICK_FAULT=scheduler-exit` hook, called as a request arrives.
    pub(super) fn inject_exit_fault(&self, seq: &Sequence) {
        if let Some(Fault::SchedulerExit(id)) = self.cfg.fault {
            if prompt_has(seq, id) {
                panic!("injected fault (WICK_FAULT=scheduler-exit:{id})");
            }
        }
    }

    /// A step failed (`reason`: its error or panic). Its state cannot be trusted, so its
    /// sequences give their KV blocks and conv state back. Run alone, the failing sequence is
    /// the one that failed: it ends with INTERNAL naming `reason`. Batched with others, the
    /// culprit is not known: each goes back to the queue (like a preempted sequence, keeping
    /// its generated tokens) as a suspect, and suspects then run one at a time until each is
    /// past the point where the step failed — the culprit fails alone, the others go on.
    pub(super) fn fail_step(&mut self, reason: String) {
        self.metrics.step_failures_total.fetch_add(1, Ordering::Relaxed);
        let in_step = std::mem::take(&mut self.in_step);
        let involved: Vec<usize> = (0..self.running.len())
            .filter(|&i| in_step.is_empty() || in_step.contains(&self.running[i].admitted))
            .collect();
        let mut seqs: Vec<Box<Sequence>> = involved.iter().rev().map(|&i| self.running.remove(i)).collect();
        for seq in seqs.iter_mut() {
            self.kv.release(&mut seq.cache);
        }
        if let [_] = seqs.as_slice() {
            self.publish();
            if let Some(seq) = seqs.pop() {
                seq.fail(WickError::Internal(reason));
            }
            return;
        }
        for mut seq in seqs.into_iter().rev() {
            seq.suspect = Some(seq.tokens.len());
            self.requeue(seq);
        }
        self.publish();
    }

    /// After a good step: suspects past the point where their batch failed are cleared.
    pub(super) fn clear_suspects(&mut self) {
        for seq in self.running.iter_mut() {
            if seq.suspect.is_some_and(|at| seq.cache.len() >= at) {
                seq.suspect = None;
            }
        }
    }

    /// Puts a running sequence (its cache released) back in the queue: ahead of later
    /// arrivals, behind none, as it was admitted before them.
    pub(super) fn requeue(&mut self, mut seq: Box<Sequence>) {
        // Its cache is gone: generated tokens are replayed one a step, a forced run too.
        seq.feed_run = false;
        seq.draft.clear();
        self.metrics.waiting.fetch_add(1, Ordering::Relaxed);
        let at = self.waiting.iter().position(|w| w.admitted == 0 || w.admitted > seq.admitted);
        self.waiting.insert(at.unwrap_or(self.waiting.len()), seq);
    }

    /// The scheduler loop panicked outside a step's guard: the engine is dead. Every request
    /// it holds, and every one still in the channel, ends with ENGINE_DEAD naming `reason`;
    /// the engine refuses new ones from here on.
    pub(super) fn die(&mut self, health: &Arc<Health>, reason: String) {
        health.die(reason.clone());
        let dead = || WickError::EngineDead(reason.clone());
        for mut seq in self.running.drain(..).chain(self.waiting.drain(..)) {
            self.kv.release(&mut seq.cache);
            seq.fail(dead());
        }
        while let Ok(cmd) = self.rx.try_recv() {
            if let Command::Submit(seq) = cmd {
                seq.fail(dead());
            }
        }
        self.metrics.waiting.store(0, Ordering::Relaxed);
        self.publish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_hook() {
        assert_eq!(Fault::parse("step-panic:42").ok(), Some(Fault::StepPanic(42)));
        assert_eq!(Fault::parse("scheduler-exit:7").ok(), Some(Fault::SchedulerExit(7)));
        for bad in ["step-panic", "step-panic:x", "boom:1", ":1", "step-panic:-1"] {
            assert!(Fault::parse(bad).is_err(), "{bad}");
        }
    }
}
