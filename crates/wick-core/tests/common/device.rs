//! The device path's checks shared by `device_path.rs` (the whole model on the device) and
//! `split_layers.rs` (`-ngl N`: the first blocks on the exact CPU path, the rest on the
//! device): the agreement measure against the exact path, and the batch and prefix-cache
//! invariants. See `device_path.rs` for the measure and why it is a tolerance.

use std::path::Path;

use candle_core::{Device, Tensor};
use wick_core::cache::{KvPool, KvTypes, SeqCache};
use wick_core::gguf::GgufFile;
use wick_core::models::{self, Model, StepSeq};
use wick_core::runtime::device::{DeviceChoice, Placement};

/// The device path under test: candle's CPU device, or the GPU `WICK_TEST_DEVICE` names; None
/// (after reporting `test` skipped) when that GPU cannot be had.
pub fn under_test(test: &str) -> Option<Placement> {
    let Ok(asked) = std::env::var("WICK_TEST_DEVICE") else { return Some(Placement::generic(Device::Cpu)) };
    let choice: DeviceChoice = asked.parse().expect("WICK_TEST_DEVICE");
    let p = Placement::resolve(choice, None);
    match (p.exact(), &p.notice) {
        (false, _) => Some(p),
        (true, why) => {
            super::skip(test, why.as_deref().unwrap_or("WICK_TEST_DEVICE names the exact CPU path"));
            None
        }
    }
}

/// Deterministic values in about [-1, 1).
pub fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

pub fn fixture_dir() -> &'static Path {
    super::engine::standard_fixtures("wick-device-path")
}

/// The blocks of the model at `path` (`{arch}.block_count`).
pub fn n_layer(path: &Path) -> usize {
    GgufFile::open(path).expect("open").block_count().expect("block_count").expect("a block count")
}

pub struct Loaded {
    pub model: Box<dyn Model>,
    pub kv: KvPool,
}

/// The model at `path` placed as `placement` says, its `-ngl` (if any) fitted to the model.
pub fn load(path: &Path, placement: &Placement) -> Loaded {
    let g = GgufFile::open(path).expect("open");
    let placement = &placement.fit_layers(g.block_count().expect("block_count").expect("a block count"));
    let model = models::load_on(&g, placement).expect("load");
    let kv = KvPool::new_on(&model.cache_layout(), 64, true, placement, KvTypes::F16).expect("kv pool");
    Loaded { model, kv }
}

/// Largest |p_exact − p_device| allowed on any next-token probability (measured: ≤ 0.0 on
/// the Q8_0 fixtures but two steps, ≤ 0.08 on K-quant fixtures and SmolLM2; see RESULTS.md).
pub const PROB_TOL: f32 = 0.1;

pub fn softmax(v: &[f32]) -> Vec<f32> {
    let m = v.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let e: Vec<f64> = v.iter().map(|&x| ((x - m) as f64).exp()).collect();
    let s: f64 = e.iter().sum();
    e.iter().map(|&x| (x / s) as f32).collect()
}

pub fn argmax(v: &[f32]) -> u32 {
    (0..v.len()).max_by(|&i, &j| v[i].total_cmp(&v[j])).unwrap_or(0) as u32
}

pub fn rows(t: &Tensor) -> Vec<Vec<f32>> {
    t.to_vec2::<f32>().expect("logits")
}

pub fn first_row(m: &mut Loaded, tokens: &[u32], cache: &mut SeqCache) -> Vec<f32> {
    rows(&m.model.forward(&mut [StepSeq::tokens(tokens, cache)], &mut m.kv).expect("forward")).remove(0)
}

/// Each step's next-token probabilities after `prompt` (fed in chunks of `chunk`) and then
/// each of `follow` in turn.
pub fn probs_along(m: &mut Loaded, prompt: &[u32], chunk: usize, follow: &[u32]) -> Vec<Vec<f32>> {
    let mut cache = SeqCache::default();
    let mut last = vec![];
    for part in prompt.chunks(chunk) {
        last = first_row(m, part, &mut cache);
    }
    let mut out = vec![softmax(&last)];
    for &t in follow {
        out.push(softmax(&first_row(m, &[t], &mut cache)));
    }
    m.kv.release(&mut cache);
    out
}

/// Greedy decoding of `n` tokens after `prompt`.
pub fn greedy(m: &mut Loaded, prompt: &[u32], chunk: usize, n: usize) -> Vec<u32> {
    let mut cache = SeqCache::default();
    let mut last = vec![];
    for part in prompt.chunks(chunk) {
        last = first_row(m, part, &mut cache);
    }
    let mut ids = vec![];
    for _ in 0..n {
        let t = argmax(&last);
        ids.push(t);
        last = first_row(m, &[t], &mut cache);
    }
    m.kv.release(&mut cache);
    ids
}

/// What `compare` measured for one prompt.
pub struct Agreement {
    pub max_dp: f32,
    /// Steps whose greedy choice differs although the exact path's lead was clear.
    pub clear_flips: usize,
    /// Free-running greedy tokens equal before the first difference, and whether a near-tie
    /// of the exact path came at or before it.
    pub equal_prefix: usize,
    pub tie_first: bool,
    pub n: usize,
}

pub fn compare(exact: &mut Loaded, dev: &mut Loaded, prompt: &[u32], chunk: usize, n: usize) -> Agreement {
    let path = greedy(exact, prompt, chunk, n);
    let (pe, pd) = (probs_along(exact, prompt, chunk, &path), probs_along(dev, prompt, chunk, &path));
    let (mut max_dp, mut clear_flips, mut first_tie) = (0f32, 0, None);
    for (i, (a, b)) in pe.iter().zip(&pd).enumerate() {
        max_dp = a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(max_dp, f32::max);
        let mut sorted = a.clone();
        sorted.sort_by(|x, y| y.total_cmp(x));
        let lead = sorted[0] - sorted.get(1).copied().unwrap_or(0.0);
        if lead <= 2.0 * PROB_TOL {
            first_tie.get_or_insert(i);
        } else if argmax(a) != argmax(b) {
            clear_flips += 1;
        }
    }
    let free = greedy(dev, prompt, chunk, n);
    let equal_prefix = path.iter().zip(&free).take_while(|(a, b)| a == b).count();
    let tie_first = first_tie.is_some_and(|t| t <= equal_prefix);
    Agreement { max_dp, clear_flips, equal_prefix, tie_first, n }
}

/// The report line for `name`, or why it fails.
pub fn verdict(name: &str, a: &Agreement) -> Result<String, String> {
    let line =
        format!("{name}: max |Δp| {:.1e}, greedy equal for {}/{} tokens", a.max_dp, a.equal_prefix, a.n);
    if a.max_dp > PROB_TOL {
        return Err(format!("{line}: max |Δp| > {PROB_TOL}"));
    }
    if a.clear_flips > 0 {
        return Err(format!(
            "{line}: {} greedy choices differ where the exact path's lead was clear",
            a.clear_flips
        ));
    }
    if a.equal_prefix < a.n && !a.tie_first {
        return Err(format!("{line}: free-running greedy text parts with no near-tie before"));
    }
    Ok(line)
}

pub fn check(name: &str, a: &Agreement) -> String {
    verdict(name, a).unwrap_or_else(|e| panic!("{e}"))
}

/// A prompt of `n` byte-vocabulary tokens that crosses KV block boundaries (64 tokens).
pub fn prompt(n: usize) -> Vec<u32> {
    std::iter::once(1).chain((0..n as u32 - 1).map(|i| 3 + (i * 37 + 11) % 250)).collect()
}

/// One fixture of each kind the batch tests cover: dense llama, LFM2 with its conv states, the
/// MoE, Gemma 3 with its window.
pub const BATCH_FIXTURES: [&str; 4] =
    ["tiny-llama-q8_0.gguf", "tiny-lfm2-q4_k.gguf", "tiny-lfm2moe-e4-q8_0.gguf", "tiny-gemma3-q8_0.gguf"];

/// A ragged batch (a 70-token and a 9-token prompt) gives each sequence the logits it gets
/// alone, on each of the batch fixtures placed as `dev_at` says.
pub fn ragged_batch_equals_each_alone(dev_at: &Placement) {
    for name in BATCH_FIXTURES {
        let mut m = load(&fixture_dir().join(name), dev_at);
        let (a, b) = (prompt(70), prompt(9));
        let alone: Vec<Vec<f32>> = [&a, &b]
            .iter()
            .map(|p| {
                let mut c = SeqCache::default();
                let l =
                    rows(&m.model.forward(&mut [StepSeq::tokens(p, &mut c)], &mut m.kv).unwrap()).remove(0);
                m.kv.release(&mut c);
                l
            })
            .collect();
        let (mut ca, mut cb) = (SeqCache::default(), SeqCache::default());
        let together = rows(
            &m.model
                .forward(&mut [StepSeq::tokens(&a, &mut ca), StepSeq::tokens(&b, &mut cb)], &mut m.kv)
                .unwrap(),
        );
        for (i, (x, y)) in alone.iter().zip(&together).enumerate() {
            invariant(dev_at, x, y, &format!("{name}: sequence {i} in a batch"));
        }
    }
}

/// One-token sequences of different lengths decode as one batch (one scatter, one padded
/// gather and batched products per layer; conv states stacked): each step's logits equal those
/// of the sequence decoding alone, also in a step where another sequence's prompt runs beside.
pub fn batched_decodes_equal_each_alone(dev_at: &Placement) {
    for name in BATCH_FIXTURES {
        let mut m = load(&fixture_dir().join(name), dev_at);
        // 130 tokens cross two block boundaries (conv snapshots while batched); 9 need no pad.
        let prompts = [prompt(130), prompt(9), prompt(63)];
        let mut alone: Vec<SeqCache> = prompts.iter().map(|_| SeqCache::default()).collect();
        let mut together: Vec<SeqCache> = prompts.iter().map(|_| SeqCache::default()).collect();
        for caches in [&mut alone, &mut together] {
            for (p, c) in prompts.iter().zip(caches.iter_mut()) {
                first_row(&mut m, p, c);
            }
        }
        let side = prompt(20);
        let follow = [5u32, 17, 3, 250];
        let mut last_alone = vec![];
        for (step, t) in follow.into_iter().enumerate() {
            let one: Vec<Vec<f32>> = alone.iter_mut().map(|c| first_row(&mut m, &[t], c)).collect();
            let mut side_cache = SeqCache::default();
            let token = [t];
            let mut batch: Vec<StepSeq<'_>> =
                together.iter_mut().map(|c| StepSeq::tokens(&token, c)).collect();
            if step == 2 {
                // A prompt between the decodes: the step mixes both kinds.
                batch.insert(1, StepSeq::tokens(&side, &mut side_cache));
            }
            let mut all = rows(&m.model.forward(&mut batch, &mut m.kv).expect("forward"));
            drop(batch);
            if step == 2 {
                all.remove(1);
                m.kv.release(&mut side_cache);
            }
            for (i, (a, b)) in one.iter().zip(&all).enumerate() {
                invariant(dev_at, a, b, &format!("{name}: step {step}, sequence {i} decoding in a batch"));
            }
            last_alone = one;
        }
        // The 63-token prompt's first batched decode filled its first block: the conv states
        // saved then restore the sequence from the prefix cache.
        let tokens: Vec<u32> = prompts[2].iter().chain(&follow).copied().collect();
        m.kv.register_full(&mut together[2], &tokens);
        let mut warm = m.kv.new_seq();
        let reused = m.kv.reuse_prefix(&mut warm, &tokens[..tokens.len() - 1], 0).expect("reuse");
        assert_eq!(reused, 64, "{name}");
        let again = first_row(&mut m, &tokens[reused..], &mut warm);
        invariant(
            dev_at,
            &last_alone[2],
            &again,
            &format!("{name}: a prefix whose block a batched decode ended"),
        );
        m.kv.release(&mut warm);
        for c in alone.iter_mut().chain(together.iter_mut()) {
            m.kv.release(c);
        }
    }
}

/// 128 prompt tokens = two full blocks: a second request takes them from the prefix cache (KV
/// rows, conv states from the snapshots) and feeds only the rest; its logits are the first's.
pub fn reused_prefix_restores_the_state(dev_at: &Placement) {
    let mut m = load(&fixture_dir().join("tiny-lfm2-q8_0.gguf"), dev_at);
    let p = prompt(140);
    let mut first = SeqCache::default();
    let cold = rows(&m.model.forward(&mut [StepSeq::tokens(&p, &mut first)], &mut m.kv).unwrap()).remove(0);
    m.kv.register_full(&mut first, &p);
    m.kv.release(&mut first);
    let mut second = m.kv.new_seq();
    let reused = m.kv.reuse_prefix(&mut second, &p[..p.len() - 1], 0).unwrap();
    assert_eq!(reused, 128);
    let warm = rows(&m.model.forward(&mut [StepSeq::tokens(&p[reused..], &mut second)], &mut m.kv).unwrap())
        .remove(0);
    invariant(dev_at, &cold, &warm, "tiny-lfm2-q8_0.gguf: a reused prefix");
}

/// Logits of one sequence computed two ways (alone and batched; cold and from the prefix
/// cache). On candle's CPU device they are bit-equal. On a GPU cuBLAS picks its GEMM kernel by
/// shape, so the same row summed in a taller product may round differently: there the greedy
/// token must be the same and the logits within 1e-3 of their largest magnitude (printed).
pub fn invariant(dev: &Placement, a: &[f32], b: &[f32], what: &str) {
    let d = a.iter().zip(b).map(|(p, q)| (p - q).abs()).fold(0.0, f32::max);
    if dev.device().is_cpu() {
        assert!(d == 0.0, "{what} differs by {d:e}");
        return;
    }
    let scale = a.iter().fold(0f32, |m, x| m.max(x.abs()));
    eprintln!("{what}: max |Δlogit| {d:.1e} of {scale:.1}");
    assert!(d.is_finite() && d <= 1e-3 * scale, "{what} differs by {d:e} (largest logit {scale})");
    assert_eq!(argmax(a), argmax(b), "{what}: the greedy token differs");
}
