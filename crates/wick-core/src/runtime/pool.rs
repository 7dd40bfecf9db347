//! A persistent fork-join pool for the CPU kernels: `threads - 1` helper threads started once,
//! the calling thread working too, tasks claimed from an atomic counter.
//!
//! Why not rayon's global pool: a rayon call from a non-pool thread (Wick's scheduler) queues
//! the job, puts the caller to sleep and wakes it when the job is done — two cross-thread
//! wake-ups per op, a few hundred ops per token. On a loaded 2-core machine each wake-up can
//! wait a whole scheduler slice, and decode slows to a crawl at few threads. Here the
//! caller runs tasks itself and only waits for tasks a helper has already claimed: a helper
//! that is slow to wake costs nothing, the caller simply does its share.
//!
//! Helpers spin briefly after each job (ops follow each other within microseconds) and then
//! park on a condvar. Size: `set_threads` (the engine's `threads` option) before first use,
//! else `WICK_THREADS`, else every core.

use std::any::Any;
use std::cell::Cell;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

struct Job<'a> {
    f: &'a (dyn Fn(usize) + Sync),
    n: usize,
    next: AtomicUsize,
    id: u64,
}

struct Shared {
    /// The job on offer (null: none). Valid while `active > 0` or the caller is inside `run`.
    job: AtomicPtr<Job<'static>>,
    /// Helpers currently holding a reference to `job`.
    active: AtomicUsize,
    sleeping: AtomicUsize,
    ids: AtomicU64,
    lock: Mutex<()>,
    wake: Condvar,
}

pub struct Pool {
    threads: usize,
    shared: &'static Shared,
    /// One job at a time: callers from different threads queue here.
    run_lock: Mutex<()>,
}

/// How long a helper polls for the next job before parking (`WICK_SPIN_US`, default 100).
fn spin() -> Duration {
    static S: OnceLock<Duration> = OnceLock::new();
    *S.get_or_init(|| {
        let us = std::env::var("WICK_SPIN_US").ok().and_then(|v| v.parse().ok()).unwrap_or(100);
        Duration::from_micros(us)
    })
}

fn helper(s: &'static Shared) {
    let mut last = 0u64;
    let spin = spin();
    loop {
        // Spin, then park, until a job this helper has not run yet is on offer.
        let start = Instant::now();
        let mut polls = 0u32;
        loop {
            // Cheap poll first (the pointer value only, never dereferenced here).
            if s.job.load(SeqCst).is_null() {
                polls += 1;
                if polls.is_multiple_of(64) && start.elapsed() > spin {
                    park(s, last);
                    break;
                }
                std::hint::spin_loop();
                continue;
            }
            s.active.fetch_add(1, SeqCst);
            let p = s.job.load(SeqCst);
            if !p.is_null() {
                // SAFETY: the caller does not return (and the job stays alive) while
                // `active > 0`, and it clears `job` before waiting for `active == 0`.
                let job = unsafe { &*p };
                if job.id != last {
                    last = job.id;
                    loop {
                        let i = job.next.fetch_add(1, SeqCst);
                        if i >= job.n {
                            break;
                        }
                        (job.f)(i);
                    }
                    s.active.fetch_sub(1, SeqCst);
                    break;
                }
            }
            s.active.fetch_sub(1, SeqCst);
            polls += 1;
            if polls.is_multiple_of(64) && start.elapsed() > spin {
                park(s, last);
                break;
            }
            std::hint::spin_loop();
        }
    }
}

thread_local! {
    /// Whether this thread is running one of a job's tasks.
    static IN_TASK: Cell<bool> = const { Cell::new(false) };
}

/// Sleeps until `run` offers a job (unless one this helper has not run is already on offer).
fn park(s: &'static Shared, last: u64) {
    let g = s.lock.lock().unwrap_or_else(|e| e.into_inner());
    s.sleeping.fetch_add(1, SeqCst);
    s.active.fetch_add(1, SeqCst);
    let p = s.job.load(SeqCst);
    // SAFETY: as in `helper`, `active > 0` keeps an offered job alive.
    let fresh = !p.is_null() && unsafe { (*p).id } != last;
    s.active.fetch_sub(1, SeqCst);
    if !fresh {
        drop(s.wake.wait(g).unwrap_or_else(|e| e.into_inner()));
    }
    s.sleeping.fetch_sub(1, SeqCst);
}

impl Pool {
    fn new(threads: usize) -> Self {
        let shared: &'static Shared = Box::leak(Box::new(Shared {
            job: AtomicPtr::new(std::ptr::null_mut()),
            active: AtomicUsize::new(0),
            sleeping: AtomicUsize::new(0),
            ids: AtomicU64::new(1),
            lock: Mutex::new(()),
            wake: Condvar::new(),
        }));
        for i in 1..threads {
            std::thread::Builder::new()
                .name(format!("wick-cpu-{i}"))
                .spawn(move || helper(shared))
                .expect("spawn wick cpu thread");
        }
        Self { threads, shared, run_lock: Mutex::new(()) }
    }

    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Calls `f(i)` for every `i < n`, spread over the pool; returns when all calls are done.
    pub fn run(&self, n: usize, f: &(dyn Fn(usize) + Sync)) {
        if n == 0 {
            return;
        }
        // A task that itself calls `run` does the inner work on its own thread (the pool is busy
        // with the outer job; waiting for it would deadlock).
        if self.threads == 1 || n == 1 || IN_TASK.with(Cell::get) {
            (0..n).for_each(f);
            return;
        }
        // A panicking task must neither end a helper thread (the caller would wait for it
        // forever) nor unwind out of the caller while helpers still read `job` from its
        // stack: it is caught here and raised again on the caller once every helper is out.
        let panicked: Mutex<Option<Box<dyn Any + Send>>> = Mutex::new(None);
        let f = &|i: usize| {
            IN_TASK.with(|t| t.set(true));
            if let Err(p) = catch_unwind(AssertUnwindSafe(|| f(i))) {
                panicked.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert(p);
            }
            IN_TASK.with(|t| t.set(false));
        };
        let one = self.run_lock.lock().unwrap_or_else(|e| e.into_inner());
        let s = self.shared;
        let job = Job { f, n, next: AtomicUsize::new(0), id: s.ids.fetch_add(1, SeqCst) };
        // SAFETY: the pointer is withdrawn and all helpers are out before `job` is dropped.
        let p = &job as *const Job<'_> as *mut Job<'static>;
        s.job.store(p, SeqCst);
        if s.sleeping.load(SeqCst) > 0 {
            let _g = s.lock.lock().unwrap_or_else(|e| e.into_inner());
            s.wake.notify_all();
        }
        loop {
            let i = job.next.fetch_add(1, SeqCst);
            if i >= n {
                break;
            }
            f(i);
        }
        s.job.store(std::ptr::null_mut(), SeqCst);
        while s.active.load(SeqCst) != 0 {
            std::hint::spin_loop();
        }
        drop(one);
        if let Some(p) = panicked.into_inner().unwrap_or_else(|e| e.into_inner()) {
            resume_unwind(p);
        }
    }
}

fn default_threads() -> usize {
    std::env::var("WICK_THREADS")
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|&t| t > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// The global pool's size, fixed once: by `set_threads`, or else by the first look at it.
static THREADS: OnceLock<usize> = OnceLock::new();

/// The global pool's size (fixing it to the default if nothing has yet).
pub fn threads() -> usize {
    *THREADS.get_or_init(default_threads)
}

/// Fixes the global pool's size to `n` threads. A pool is never resized, so once the size is
/// fixed (by an earlier call or by first use) asking for another fails with the size in effect;
/// so does asking for 0.
pub fn set_threads(n: usize) -> Result<(), usize> {
    let fixed = if n == 0 { threads() } else { *THREADS.get_or_init(|| n) };
    if fixed == n {
        Ok(())
    } else {
        Err(fixed)
    }
}

/// The process-wide pool, started on first use.
pub fn global() -> &'static Pool {
    static P: OnceLock<Pool> = OnceLock::new();
    P.get_or_init(|| Pool::new(threads()))
}

/// `global().run(n, f)`.
pub fn run(n: usize, f: &(dyn Fn(usize) + Sync)) {
    global().run(n, f)
}

/// A raw pointer that tasks writing disjoint parts of one buffer can share.
pub struct SyncPtr<T>(pub *mut T);
impl<T> Clone for SyncPtr<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for SyncPtr<T> {}
// SAFETY: the type's contract (above): the tasks that share it write disjoint parts of one
// buffer, which outlives them.
unsafe impl<T> Send for SyncPtr<T> {}
// SAFETY: as for `Send` above: shared only among tasks touching disjoint elements.
unsafe impl<T> Sync for SyncPtr<T> {}
impl<T> SyncPtr<T> {
    /// The pointer (a method, so closures capture the whole `SyncPtr`, not its field).
    #[inline(always)]
    pub fn get(self) -> *mut T {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_every_task_once() {
        let pool = Pool::new(3);
        for n in [1usize, 2, 7, 100, 1000] {
            let hits: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
            pool.run(n, &|i| {
                hits[i].fetch_add(1, SeqCst);
            });
            assert!(hits.iter().all(|h| h.load(SeqCst) == 1));
        }
    }

    #[test]
    fn the_global_size_is_fixed_once() {
        let n = threads();
        assert_eq!(set_threads(n), Ok(()));
        assert_eq!(set_threads(n + 1), Err(n));
        assert_eq!(set_threads(0), Err(n));
        assert_eq!(global().threads(), n);
    }

    #[test]
    fn a_panicking_task_reaches_the_caller_and_the_pool_runs_on() {
        let pool = Pool::new(3);
        for _ in 0..20 {
            let hit = std::panic::catch_unwind(|| pool.run(64, &|i| assert!(i % 7 != 3, "task {i} failed")));
            let msg = hit.expect_err("the task's panic is raised on the caller");
            let msg = msg.downcast_ref::<String>().cloned().unwrap_or_default();
            assert!(msg.contains("failed"), "{msg}");
            let hits: Vec<AtomicUsize> = (0..100).map(|_| AtomicUsize::new(0)).collect();
            pool.run(100, &|i| {
                hits[i].fetch_add(1, SeqCst);
            });
            assert!(hits.iter().all(|h| h.load(SeqCst) == 1), "every helper still serves");
        }
    }

    #[test]
    fn a_task_may_run_a_job_of_its_own() {
        let pool: &'static Pool = Box::leak(Box::new(Pool::new(2)));
        let hits: Vec<AtomicUsize> = (0..64).map(|_| AtomicUsize::new(0)).collect();
        pool.run(8, &|i| {
            pool.run(8, &|j| {
                hits[8 * i + j].fetch_add(1, SeqCst);
            });
        });
        assert!(hits.iter().all(|h| h.load(SeqCst) == 1));
    }
}
