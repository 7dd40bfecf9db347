//! Crash isolation through the public engine API, with the `WICK_FAULT` hooks set in the
//! options: a panic inside a model step fails only its culprit (the sequences batched with it
//! answer as they do without the fault, and the KV pool gets every block back); a scheduler
//! thread that dies answers every request at once with ENGINE_DEAD and says so in `health()`.

use std::time::{Duration, Instant};

use tokio::sync::mpsc::error::TryRecvError;
use wick_core::engine::SequenceHandle;
use wick_core::request::{Event, GenerateRequest};
use wick_core::scheduler::Fault;
use wick_core::{Engine, WickError};

mod common;

use common::engine::{cached_fixture, chat, collect, fold, req, run, run_together, sampled, smollm2, Output};

const T: &str = "crash_isolation";

/// Three chat prompts and a token only the third (the poisoned one) contains.
fn prompts(engine: &Engine) -> (Vec<Vec<u32>>, u32) {
    let ps: Vec<Vec<u32>> =
        ["What is the capital of France?", "Zebras wear stripes because", "Count to five."]
            .iter()
            .map(|q| chat(engine, q))
            .collect();
    let poison = *ps[1]
        .iter()
        .find(|t| !ps[0].contains(t) && !ps[2].contains(t))
        .expect("a token only the poisoned prompt has");
    (ps, poison)
}

fn reqs(ps: &[Vec<u32>]) -> Vec<GenerateRequest> {
    ps.iter().map(|p| GenerateRequest::greedy(p.clone(), 24)).collect()
}

/// Like `collect`, but a stream that does not end within `limit` fails the test (a hang).
fn collect_within(mut h: SequenceHandle, limit: Duration) -> Result<Output, WickError> {
    let start = Instant::now();
    let mut events = Vec::new();
    loop {
        match h.events.try_recv() {
            Ok(ev) => {
                let last = !matches!(ev, Event::Token(_));
                events.push(ev);
                if last {
                    break;
                }
            }
            Err(TryRecvError::Disconnected) => panic!("the stream closed without a last event"),
            Err(TryRecvError::Empty) => {
                assert!(start.elapsed() < limit, "no last event within {limit:?}: the request hangs");
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }
    fold(events)
}

#[test]
fn a_panicking_step_fails_only_its_culprit_and_the_engine_serves_on() {
    let Some(clean) = smollm2(T, |o| o.max_sequences = 4) else { return };
    let (ps, poison) = prompts(&clean);
    let want = run_together(&clean, reqs(&ps));
    drop(clean);

    let Some(engine) = smollm2(T, |o| {
        o.max_sequences = 4;
        o.fault = Some(Fault::StepPanic(poison));
    }) else {
        return;
    };
    let start = engine.metrics();
    assert_eq!(start.kv_blocks_used, 0);
    // All three in one schedule: the first step batches the poisoned prompt with the others.
    engine.pause().expect("pause");
    let handles: Vec<_> = reqs(&ps).into_iter().map(|r| engine.submit(r).expect("submit")).collect();
    engine.resume().expect("resume");
    let got: Vec<_> = handles.into_iter().map(|h| collect_within(h, Duration::from_secs(120))).collect();

    match &got[1] {
        Err(e @ WickError::Internal(m)) => {
            assert_eq!(e.code(), "INTERNAL");
            assert!(m.contains("panicked") && m.contains("injected fault"), "{m}");
        }
        other => panic!("the poisoned request should fail, got {:?}", other.as_ref().map(|o| &o.text)),
    }
    for i in [0, 2] {
        let out = got[i].as_ref().unwrap_or_else(|e| panic!("request {i} failed with the culprit: {e}"));
        assert_eq!(out.ids, want[i].ids, "request {i} answers as without the fault");
        assert_eq!(out.finish, want[i].finish);
    }
    let m = engine.metrics();
    assert_eq!((m.running, m.waiting), (0, 0));
    assert_eq!(m.kv_blocks_used, start.kv_blocks_used, "every KV block is back");
    // One failed batch (all three suspects), then the culprit failing alone.
    assert_eq!(m.step_failures_total, 2);

    // Later requests are served, the poisoned one still fails on its own.
    assert_eq!(run(&engine, reqs(&ps).remove(0)).ids, want[0].ids);
    let again = collect_within(engine.submit(reqs(&ps).remove(1)).expect("submit"), Duration::from_secs(60));
    assert!(matches!(again, Err(WickError::Internal(_))));
    assert!(engine.health().ok);
    assert_eq!(engine.metrics().kv_blocks_used, 0);
}

/// The same on LFM2 (short-conv state beside the paged KV): prompts longer than a KV block
/// sharing a prefix (so the requeued sequences restart on cached blocks and restored conv
/// snapshots), seeded sampling (the sampler's state survives the failed step).
#[test]
fn a_panicking_step_keeps_conv_state_and_the_prefix_cache_consistent_on_lfm2() {
    let load = |fault| cached_fixture(T, "tiny-lfm2-q8_0.gguf", |o| o.fault = fault);
    let Some(clean) = load(None) else { return };
    let poison = 300;
    assert!(clean.info().model.n_vocab > poison as usize);
    let prefix: Vec<u32> = (10..140).collect();
    let ps = [
        [&prefix[..], &[150, 151]].concat(),
        (0..70).map(|i| if i == 40 { poison } else { 5 + i }).collect(),
        [&prefix[..], &[160]].concat(),
    ];
    let reqs = || -> Vec<GenerateRequest> {
        ps.iter()
            .enumerate()
            .map(|(i, p)| GenerateRequest { ignore_eos: true, ..req(p.clone(), 20, sampled(7 + i as u64)) })
            .collect()
    };
    let want = run_together(&clean, reqs());
    drop(clean);

    let Some(engine) = load(Some(Fault::StepPanic(poison))) else { return };
    engine.pause().expect("pause");
    let handles: Vec<_> = reqs().into_iter().map(|r| engine.submit(r).expect("submit")).collect();
    engine.resume().expect("resume");
    let got: Vec<_> = handles.into_iter().map(|h| collect_within(h, Duration::from_secs(60))).collect();
    assert!(matches!(&got[1], Err(WickError::Internal(m)) if m.contains("injected fault")));
    for i in [0, 2] {
        let out = got[i].as_ref().unwrap_or_else(|e| panic!("request {i} failed with the culprit: {e}"));
        assert_eq!(out.ids, want[i].ids, "request {i} answers as without the fault");
    }
    let m = engine.metrics();
    assert_eq!((m.running, m.waiting, m.kv_blocks_used, m.step_failures_total), (0, 0, 0, 2));
}

#[test]
fn a_dead_scheduler_answers_every_request_at_once_and_reports_why() {
    let Some(probe) = smollm2(T, |o| o.vocab_only = true) else { return };
    let (ps, poison) = prompts(&probe);
    drop(probe);
    let Some(engine) = smollm2(T, |o| o.fault = Some(Fault::SchedulerExit(poison))) else { return };
    assert!(engine.health().ok);

    // A request under way when the thread dies.
    let mut long = engine.submit(GenerateRequest::greedy(ps[0].clone(), 400)).expect("submit");
    let first = long.events.blocking_recv().expect("a first token");
    assert!(matches!(first, Event::Token(_)));
    let killer = engine.submit(GenerateRequest::greedy(ps[1].clone(), 8)).expect("submit");

    for (what, h) in [("the running request", long), ("the killing request", killer)] {
        match collect_within(h, Duration::from_secs(30)) {
            Err(e @ WickError::EngineDead(_)) => {
                assert_eq!(e.code(), "ENGINE_DEAD");
                assert!(e.to_string().contains("injected fault"), "{e}");
            }
            other => panic!("{what}: expected ENGINE_DEAD, got {:?}", other.map(|o| o.text)),
        }
    }
    let health = engine.health();
    assert!(!health.ok);
    let reason = health.reason.expect("a reason");
    assert!(reason.contains("scheduler thread panicked") && reason.contains("injected fault"), "{reason}");

    // Later submits fail at once, never queue behind a dead thread.
    let t = Instant::now();
    match engine.submit(GenerateRequest::greedy(ps[2].clone(), 8)) {
        Err(e) => assert_eq!(e.code(), "ENGINE_DEAD"),
        Ok(_) => panic!("a dead engine accepted a request"),
    }
    assert!(t.elapsed() < Duration::from_secs(5));
    let m = engine.metrics();
    assert_eq!((m.running, m.waiting, m.kv_blocks_used), (0, 0, 0));
    engine.shutdown();
    assert!(!engine.health().ok);
}

/// A client that stops reading its stream: once more events wait for it than the engine keeps
/// (`max_unread_events`), the sequence is cancelled and its KV freed, and the request batched
/// beside it answers as it does alone.
#[test]
fn a_reader_that_stops_reading_is_cancelled_after_its_bound() {
    // The bound is above the other request's whole stream (64 tokens and done), so a reader
    // descheduled for a while on a loaded machine cannot trip it; only the stalled one can.
    let load = || {
        cached_fixture(T, "tiny-lfm2-q8_0.gguf", |o| {
            o.max_unread_events = 128;
            o.max_sequences = 2;
        })
    };
    let Some(engine) = load() else { return };
    let other = GenerateRequest { ignore_eos: true, ..GenerateRequest::greedy((20..40).collect(), 64) };
    let alone = run(&engine, other.clone());

    let stalled = engine
        .submit(GenerateRequest { ignore_eos: true, ..GenerateRequest::greedy((5..30).collect(), 900) })
        .expect("submit");
    let served = run(&engine, other);
    assert_eq!(served.ids, alone.ids, "the request beside it answers as alone");
    assert_eq!(served.ids.len(), 64);

    // Only now read the stalled stream: it stopped just past the bound, cancelled.
    let start = Instant::now();
    while engine.metrics().running > 0 {
        assert!(start.elapsed() < Duration::from_secs(60), "the stalled sequence is still running");
        std::thread::sleep(Duration::from_millis(5));
    }
    let out = collect(stalled).expect("a cancelled sequence ends with done");
    assert_eq!(out.finish, wick_core::request::FinishReason::Cancelled);
    assert!(
        (129..=132).contains(&out.ids.len()),
        "{} tokens generated past a bound of 128 unread events",
        out.ids.len()
    );
    let m = engine.metrics();
    assert_eq!((m.running, m.waiting, m.kv_blocks_used), (0, 0, 0));
}
