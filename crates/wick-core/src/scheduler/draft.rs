//! Drafts for speculative decoding by n-gram lookup in a sequence's own tokens (prompt lookup):
//! where the latest n tokens occurred before, what followed them then is the guess for what
//! follows now. Cheap enough to run every step, and right often on copy-heavy work (editing
//! a file, quoting a document, filling a schema).

use crate::request::SpecOptions;

/// Up to `max` tokens drafted after `tokens` (at most `opts.draft_max`): the ones after the
/// most recent earlier occurrence of its last `n` tokens, for the longest `n` from
/// `opts.ngram_max` down to `opts.ngram_min` that occurred; empty when none did, or when fewer
/// than `opts.draft_min` follow.
pub(crate) fn ngram_draft(tokens: &[u32], opts: &SpecOptions, max: usize) -> Vec<u32> {
    let max = max.min(opts.draft_max);
    if max == 0 {
        return Vec::new();
    }
    let len = tokens.len();
    for n in (opts.ngram_min.max(1)..=opts.ngram_max).rev() {
        if n >= len {
            continue;
        }
        let key = &tokens[len - n..];
        // Occurrences ending before the last token, latest first.
        let found = (0..len - n).rev().find(|&i| &tokens[i..i + n] == key);
        if let Some(i) = found {
            let after = &tokens[i + n..len.min(i + n + max)];
            if after.len() < opts.draft_min.max(1) {
                return Vec::new();
            }
            return after.to_vec();
        }
    }
    Vec::new()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(draft_max: usize, ngram: (usize, usize)) -> SpecOptions {
        SpecOptions {
            draft_max,
            draft_min: 1,
            ngram_min: ngram.0,
            ngram_max: ngram.1,
            ..SpecOptions::ngram(0)
        }
    }

    #[test]
    fn the_tokens_after_the_latest_earlier_occurrence_are_drafted() {
        // "1 2 3" occurred twice before: the later one (followed by 7 8) wins.
        let t = [1, 2, 3, 4, 5, 9, 1, 2, 3, 7, 8, 0, 2, 3];
        assert_eq!(ngram_draft(&t, &opts(4, (2, 3)), 16), vec![7, 8, 0, 2]);
        // Capped by the caller's room and by draft_max.
        assert_eq!(ngram_draft(&t, &opts(4, (2, 3)), 1), vec![7]);
        assert_eq!(ngram_draft(&t, &opts(2, (2, 3)), 16), vec![7, 8]);
    }

    #[test]
    fn the_longest_ngram_that_occurred_decides() {
        // The 1-gram "3" last occurred at index 8 (followed by 5); the 2-gram "2 3" at 1..3.
        let t = [1, 2, 3, 4, 9, 9, 9, 7, 3, 5, 2, 3];
        assert_eq!(ngram_draft(&t, &opts(2, (1, 2)), 16), vec![4, 9]);
        assert_eq!(ngram_draft(&t, &opts(2, (1, 1)), 16), vec![5, 2]);
    }

    #[test]
    fn nothing_without_an_earlier_occurrence_or_enough_after_it() {
        let t = [1, 2, 3, 4, 5];
        assert!(ngram_draft(&t, &opts(4, (1, 3)), 16).is_empty());
        assert!(ngram_draft(&[], &opts(4, (1, 3)), 16).is_empty());
        assert!(ngram_draft(&t, &SpecOptions::OFF, 16).is_empty());
        // "7 7" occurs once before, with a single token after it: under draft_min 2, no draft.
        let t = [7, 7, 7];
        let o = SpecOptions { draft_min: 2, ..opts(4, (2, 2)) };
        assert!(ngram_draft(&t, &o, 16).is_empty());
        assert_eq!(ngram_draft(&t, &opts(4, (2, 2)), 16), vec![7]);
    }
}
