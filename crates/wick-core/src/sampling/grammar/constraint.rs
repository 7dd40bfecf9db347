//! One sequence's grammar state. The matcher only ever sees sampled tokens (never the prompt,
//! never a replay after preemption), so recomputing a sequence's KV leaves it as it was.

use std::time::Duration;

use llguidance::Matcher;
use toktrie::SimpleVob;

use super::worker::{MaskWorker, Next, PendingMask};
use crate::error::{Result, WickError};

enum State {
    /// A lazy grammar waiting for its trigger: generation is free.
    Free,
    /// Constraining, with the mask (and forced run) for the next token. (Boxed: a matcher is
    /// ~1.5 kB and moves to a helper thread and back every token.)
    Ready(Box<Matcher>, Next),
    /// Constraining; the mask for the next token is being computed on a helper thread.
    Pending(PendingMask),
}

/// What a committed token did to the grammar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Commit {
    /// Generation goes on (constrained, or free for a lazy grammar).
    Continue,
    /// A grammar without a trigger is complete: the sequence ends here.
    Complete,
}

/// A compiled grammar bound to one sequence: `mask` before sampling, `commit` after.
pub struct Constraint {
    trigger: Option<u32>,
    /// Lazy grammars: the state right after the trigger token, and its mask, from which every
    /// block starts (computed once, at submit).
    armed: Option<(Matcher, Next)>,
    state: State,
    worker: MaskWorker,
}

impl Constraint {
    /// `matcher` and `mask` are the grammar's start (after the trigger token for a lazy one).
    pub(super) fn new(matcher: Matcher, next: Next, trigger: Option<u32>, worker: MaskWorker) -> Self {
        match trigger {
            None => Self { trigger, armed: None, state: State::Ready(Box::new(matcher), next), worker },
            Some(_) => Self { trigger, armed: Some((matcher, next)), state: State::Free, worker },
        }
    }

    /// Whether the next token is constrained (a mask is ready or on its way).
    pub fn is_active(&self) -> bool {
        !matches!(self.state, State::Free)
    }

    /// Makes the mask for the next token ready, waiting for the helper thread if it is still
    /// computing; returns how long the helper took (zero when nothing was pending).
    pub fn ready(&mut self) -> Result<Duration> {
        match std::mem::replace(&mut self.state, State::Free) {
            State::Pending(pending) => {
                let (matcher, next, took) = pending
                    .wait()
                    .ok_or_else(|| WickError::Internal("the grammar mask thread stopped".into()))?;
                self.state = State::Ready(matcher, next.map_err(WickError::InvalidGrammar)?);
                Ok(took)
            }
            other => {
                self.state = other;
                Ok(Duration::ZERO)
            }
        }
    }

    /// The tokens allowed next (after `ready`); None while a lazy grammar waits for its
    /// trigger.
    pub fn mask(&self) -> Option<&SimpleVob> {
        match &self.state {
            State::Ready(_, next) => Some(&next.mask),
            _ => None,
        }
    }

    /// The tokens the grammar forces from the next one on (after `ready`; empty when the next
    /// token is free or the vocabulary is not canonical): the mask allows only the first, and
    /// the rest may be fed without sampling (`commit` takes them all at once).
    pub fn forced(&self) -> &[u32] {
        match &self.state {
            State::Ready(_, next) => &next.forced,
            _ => &[],
        }
    }

    /// Feeds the sampled token — and the forced tokens after it, when `ids` has them — to the
    /// grammar and starts computing the next mask on a helper thread, so it overlaps the next
    /// forward pass.
    pub fn commit(&mut self, ids: &[u32]) -> Result<Commit> {
        match std::mem::replace(&mut self.state, State::Free) {
            State::Free => {
                let [id] = ids else {
                    return Err(WickError::Internal(
                        "a forced run while the grammar waits for its trigger".into(),
                    ));
                };
                if Some(*id) == self.trigger {
                    if let Some((m, next)) = &self.armed {
                        // A grammar that is just the trigger is complete at once: stay free.
                        if !m.is_stopped() {
                            self.state = State::Ready(Box::new(m.clone()), next.clone());
                        }
                    }
                }
                Ok(Commit::Continue)
            }
            State::Ready(mut m, _) => {
                for &id in ids {
                    m.consume_token(id).map_err(|e| WickError::InvalidGrammar(e.to_string()))?;
                }
                if m.is_stopped() {
                    // Lazy: the block is done and generation is free again (state stays Free).
                    return Ok(if self.trigger.is_some() { Commit::Continue } else { Commit::Complete });
                }
                self.state = State::Pending(self.worker.compute(m));
                Ok(Commit::Continue)
            }
            State::Pending(_) => {
                Err(WickError::Internal("a token was committed before its mask was read".into()))
            }
        }
    }
}

impl Drop for Constraint {
    fn drop(&mut self) {
        // A cancelled or finished sequence: stop the helper's work on its mask.
        if let State::Pending(p) = &self.state {
            p.cancel();
        }
    }
}
