//! Log-probabilities of the model's raw next-token distribution (before sampling filters),
//! as OpenAI's `logprobs` / `top_logprobs` report them.

#[derive(Debug, Clone, PartialEq)]
pub struct TokenLogprob {
    pub id: u32,
    pub logprob: f32,
}

fn log_sum_exp(logits: &[f32]) -> f32 {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f32 = logits.iter().map(|&l| (l - max).exp()).sum();
    max + sum.ln()
}

/// The chosen token's logprob and the `n` most likely alternatives.
pub fn top_logprobs(logits: &[f32], chosen: u32, n: usize) -> (TokenLogprob, Vec<TokenLogprob>) {
    let lse = log_sum_exp(logits);
    let chosen_lp = logits.get(chosen as usize).map_or(f32::NEG_INFINITY, |l| l - lse);
    let mut idx: Vec<u32> = (0..logits.len() as u32).collect();
    let n = n.min(idx.len());
    if n > 0 && n < idx.len() {
        idx.select_nth_unstable_by(n - 1, |&a, &b| logits[b as usize].total_cmp(&logits[a as usize]));
    }
    idx.truncate(n);
    idx.sort_unstable_by(|&a, &b| logits[b as usize].total_cmp(&logits[a as usize]));
    let top = idx.into_iter().map(|id| TokenLogprob { id, logprob: logits[id as usize] - lse }).collect();
    (TokenLogprob { id: chosen, logprob: chosen_lp }, top)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logprobs_normalise() {
        let logits = [0.0f32, 1.0, 2.0];
        let (c, top) = top_logprobs(&logits, 2, 3);
        let total: f32 = top.iter().map(|t| t.logprob.exp()).sum();
        assert!((total - 1.0).abs() < 1e-5);
        assert_eq!(top[0].id, 2);
        assert_eq!(c.logprob, top[0].logprob);
    }
}
