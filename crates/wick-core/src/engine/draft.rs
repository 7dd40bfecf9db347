//! The draft model for speculative decoding (`EngineOptions::draft_model`, llama-server's
//! `--model-draft`): loaded beside the target on the exact CPU path, with a KV pool of its
//! own, after its vocabulary is checked against the target's as llama.cpp checks it.

use super::EngineOptions;
use crate::cache::{KvPool, KvTypes, BLOCK_SIZE};
use crate::error::{Result, WickError};
use crate::gguf::GgufFile;
use crate::models::{self, ModelHparams};
use crate::runtime::device::Placement;
use crate::scheduler::Drafter;

/// Token ids below this may differ between the two vocabularies (llama.cpp's
/// `SPEC_VOCAB_CHECK_START_TOKEN_ID`: control tokens a fine-tune renamed).
const CHECK_FROM: usize = 5;
/// The vocabularies' sizes may differ by this many (llama.cpp's `SPEC_VOCAB_MAX_SIZE_DIFFERENCE`).
const MAX_SIZE_DIFFERENCE: usize = 128;

/// The draft model and what it is, when one is asked for, for a model of `target_vocab` logits;
/// `pool_tokens` sizes its KV pool (the model's, plus room for every sequence's guesses).
pub(super) fn load_drafter(
    opts: &EngineOptions,
    target: &GgufFile,
    target_vocab: usize,
    pool_tokens: usize,
    device: &Placement,
) -> Result<Option<(Drafter, ModelHparams)>> {
    let Some(path) = opts.draft_model.as_deref().filter(|_| !opts.vocab_only) else {
        return Ok(None);
    };
    let fail = |why: String| WickError::load(format!("draft model {}: {why}", path.display()));
    if !device.exact() {
        return Err(fail(format!(
            "speculative decoding runs on the exact CPU path only (--device cpu), not on {}",
            device.name()
        )));
    }
    let gguf = GgufFile::open(path)?;
    check_vocab(target, &gguf).map_err(fail)?;
    let model =
        models::load_on(&gguf, &device.with_packs(super::load::open_pack_cache(opts, path, &gguf, device)))?;
    if !model.causal() {
        return Err(fail("it is an embedding model (it cannot generate)".into()));
    }
    let tokens = pool_tokens + opts.max_sequences.max(1) * (super::load::MAX_DRAFT + 1);
    let kv = KvPool::new_on(
        &model.cache_layout(),
        tokens.div_ceil(BLOCK_SIZE),
        opts.prefix_cache,
        device,
        KvTypes::F16,
    )?;
    let info = model.info().clone();
    Ok(Some((Drafter::new(model, kv, target_vocab), info)))
}

/// llama.cpp's `common_speculative_are_compatible`: the same tokenizer model, BOS and EOS, and
/// token texts from id `CHECK_FROM` on, the sizes at most `MAX_SIZE_DIFFERENCE` apart.
fn check_vocab(target: &GgufFile, draft: &GgufFile) -> std::result::Result<(), String> {
    let (t, d) = (&target.metadata, &draft.metadata);
    let read = |r: Result<Option<&str>>| r.ok().flatten().unwrap_or("").to_string();
    let (tm, dm) = (read(t.opt_str("tokenizer.ggml.model")), read(d.opt_str("tokenizer.ggml.model")));
    if tm != dm {
        return Err(format!("its tokenizer is {dm:?}, the model's is {tm:?}"));
    }
    for key in ["tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"] {
        let (a, b) = (t.opt_u64(key).ok().flatten(), d.opt_u64(key).ok().flatten());
        if a != b {
            return Err(format!("its {key} is {b:?}, the model's is {a:?}"));
        }
    }
    let (tt, dt) = (tokens(target), tokens(draft));
    if tt.len().abs_diff(dt.len()) > MAX_SIZE_DIFFERENCE {
        return Err(format!("its vocabulary has {} tokens, the model's {}", dt.len(), tt.len()));
    }
    if let Some(i) = (CHECK_FROM..tt.len().min(dt.len())).find(|&i| tt[i] != dt[i]) {
        return Err(format!(
            "token {i} is {:?} in it, {:?} in the model: not the same vocabulary",
            dt[i], tt[i]
        ));
    }
    Ok(())
}

fn tokens(g: &GgufFile) -> Vec<&str> {
    g.metadata.str_array("tokenizer.ggml.tokens").ok().flatten().unwrap_or_default()
}
