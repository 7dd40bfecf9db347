//! Speculative decoding's settings across the boundary (`wick_core::request::SpecOptions`).

use napi_derive::napi;
use wick_core::request::SpecOptions;

/// Speculative decoding by n-gram lookup in the sequence's own tokens (llama-server's
/// `--spec-type ngram-simple` with `--draft-max`/`--draft-min`, vLLM's `ngram` method with
/// `prompt_lookup_min`/`_max`). The output is the same token for token as without it.
#[napi(object)]
#[derive(Clone, Copy)]
pub struct Speculation {
    /// Most tokens drafted per step; 0 turns speculation off.
    pub draft_max: u32,
    /// No draft when fewer tokens than this are found (default 1).
    pub draft_min: Option<u32>,
    /// The n-gram lengths looked up, longest first (default 2 to 4).
    pub ngram_min: Option<u32>,
    pub ngram_max: Option<u32>,
}

impl From<Speculation> for SpecOptions {
    fn from(s: Speculation) -> Self {
        let d = SpecOptions::ngram(s.draft_max as usize);
        let or = |v: Option<u32>, def: usize| v.map_or(def, |x| x as usize);
        Self {
            draft_max: d.draft_max,
            draft_min: or(s.draft_min, d.draft_min),
            ngram_min: or(s.ngram_min, d.ngram_min),
            ngram_max: or(s.ngram_max, d.ngram_max),
        }
    }
}

impl From<SpecOptions> for Speculation {
    fn from(s: SpecOptions) -> Self {
        Self {
            draft_max: s.draft_max as u32,
            draft_min: Some(s.draft_min as u32),
            ngram_min: Some(s.ngram_min as u32),
            ngram_max: Some(s.ngram_max as u32),
        }
    }
}
