//! A mutation fuzzer over small GGUF models of every architecture: bit flips and absurd
//! numbers in the header, metadata values and tensor directory (counts, dims, offsets, string
//! lengths, types), truncation at every section boundary and at random points. Every case is
//! loaded by the engine; a load that succeeds also generates a few tokens. No case may panic or
//! abort: each is a load error (naming what is wrong) or a model that runs. Seeded, so CI runs
//! the same cases every time; `WICK_FUZZ_CASES` and `WICK_FUZZ_SEED` run others.

mod common;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

use wick_core::request::{Event, GenerateRequest};
use wick_core::{Engine, EngineOptions};

/// xorshift64*: reproducible cases without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// One small model per architecture (byte-level SPM vocab, or LFM2's BPE tool vocab), written
/// once into the test's temp dir.
fn seeds() -> Vec<(String, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("wick-fuzz");
    std::fs::create_dir_all(&dir).expect("temp dir");
    let mut specs: Vec<_> = wick_fixtures::standard_specs()
        .into_iter()
        .chain(wick_fixtures::extra_arch_specs())
        .filter(|s| {
            ["tiny-llama-q8_0.gguf", "tiny-lfm2-q4_0.gguf", "tiny-llama-q4_k.gguf", "tiny-gemma3-q8_0.gguf"]
                .contains(&s.file_name.as_str())
                || s.file_name.starts_with("tiny-qwen")
                || s.file_name.starts_with("tiny-lfm2moe-e4")
        })
        .collect();
    specs.sort_by(|a, b| a.file_name.cmp(&b.file_name));
    let mut out = Vec::new();
    for spec in &specs {
        let path = dir.join(&spec.file_name);
        wick_fixtures::write_fixture(spec, &wick_fixtures::byte_vocab(), &path).expect("write seed");
        out.push((spec.file_name.clone(), std::fs::read(&path).expect("read seed")));
    }
    // A BPE vocabulary with merges and control tokens, on LFM2 (needs llama.cpp's template).
    if let Ok(vocab) = wick_fixtures::ToolVocab::build(&wick_fixtures::default_llama_src(), &[]) {
        let mut spec = wick_fixtures::tool_spec();
        spec.file_name = "tools-lfm2.gguf".into();
        let path = dir.join(&spec.file_name);
        wick_fixtures::write_fixture(&spec, &vocab.metadata(), &path).expect("write tools seed");
        out.push((spec.file_name, std::fs::read(&path).expect("read tools seed")));
    }
    out
}

/// Byte offsets where the file's sections begin and end: after the counts, after each
/// metadata entry, after each tensor entry, the data start, and the end.
fn boundaries(buf: &[u8]) -> Vec<usize> {
    let mut c = 24usize;
    let u64_at = |p: usize| u64::from_le_bytes(buf[p..p + 8].try_into().unwrap());
    let u32_at = |p: usize| u32::from_le_bytes(buf[p..p + 4].try_into().unwrap());
    let mut out = vec![0, 4, 8, 16, 24];
    let (n_tensors, n_kv) = (u64_at(8) as usize, u64_at(16) as usize);
    fn skip_value(buf: &[u8], p: &mut usize, ty: u32) {
        let u64_at = |p: usize| u64::from_le_bytes(buf[p..p + 8].try_into().unwrap());
        let u32_at = |p: usize| u32::from_le_bytes(buf[p..p + 4].try_into().unwrap());
        match ty {
            0 | 1 | 7 => *p += 1,
            2 | 3 => *p += 2,
            4..=6 => *p += 4,
            10..=12 => *p += 8,
            8 => *p += 8 + u64_at(*p) as usize,
            9 => {
                let elem = u32_at(*p);
                let n = u64_at(*p + 4) as usize;
                *p += 12;
                for _ in 0..n {
                    skip_value(buf, p, elem);
                }
            }
            _ => unreachable!("seed files are well formed"),
        }
    }
    for _ in 0..n_kv {
        c += 8 + u64_at(c) as usize;
        let ty = u32_at(c);
        c += 4;
        skip_value(buf, &mut c, ty);
        out.push(c);
    }
    for _ in 0..n_tensors {
        c += 8 + u64_at(c) as usize;
        let n_dims = u32_at(c) as usize;
        c += 4 + 8 * n_dims + 4 + 8;
        out.push(c);
    }
    out.push(c.div_ceil(32) * 32);
    out.push(buf.len());
    out
}

const ABSURD: [u64; 10] = [0, 1, 2, 3, 255, 0x7fff_ffff, 0xffff_ffff, 1 << 40, u64::MAX / 2, u64::MAX];

/// One mutation of `buf` (whose header ends at `header_end`), described for the failure report.
fn mutate(rng: &mut Rng, buf: &[u8], bounds: &[usize]) -> (Vec<u8>, String) {
    let header_end = bounds[bounds.len() - 2];
    let mut b = buf.to_vec();
    match rng.below(6) {
        0 => {
            let at = bounds[rng.below(bounds.len())];
            // Cut at a section boundary, or a few bytes around it.
            let at = (at + rng.below(9)).saturating_sub(4).min(b.len());
            b.truncate(at);
            (b, format!("truncate at {at}"))
        }
        1 => {
            let at = rng.below(b.len());
            b.truncate(at);
            (b, format!("truncate at {at}"))
        }
        2 => {
            let n = 1 + rng.below(8);
            let mut what = String::from("flip bits at");
            for _ in 0..n {
                let at = rng.below(header_end);
                b[at] ^= 1 << rng.below(8);
                what += &format!(" {at}");
            }
            (b, what)
        }
        3 | 4 => {
            // An absurd number where a count, length, dim, type or offset is likely: at a
            // section boundary (a key or name length, a count) or just before the next one.
            let base = bounds[rng.below(bounds.len() - 1)];
            let at = (base + 4 * rng.below(6)).min(header_end.saturating_sub(8));
            let v = ABSURD[rng.below(ABSURD.len())];
            if rng.below(2) == 0 {
                b[at..at + 8].copy_from_slice(&v.to_le_bytes());
            } else {
                b[at..at + 4].copy_from_slice(&(v as u32).to_le_bytes());
            }
            (b, format!("write {v:#x} at {at}"))
        }
        _ => {
            // A metadata number (head counts, lengths, ids …) set to an absurd value: find a
            // u32/i32/u64 value after a key and overwrite it.
            let kv_ends = &bounds[5..bounds.len() - 2];
            let at = kv_ends[rng.below(kv_ends.len().max(1))].saturating_sub(4);
            let v = ABSURD[rng.below(ABSURD.len())] as u32;
            b[at..at + 4].copy_from_slice(&v.to_le_bytes());
            (b, format!("metadata value {v:#x} at {at}"))
        }
    }
}

/// Loads the file and, when it loads, generates a few tokens. Err(message) for a panic or a
/// generation that ended without an end event (a dead scheduler thread).
fn exercise(path: &Path) -> Result<&'static str, String> {
    let run = || -> Result<&'static str, String> {
        let mut o = EngineOptions::new(path);
        o.context_size = Some(48);
        o.max_sequences = 1;
        let engine = match Engine::load(o) {
            Ok(e) => e,
            Err(e) => {
                let msg = e.to_string();
                return if msg.trim().is_empty() {
                    Err("a load error with no message".into())
                } else {
                    Ok("load error")
                };
            }
        };
        let prompt = engine.tokenizer().encode("Hi there", true, false).map_err(|e| e.to_string());
        let prompt = match prompt {
            Ok(p) if !p.is_empty() => p,
            _ => vec![0],
        };
        let mut handle = match engine.submit(GenerateRequest::greedy(prompt, 3)) {
            Ok(h) => h,
            Err(_) => return Ok("submit error"),
        };
        while let Some(ev) = handle.events.blocking_recv() {
            match ev {
                Event::Token(_) | Event::Embedding(_) => {}
                Event::Done(_) | Event::Error(_) => return Ok("ran"),
            }
        }
        Err("the sequence ended without a done or error event (scheduler thread died?)".into())
    };
    match catch_unwind(AssertUnwindSafe(run)) {
        Ok(r) => r,
        Err(p) => Err(format!(
            "panic: {}",
            p.downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default()
        )),
    }
}

#[test]
fn mutated_gguf_files_never_crash_the_engine() {
    let cases: usize = std::env::var("WICK_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(10_000);
    let seeds = seeds();
    if !seeds.iter().any(|(n, _)| n == "tools-lfm2.gguf") {
        common::skip(
            "mutated_gguf_files_never_crash_the_engine (BPE seed)",
            "no llama.cpp source for the LFM2 template (run ./scripts/llama-src.sh)",
        );
    }
    let bounds: Vec<Vec<usize>> = seeds.iter().map(|(_, b)| boundaries(b)).collect();
    let path: PathBuf = Path::new(env!("CARGO_TARGET_TMPDIR")).join("wick-fuzz").join("case.gguf");
    let seed = std::env::var("WICK_FUZZ_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(0x5eed_f022);
    let mut rng = Rng(seed);
    let mut outcomes = std::collections::BTreeMap::<&str, usize>::new();
    let mut crashes = Vec::new();
    // Panics are expected to be caught here; keep their default report out of the log.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    for case in 0..cases {
        let k = rng.below(seeds.len());
        let (mutated, what) = mutate(&mut rng, &seeds[k].1, &bounds[k]);
        std::fs::write(&path, &mutated).expect("write case");
        match exercise(&path) {
            Ok(outcome) => *outcomes.entry(outcome).or_default() += 1,
            Err(e) => crashes.push(format!("case {case}: {} {what}: {e}", seeds[k].0)),
        }
    }
    std::panic::set_hook(hook);
    eprintln!("{cases} mutated files: {outcomes:?}, {} crashes", crashes.len());
    assert!(crashes.is_empty(), "{} of {cases} cases crashed:\n{}", crashes.len(), crashes.join("\n"));
    // The fuzzer reaches past the header checks: some cases load and run.
    assert!(
        outcomes.get("ran").copied().unwrap_or(0) > 0
            && outcomes.get("load error").copied().unwrap_or(0) > cases / 4
    );
}
