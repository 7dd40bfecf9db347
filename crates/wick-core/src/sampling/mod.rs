//! Token sampling: logit bias, penalties, grammar mask, temperature, top-k, top-p, min-p,
//! seeded RNG, and logprobs. Order follows the OpenAI/vLLM convention users of `/v1` expect:
//! bias and penalties on raw logits, then the grammar mask, then temperature, then the
//! truncation filters on the tempered distribution.

pub mod grammar;
mod logprobs;

pub use grammar::SimpleVob;
pub use logprobs::{top_logprobs, TokenLogprob};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::HashMap;

#[derive(Debug, Clone, PartialEq)]
pub struct SamplingParams {
    /// 0 means greedy.
    pub temperature: f32,
    /// 0 means off.
    pub top_k: usize,
    /// 1 means off.
    pub top_p: f32,
    /// 0 means off.
    pub min_p: f32,
    /// Multiplicative (HF/llama.cpp style); 1 means off.
    pub repetition_penalty: f32,
    /// How many of the most recent tokens the repetition penalty looks at; 0 = all.
    pub repeat_last_n: usize,
    /// Additive (OpenAI style).
    pub presence_penalty: f32,
    pub frequency_penalty: f32,
    /// Same seed + same request → same tokens.
    pub seed: Option<u64>,
    /// (token id, bias) added to the raw logits before everything else (OpenAI's
    /// `logit_bias`: -100 effectively bans a token, +100 effectively forces it). Ids must be
    /// below the vocabulary size (checked at submit); a repeated id adds up.
    pub logit_bias: Vec<(u32, f32)>,
}

impl Default for SamplingParams {
    fn default() -> Self {
        Self {
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            repetition_penalty: 1.0,
            repeat_last_n: 64,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            seed: None,
            logit_bias: Vec::new(),
        }
    }
}

impl SamplingParams {
    pub fn greedy() -> Self {
        Self { temperature: 0.0, ..Self::default() }
    }

    pub fn validate(&self) -> Result<(), String> {
        let bad = |what: &str| Err(what.to_string());
        if !(self.temperature.is_finite() && self.temperature >= 0.0) {
            return bad("temperature must be a finite number >= 0");
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return bad("top_p must be in (0, 1]");
        }
        if !(0.0..=1.0).contains(&self.min_p) {
            return bad("min_p must be in [0, 1]");
        }
        if !(self.repetition_penalty.is_finite() && self.repetition_penalty > 0.0) {
            return bad("repetition_penalty must be > 0");
        }
        if !(self.presence_penalty.is_finite() && self.frequency_penalty.is_finite()) {
            return bad("presence_penalty and frequency_penalty must be finite");
        }
        if self.logit_bias.iter().any(|(_, b)| !b.is_finite()) {
            return bad("logit_bias values must be finite");
        }
        Ok(())
    }

    fn has_penalties(&self) -> bool {
        self.repetition_penalty != 1.0 || self.presence_penalty != 0.0 || self.frequency_penalty != 0.0
    }
}

pub struct Sampler {
    params: SamplingParams,
    rng: StdRng,
}

impl Sampler {
    pub fn new(params: SamplingParams) -> Self {
        let rng = match params.seed {
            Some(s) => StdRng::seed_from_u64(s),
            None => StdRng::from_os_rng(),
        };
        Self { params, rng }
    }

    pub fn params(&self) -> &SamplingParams {
        &self.params
    }

    /// Picks the next token; `history` is prompt + generated. The logits are read in place
    /// (the scheduler's output buffer) and copied only when a bias or penalties must edit
    /// them. `generated` is the number of tokens at the end of `history` produced by the model
    /// (presence/frequency penalties apply to those only, as in OpenAI's definition). `mask`
    /// (a grammar's): only its tokens may be picked, as if every other logit were -inf.
    pub fn sample(
        &mut self,
        logits: &[f32],
        history: &[u32],
        generated: usize,
        mask: Option<&SimpleVob>,
    ) -> u32 {
        if self.params.has_penalties() || !self.params.logit_bias.is_empty() {
            let mut edited = logits.to_vec();
            for &(id, bias) in &self.params.logit_bias {
                if let Some(l) = edited.get_mut(id as usize) {
                    *l += bias;
                }
            }
            self.apply_penalties(&mut edited, history, generated);
            return self.pick(&edited, mask);
        }
        self.pick(logits, mask)
    }

    fn pick(&mut self, logits: &[f32], mask: Option<&SimpleVob>) -> u32 {
        if self.params.temperature == 0.0 {
            return mask.map_or_else(|| argmax(logits), |m| masked_argmax(logits, m));
        }
        let inv_t = 1.0 / self.params.temperature;
        let mut cands: Vec<(u32, f32)> = match mask {
            None => logits
                .iter()
                .enumerate()
                .filter(|(_, l)| l.is_finite())
                .map(|(i, &l)| (i as u32, l * inv_t))
                .collect(),
            Some(m) => {
                let mut c = Vec::with_capacity(m.len().min(4096));
                for_each_allowed(m, logits.len(), |i| {
                    if logits[i].is_finite() {
                        c.push((i as u32, logits[i] * inv_t));
                    }
                });
                c
            }
        };
        if cands.is_empty() {
            return mask.map_or_else(|| argmax(logits), |m| masked_argmax(logits, m));
        }
        truncate(&mut cands, &self.params);
        let total: f32 = cands.iter().map(|c| c.1).sum();
        let mut r = self.rng.random::<f32>() * total;
        for c in &cands {
            r -= c.1;
            if r <= 0.0 {
                return c.0;
            }
        }
        cands[cands.len() - 1].0
    }

    fn apply_penalties(&self, logits: &mut [f32], history: &[u32], generated: usize) {
        let p = &self.params;
        let n = logits.len();
        if p.repetition_penalty != 1.0 {
            let window =
                if p.repeat_last_n == 0 { history.len() } else { p.repeat_last_n.min(history.len()) };
            let mut seen = std::collections::HashSet::new();
            for &t in &history[history.len() - window..] {
                let i = t as usize;
                if i < n && seen.insert(t) {
                    let l = &mut logits[i];
                    *l = if *l > 0.0 { *l / p.repetition_penalty } else { *l * p.repetition_penalty };
                }
            }
        }
        if p.presence_penalty != 0.0 || p.frequency_penalty != 0.0 {
            let mut counts: HashMap<u32, u32> = HashMap::new();
            for &t in &history[history.len() - generated.min(history.len())..] {
                *counts.entry(t).or_default() += 1;
            }
            for (t, c) in counts {
                if let Some(l) = logits.get_mut(t as usize) {
                    *l -= c as f32 * p.frequency_penalty + p.presence_penalty;
                }
            }
        }
    }
}

/// Top-k, softmax, top-p and min-p over tempered candidates, leaving each kept token with its
/// probability (the draw then walks them in the order left). Only what a filter can reach is
/// ordered: a full sort of a whole vocabulary every token can cost more than a small model's
/// whole decode step, while top-p and min-p keep a handful of tokens.
fn truncate(cands: &mut Vec<(u32, f32)>, p: &SamplingParams) {
    let desc = |a: &(u32, f32), b: &(u32, f32)| b.1.total_cmp(&a.1);
    if p.top_k > 0 && p.top_k < cands.len() {
        cands.select_nth_unstable_by(p.top_k - 1, desc);
        cands.truncate(p.top_k);
    }
    let max = cands.iter().fold(f32::NEG_INFINITY, |m, c| m.max(c.1));
    let mut sum = 0.0f32;
    for c in cands.iter_mut() {
        c.1 = (c.1 - max).exp();
        sum += c.1;
    }
    for c in cands.iter_mut() {
        c.1 /= sum;
    }
    if p.min_p > 0.0 {
        // The most likely token has probability exp(0) / sum.
        let floor = p.min_p / sum;
        cands.retain(|c| c.1 >= floor);
    }
    if p.top_p < 1.0 {
        // The smallest most-likely prefix holding top_p of the mass: sort a growing head only.
        let mut head = 64.min(cands.len());
        loop {
            if head < cands.len() {
                cands.select_nth_unstable_by(head - 1, desc);
            }
            cands[..head].sort_unstable_by(desc);
            let mut cum = 0.0;
            let reached = cands[..head].iter().position(|c| {
                cum += c.1;
                cum >= p.top_p
            });
            match reached {
                Some(i) => {
                    cands.truncate(i + 1);
                    break;
                }
                None if head == cands.len() => break,
                None => head = (head * 8).min(cands.len()),
            }
        }
    }
}

/// Index of the largest logit; the first one on ties, as llama.cpp's greedy sampler.
/// The first index of the largest logit (NaNs never win; a NaN first logit wins by default,
/// as a plain `>` scan leaves it).
pub fn argmax(logits: &[f32]) -> u32 {
    if logits.first().is_none_or(|l| l.is_nan()) {
        return 0;
    }
    // The maximum over 16 lanes (`>` keeps NaN out, and compiles to vector max), then its
    // first position: two streaming passes instead of a dependent compare per logit.
    let mut lanes = [f32::NEG_INFINITY; 16];
    let chunks = logits.chunks_exact(16);
    let tail = chunks.remainder();
    for c in chunks {
        for (m, &x) in lanes.iter_mut().zip(c) {
            *m = if x > *m { x } else { *m };
        }
    }
    let max = lanes.iter().chain(tail).fold(f32::NEG_INFINITY, |m, &x| if x > m { x } else { m });
    logits.iter().position(|&x| x == max).unwrap_or(0) as u32
}

/// Calls `f` with every token `mask` allows below `n` (the logits row's length: a model may
/// have more or fewer output rows than its tokenizer has tokens).
fn for_each_allowed(mask: &SimpleVob, n: usize, mut f: impl FnMut(usize)) {
    for (w, &bits) in mask.as_slice().iter().enumerate() {
        let mut bits = bits;
        while bits != 0 {
            let i = w * 32 + bits.trailing_zeros() as usize;
            if i >= n {
                return;
            }
            f(i);
            bits &= bits - 1;
        }
    }
}

/// `argmax` over the tokens `mask` allows: the first largest logit (a NaN never wins); the
/// first allowed token if none has a number; 0 if the mask is empty (the grammar then fails
/// on the token, as it must).
fn masked_argmax(logits: &[f32], mask: &SimpleVob) -> u32 {
    let mut best: Option<(usize, f32)> = None;
    let mut first = None;
    for_each_allowed(mask, logits.len(), |i| {
        first.get_or_insert(i);
        let l = logits[i];
        if best.is_none_or(|(_, b)| l > b) && !l.is_nan() {
            best = Some((i, l));
        }
    });
    best.map(|(i, _)| i).or(first).unwrap_or(0) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The scan `argmax` replaces: the first strictly greater logit wins.
    fn argmax_scan(logits: &[f32]) -> u32 {
        let mut best = 0usize;
        for (i, &l) in logits.iter().enumerate() {
            if l > logits[best] {
                best = i;
            }
        }
        best as u32
    }

    #[test]
    fn argmax_is_the_first_largest_logit() {
        let mut s = 9u32;
        let mut next = move || {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            (s % 1000) as f32 / 7.0
        };
        for n in [1usize, 5, 16, 17, 49152, 50257] {
            let mut x: Vec<f32> = (0..n).map(|_| next()).collect();
            assert_eq!(argmax(&x), argmax_scan(&x), "n {n}");
            // Ties: the first copy of the maximum.
            let m = argmax(&x) as usize;
            x[n - 1] = x[m];
            assert_eq!(argmax(&x), argmax_scan(&x), "tie, n {n}");
            // NaNs and infinities.
            x[n / 2] = f32::NAN;
            assert_eq!(argmax(&x), argmax_scan(&x), "nan, n {n}");
            x[n / 3] = f32::INFINITY;
            assert_eq!(argmax(&x), argmax_scan(&x), "inf, n {n}");
        }
        assert_eq!(argmax(&[f32::NAN, 1.0, 2.0]), argmax_scan(&[f32::NAN, 1.0, 2.0]));
        assert_eq!(argmax(&[f32::NEG_INFINITY; 40]), 0);
    }

    fn logits() -> Vec<f32> {
        vec![1.0, 3.0, 2.0, 0.5, 2.9]
    }

    /// The filters as a full sort writes them (the order the draw used to walk).
    fn truncate_by_sorting(mut cands: Vec<(u32, f32)>, p: &SamplingParams) -> Vec<(u32, f32)> {
        cands.sort_unstable_by(|a, b| b.1.total_cmp(&a.1));
        if p.top_k > 0 {
            cands.truncate(p.top_k);
        }
        let max = cands[0].1;
        let sum: f32 = cands.iter().map(|c| (c.1 - max).exp()).sum();
        let mut out: Vec<(u32, f32)> = cands.iter().map(|c| (c.0, (c.1 - max).exp() / sum)).collect();
        if p.top_p < 1.0 {
            let mut cum = 0.0;
            let keep = out.iter().position(|c| {
                cum += c.1;
                cum >= p.top_p
            });
            out.truncate(keep.map_or(out.len(), |i| i + 1));
        }
        if p.min_p > 0.0 {
            let floor = out[0].1 * p.min_p;
            out.retain(|c| c.1 >= floor);
        }
        out
    }

    #[test]
    fn truncation_keeps_what_a_full_sort_keeps() {
        let mut s = 77u32;
        let mut next = move || {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            (s % 100_000) as f32 / 7_000.0
        };
        for n in [3usize, 64, 65, 600, 49152] {
            let cands: Vec<(u32, f32)> = (0..n as u32).map(|i| (i, next())).collect();
            for (top_k, top_p, min_p) in [
                (0, 1.0, 0.0),
                (40, 1.0, 0.0),
                (0, 0.9, 0.0),
                (0, 0.999, 0.0),
                (0, 1.0, 0.05),
                (40, 0.95, 0.05),
                (0, 0.5, 0.3),
            ] {
                let p = SamplingParams { top_k, top_p, min_p, ..Default::default() };
                let mut fast = cands.clone();
                truncate(&mut fast, &p);
                let want = truncate_by_sorting(cands.clone(), &p);
                // Normalising and cumulative sums run in another order (f32 over ~50k values:
                // off by up to ~1e-3), so tokens at the top-p boundary may fall either side of
                // it; apart from those, every token is kept or dropped alike, with the same
                // probability.
                let mut in_fast: std::collections::HashMap<u32, f32> = fast.iter().copied().collect();
                let mut moved = 0.0f32;
                for &(id, w) in &want {
                    match in_fast.remove(&id) {
                        Some(g) => assert!((g - w).abs() <= 1e-4 * w, "{id}: {g} vs {w}"),
                        None => moved += w,
                    }
                }
                moved += in_fast.values().sum::<f32>();
                let limit = if top_p < 1.0 { 2e-3 } else { 0.0 };
                assert!(moved <= limit, "n {n} k {top_k} p {top_p} min_p {min_p}: {moved} of the mass moved");
                if top_p < 1.0 {
                    // The draw walks a top-p set most likely first, as before.
                    assert!(fast.windows(2).all(|w| w[0].1 >= w[1].1));
                }
            }
        }
    }

    #[test]
    fn greedy_picks_max() {
        let mut s = Sampler::new(SamplingParams::greedy());
        assert_eq!(s.sample(&logits(), &[], 0, None), 1);
    }

    #[test]
    fn same_seed_same_tokens() {
        let p = SamplingParams { seed: Some(7), ..Default::default() };
        let run = |p: &SamplingParams| {
            let mut s = Sampler::new(p.clone());
            (0..32).map(|_| s.sample(&logits(), &[], 0, None)).collect::<Vec<_>>()
        };
        assert_eq!(run(&p), run(&p));
        let other = run(&SamplingParams { seed: Some(8), ..Default::default() });
        assert_ne!(run(&p), other);
    }

    #[test]
    fn top_k_one_is_greedy() {
        let mut s = Sampler::new(SamplingParams { top_k: 1, seed: Some(1), ..Default::default() });
        for _ in 0..20 {
            assert_eq!(s.sample(&logits(), &[], 0, None), 1);
        }
    }

    #[test]
    fn top_p_and_min_p_truncate() {
        // With a tiny top_p only the most likely token survives.
        let mut s = Sampler::new(SamplingParams { top_p: 0.01, seed: Some(3), ..Default::default() });
        for _ in 0..20 {
            assert_eq!(s.sample(&logits(), &[], 0, None), 1);
        }
        // min_p 0.95 keeps tokens within 5% of the best: 1 (3.0) and 4 (2.9 → p ratio 0.905) → only 1.
        let mut s = Sampler::new(SamplingParams { min_p: 0.95, seed: Some(3), ..Default::default() });
        for _ in 0..20 {
            assert_eq!(s.sample(&logits(), &[], 0, None), 1);
        }
    }

    #[test]
    fn repetition_penalty_moves_greedy_choice() {
        let p = SamplingParams { repetition_penalty: 2.0, ..SamplingParams::greedy() };
        let mut s = Sampler::new(p);
        // Token 1 (3.0) is penalised to 1.5, so 4 (2.9) wins.
        assert_eq!(s.sample(&logits(), &[1], 0, None), 4);
    }

    #[test]
    fn frequency_penalty_counts_generated_only() {
        let p = SamplingParams { frequency_penalty: 1.0, ..SamplingParams::greedy() };
        let mut s = Sampler::new(p.clone());
        // Token 1 appears in the prompt only: no penalty.
        assert_eq!(s.sample(&logits(), &[1, 1], 0, None), 1);
        let mut s = Sampler::new(p);
        assert_eq!(s.sample(&logits(), &[1, 1], 2, None), 4);
    }

    #[test]
    fn logit_bias_bans_and_forces() {
        // -100 on the greedy token: the runner-up wins.
        let p = SamplingParams { logit_bias: vec![(1, -100.0)], ..SamplingParams::greedy() };
        assert_eq!(Sampler::new(p).sample(&logits(), &[], 0, None), 4);
        // +100 on the least likely token: it wins, at any temperature.
        let p = SamplingParams { logit_bias: vec![(3, 100.0)], seed: Some(5), ..Default::default() };
        let mut s = Sampler::new(p);
        for _ in 0..20 {
            assert_eq!(s.sample(&logits(), &[], 0, None), 3);
        }
        // Bias comes before the penalties: repetition penalty divides the biased logit.
        let p = SamplingParams {
            logit_bias: vec![(0, 3.0)],
            repetition_penalty: 2.0,
            ..SamplingParams::greedy()
        };
        // Token 0: (1 + 3) / 2 = 2.0 < token 1's 3.0.
        assert_eq!(Sampler::new(p).sample(&logits(), &[0], 0, None), 1);
    }

    #[test]
    fn mask_restricts_greedy_and_random_picks() {
        let mut mask = SimpleVob::alloc(5);
        mask.allow_token(0);
        mask.allow_token(2);
        let mut g = Sampler::new(SamplingParams::greedy());
        assert_eq!(g.sample(&logits(), &[], 0, Some(&mask)), 2);
        let mut s = Sampler::new(SamplingParams { seed: Some(11), ..Default::default() });
        let picks: Vec<u32> = (0..200).map(|_| s.sample(&logits(), &[], 0, Some(&mask))).collect();
        assert!(picks.iter().all(|&t| t == 0 || t == 2));
        assert!(picks.contains(&0) && picks.contains(&2));
        // A mask wider than the logits row (a tokenizer with more tokens than output rows).
        let mut wide = SimpleVob::alloc(70);
        wide.allow_token(4);
        wide.allow_token(66);
        assert_eq!(g.sample(&logits(), &[], 0, Some(&wide)), 4);
        // No allowed token has a finite logit: still an allowed one.
        let inf = [f32::NEG_INFINITY, 5.0, f32::NEG_INFINITY, 1.0, 0.0];
        assert_eq!(Sampler::new(SamplingParams::default()).sample(&inf, &[], 0, Some(&mask)), 0);
    }
}
