//! A reasoning budget: once a thinking block has run for its budget of tokens, the block's
//! closing marker is forced token by token and the answer follows (llama-server's
//! `--reasoning-budget`, Anthropic's `thinking.budget_tokens`). The block is the one the answer
//! opens with — begun by the prompt (`inside`) or by the model's first tokens — and a model
//! that closes it on its own is left alone.

use crate::request::ReasoningBudget;

enum Phase {
    /// Waiting for the answer to open the block with the start marker.
    Before,
    /// In the block: tokens generated inside it so far.
    Inside(usize),
    /// Forcing the closing marker: how many of its tokens are out.
    Closing(usize),
    /// The block is over (closed, or the answer did not open one).
    Done,
}

pub(crate) struct Budget {
    spec: ReasoningBudget,
    phase: Phase,
}

impl Budget {
    pub fn new(spec: ReasoningBudget) -> Self {
        let phase = if spec.end.is_empty() {
            Phase::Done
        } else if spec.inside {
            Phase::Inside(0)
        } else {
            Phase::Before
        };
        let mut b = Self { spec, phase };
        b.close_if_spent();
        b
    }

    /// The token the budget imposes next, if it imposes one.
    pub fn forced(&self) -> Option<u32> {
        match self.phase {
            Phase::Closing(k) => self.spec.end.get(k).copied(),
            _ => None,
        }
    }

    /// Follows the generated tokens (all of them so far, the newest last).
    pub fn observe(&mut self, generated: &[u32]) {
        self.phase = match self.phase {
            Phase::Before if self.spec.start.starts_with(generated) => {
                if generated.len() == self.spec.start.len() {
                    Phase::Inside(0)
                } else {
                    Phase::Before
                }
            }
            Phase::Before => Phase::Done,
            Phase::Inside(_) if generated.ends_with(&self.spec.end) => Phase::Done,
            Phase::Inside(n) => Phase::Inside(n + 1),
            Phase::Closing(k) if k + 1 >= self.spec.end.len() => Phase::Done,
            Phase::Closing(k) => Phase::Closing(k + 1),
            Phase::Done => Phase::Done,
        };
        self.close_if_spent();
    }

    fn close_if_spent(&mut self) {
        if matches!(self.phase, Phase::Inside(n) if n >= self.spec.tokens) {
            self.phase = Phase::Closing(0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(tokens: usize, inside: bool) -> Budget {
        Budget::new(ReasoningBudget { tokens, start: vec![1], end: vec![2, 3], inside })
    }

    /// Feeds `sampled` (a sampled token wherever nothing is forced) and returns what came out.
    fn run(mut b: Budget, sampled: &[u32]) -> Vec<u32> {
        let mut out = Vec::new();
        let mut free = sampled.iter();
        while out.len() < sampled.len() {
            let id = b.forced().or_else(|| free.next().copied()).expect("enough tokens");
            out.push(id);
            b.observe(&out);
        }
        out
    }

    #[test]
    fn a_block_the_answer_opens_is_closed_after_its_budget() {
        assert_eq!(run(budget(2, false), &[1, 7, 8, 9, 10, 11]), vec![1, 7, 8, 2, 3, 9]);
    }

    #[test]
    fn a_block_the_prompt_opened_counts_from_the_first_token() {
        assert_eq!(run(budget(3, true), &[7, 8, 9, 10, 11, 12]), vec![7, 8, 9, 2, 3, 10]);
        assert_eq!(run(budget(0, true), &[7, 8, 9]), vec![2, 3, 7]);
    }

    #[test]
    fn a_model_that_closes_in_time_or_never_thinks_is_left_alone() {
        assert_eq!(run(budget(5, false), &[1, 7, 2, 3, 9, 9, 9, 9]), vec![1, 7, 2, 3, 9, 9, 9, 9]);
        assert_eq!(run(budget(1, false), &[7, 1, 8, 9, 9]), vec![7, 1, 8, 9, 9]);
    }
}
