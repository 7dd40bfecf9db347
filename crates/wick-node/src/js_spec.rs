//! Speculative decoding's settings across the boundary (`wick_core::request::SpecOptions`).

use napi_derive::napi;
use wick_core::request::{SpecMethod, SpecOptions};

/// Speculative decoding: drafts by n-gram lookup in the sequence's own tokens (llama-server's
/// `--spec-type ngram-simple` with `--draft-max`/`--draft-min`, vLLM's `ngram` method with
/// `prompt_lookup_min`/`_max`) or by the engine's draft model (`--model-draft`). The output is
/// the same token for token as without it.
#[napi(object)]
#[derive(Clone, Copy)]
pub struct Speculation {
    /// Where drafts come from (default `ngram`).
    pub method: Option<SpecSource>,
    /// Most tokens drafted per step; 0 turns speculation off.
    pub draft_max: u32,
    /// No draft when fewer tokens than this are found (default 1).
    pub draft_min: Option<u32>,
    /// The n-gram lengths looked up, longest first (default 2 to 4).
    pub ngram_min: Option<u32>,
    pub ngram_max: Option<u32>,
    /// A draft model stops at a guess it gives less than this probability (default 0.1).
    pub p_min: Option<f64>,
}

/// `Speculation::method`.
#[napi(string_enum = "lowercase")]
#[derive(Clone, Copy)]
pub enum SpecSource {
    /// N-gram lookup in the sequence's own tokens.
    Ngram,
    /// The engine's draft model.
    Draft,
}

/// `p_min` when nothing says. Measured on SmolLM2 F16 drafted by its Q4_1 (benches/RESULTS.md):
/// a small draft model is often right while unsure, and every guess it withholds still costs
/// it a step; 0.75 (older llama-servers') cost a quarter of the speed, 0 drafted too much.
pub const DEFAULT_P_MIN: f32 = 0.1;

impl From<Speculation> for SpecOptions {
    fn from(s: Speculation) -> Self {
        let or = |v: Option<u32>, def: usize| v.map_or(def, |x| x as usize);
        let d = match s.method {
            None | Some(SpecSource::Ngram) => SpecOptions::ngram(s.draft_max as usize),
            Some(SpecSource::Draft) => SpecOptions::draft_model(s.draft_max as usize, DEFAULT_P_MIN),
        };
        Self {
            draft_min: or(s.draft_min, d.draft_min),
            ngram_min: or(s.ngram_min, d.ngram_min),
            ngram_max: or(s.ngram_max, d.ngram_max),
            p_min: s.p_min.map_or(d.p_min, |p| p as f32),
            ..d
        }
    }
}

impl From<SpecOptions> for Speculation {
    fn from(s: SpecOptions) -> Self {
        let draft = s.method == SpecMethod::DraftModel;
        Self {
            method: Some(if draft { SpecSource::Draft } else { SpecSource::Ngram }),
            draft_max: s.draft_max as u32,
            draft_min: Some(s.draft_min as u32),
            ngram_min: Some(s.ngram_min as u32),
            ngram_max: Some(s.ngram_max as u32),
            p_min: draft.then_some(s.p_min as f64),
        }
    }
}
