//! Helper threads that compute token masks off the scheduler's critical path: a sequence hands
//! its matcher over right after committing a token, the mask is computed while the next
//! forward pass runs, and the sequence takes matcher and mask back just before it samples.

use std::sync::mpsc::{channel, sync_channel, Receiver, Sender, SyncSender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use llguidance::{CancellationHandle, Matcher};
use toktrie::SimpleVob;

/// The matcher back, with its next step (or llguidance's error message) and the time it took.
type Reply = (Box<Matcher>, Result<Next, String>, Duration);

/// What the grammar allows next: the mask, and the run of tokens it forces from here (llguidance's
/// fast-forward tokens; empty when nothing is forced or the vocabulary is not canonical). When
/// the run is not empty the mask holds its first token alone.
#[derive(Clone)]
pub(super) struct Next {
    pub mask: SimpleVob,
    pub forced: Vec<u32>,
}

/// The next step of `matcher`: the forced run first (llguidance keeps it for the mask).
pub(super) fn next_step(matcher: &mut Matcher) -> Result<Next, String> {
    let forced = matcher.compute_ff_tokens();
    let mask = matcher.compute_mask().map_err(|e| e.to_string())?;
    Ok(Next { mask, forced })
}

struct Job {
    matcher: Box<Matcher>,
    reply: SyncSender<Reply>,
}

/// The queue of the mask threads; clones share it. The threads end when the last clone is
/// dropped (the engine's compiler and every constrained sequence hold one).
#[derive(Clone)]
pub(super) struct MaskWorker {
    tx: Sender<Job>,
}

/// A mask being computed; `wait` returns the matcher with it.
pub(super) struct PendingMask {
    rx: Receiver<Reply>,
    cancel: Option<CancellationHandle>,
}

impl MaskWorker {
    /// A quarter of the cores (1 to 4 threads): masks take a fraction of a forward step, and
    /// every thread here takes time from the kernels while they run.
    pub fn start() -> std::io::Result<Self> {
        let n = std::thread::available_parallelism().map_or(1, |n| (n.get() / 4).clamp(1, 4));
        let (tx, rx) = channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        for i in 0..n {
            let rx = rx.clone();
            std::thread::Builder::new().name(format!("wick-grammar-{i}")).spawn(move || loop {
                let job = match rx.lock() {
                    Ok(rx) => rx.recv(),
                    Err(_) => return,
                };
                let Ok(job) = job else { return };
                // The sequence may be gone (cancelled, finished): nobody to tell. A panic in
                // llguidance drops the reply (the sequence fails with INTERNAL) and keeps the
                // thread serving others.
                let reply = job.reply;
                let matcher = job.matcher;
                if let Ok(r) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| compute(matcher))) {
                    let _ = reply.send(r);
                }
            })?;
        }
        Ok(Self { tx })
    }

    /// Queues the mask computation for `matcher`'s current state.
    pub fn compute(&self, matcher: Box<Matcher>) -> PendingMask {
        let cancel = matcher.cancellation_handle();
        let (reply, rx) = sync_channel(1);
        if let Err(e) = self.tx.send(Job { matcher, reply }) {
            // No thread left (cannot happen while `self` lives): compute here instead.
            let _ = e.0.reply.send(compute(e.0.matcher));
        }
        PendingMask { rx, cancel }
    }
}

fn compute(mut matcher: Box<Matcher>) -> Reply {
    let t = Instant::now();
    let next = next_step(&mut matcher);
    (matcher, next, t.elapsed())
}

impl PendingMask {
    /// Blocks until the mask is there. None if the thread computing it died.
    pub fn wait(self) -> Option<Reply> {
        self.rx.recv().ok()
    }

    /// Asks the computation to stop early (its result is no longer wanted).
    pub fn cancel(&self) {
        if let Some(c) = &self.cancel {
            c.cancel();
        }
    }
}
