//! What `Engine::load` builds before the scheduler starts: tokenizer and weights, the vision
//! projector, the context size and the KV pool.

use std::sync::Arc;

use super::{EngineOptions, DEFAULT_CONTEXT_SIZE};
use crate::cache::{kv_bytes_per_token, KvPool, LayerKind, BLOCK_SIZE};
use crate::error::{Result, WickError};
use crate::gguf::GgufFile;
use crate::kernels::PackedWeight;
use crate::models::vision::VisionModel;
use crate::models::{self, ModelHparams};
use crate::request::{SpecMethod, SpecOptions};
use crate::runtime::device::Placement;
use crate::runtime::pool;
use crate::runtime::weight_cache::{WeightCache, WeightCacheUse};
use crate::tokenizer::Tokenizer;

pub(super) type LoadedModel = Box<dyn models::Model>;

/// The tokenizer and (unless vocab-only) the model's weights, with what the load did with
/// the pack cache. The tokenizer builds on its own thread while the weights pack (a large
/// vocabulary and its merges take a while); its error, if any, is still the one reported first.
pub(super) fn load_tokenizer_and_model(
    gguf: &GgufFile,
    device: &Placement,
    opts: &EngineOptions,
) -> Result<(Arc<Tokenizer>, Option<LoadedModel>, Option<WeightCacheUse>)> {
    let packs = open_pack_cache(opts, &opts.model_path, gguf, device);
    let device = device.with_packs(packs.clone());
    let (tokenizer, model) = std::thread::scope(|s| {
        let tokenizer = s.spawn(|| Tokenizer::from_gguf(&gguf.metadata));
        let model = (!opts.vocab_only).then(|| models::load_on(gguf, &device));
        let tokenizer =
            tokenizer.join().map_err(|_| WickError::Internal("the tokenizer build panicked".into()))??;
        Ok::<_, WickError>((Arc::new(tokenizer), model.transpose()?))
    })?;
    Ok((tokenizer, model, packs.map(|p| p.finish())))
}

/// The pack cache of the model at `path`, when one is asked for and the weights go to the
/// exact CPU path.
pub(super) fn open_pack_cache(
    opts: &EngineOptions,
    path: &std::path::Path,
    gguf: &GgufFile,
    device: &Placement,
) -> Option<Arc<WeightCache>> {
    let dir = opts.pack_cache.as_deref().filter(|_| device.has_host_layers() && !opts.vocab_only)?;
    Some(pack_cache(dir, path, gguf, device))
}

/// The pack cache in `dir` for the model at `path` placed as `device` (`benches/e2e.rs` maps
/// its weights the way `wick serve` does with it).
pub fn pack_cache(
    dir: &std::path::Path,
    path: &std::path::Path,
    gguf: &GgufFile,
    device: &Placement,
) -> Arc<WeightCache> {
    let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let mut key = vec![gguf.fingerprint(), PackedWeight::layout_fingerprint()];
    // A split model packs only its host blocks: its file is its own, so that a load of the
    // whole model on the CPU never reads one that lacks the device blocks' weights.
    if let Some(s) = device.split() {
        use sha2::{Digest, Sha256};
        key.push(Sha256::digest(format!("split {} of {}", s.first_on_device, s.n_layer)).into());
    }
    Arc::new(WeightCache::open(dir, &stem, &key))
}

/// The vision projector, when one is asked for and the engine generates; its embedding width
/// must be the model's.
pub(super) fn load_vision(
    opts: &EngineOptions,
    model_info: &ModelHparams,
    device: &Placement,
) -> Result<Option<Arc<VisionModel>>> {
    let (Some(p), false) = (&opts.mmproj, opts.vocab_only) else {
        return Ok(None);
    };
    let v = VisionModel::load_on(p, opts.vision, &device.part(true))?;
    if v.n_embd() != model_info.n_embd {
        return Err(WickError::load(format!(
            "the projector {} makes embeddings of width {}, the model's width is {}",
            p.display(),
            v.n_embd(),
            model_info.n_embd
        )));
    }
    Ok(Some(Arc::new(v)))
}

/// The context size asked for, else min(`DEFAULT_CONTEXT_SIZE`, the model's training
/// context); before the KV pool caps it.
pub(super) fn requested_context_size(asked: Option<usize>, model_info: &ModelHparams) -> Result<usize> {
    let train_ctx = if model_info.n_ctx_train > 0 { model_info.n_ctx_train } else { DEFAULT_CONTEXT_SIZE };
    let context_size = asked.unwrap_or(DEFAULT_CONTEXT_SIZE.min(train_ctx));
    if context_size < 2 {
        return Err(WickError::InvalidRequest(format!("context size {context_size} is too small")));
    }
    Ok(context_size)
}

/// The shared KV pool: `kv_tokens` if given, else room for every sequence's full context.
pub(super) fn kv_pool(
    model: &dyn models::Model,
    opts: &EngineOptions,
    context_size: usize,
    max_seqs: usize,
    device: &Placement,
) -> Result<KvPool> {
    let layout = model.cache_layout();
    let per_token = kv_bytes_per_token(&layout, opts.kv_types).max(1);
    // The device's share of a token: a split model keeps its first layers' KV on the host.
    let on_device: Vec<LayerKind> =
        (0..layout.len()).filter(|&il| device.layer_on_device(il)).map(|il| layout[il]).collect();
    let per_device_token = kv_bytes_per_token(&on_device, opts.kv_types).max(1);
    let tokens = match (opts.kv_tokens, opts.kv_bytes, opts.gpu_memory_utilization, device.free_memory()) {
        (Some(t), _, _, _) => t,
        (None, Some(bytes), _, _) => bytes / per_token,
        (None, None, Some(util), Some(free)) => gpu_kv_tokens(util, free, per_device_token)?,
        _ => context_size.saturating_mul(max_seqs),
    };
    if tokens < 2 {
        return Err(WickError::InvalidRequest(format!("a KV pool of {tokens} tokens is too small")));
    }
    let blocks = tokens.div_ceil(BLOCK_SIZE);
    KvPool::new_on(&layout, blocks, opts.prefix_cache, device, opts.kv_types)
}

/// KV tokens that fit in `util` of the GPU's memory given `free` bytes left after the
/// weights (vLLM sizes its pool the same way: what the share leaves once the model is in).
fn gpu_kv_tokens(util: f32, free: usize, bytes_per_token: usize) -> Result<usize> {
    if !(util > 0.0 && util <= 1.0) {
        return Err(WickError::InvalidRequest(format!("gpu memory utilization {util} is not in (0, 1]")));
    }
    // The share counts against what is free now; a margin for activations stays unused.
    let budget = (free as f64 * util as f64) as usize;
    Ok(budget / bytes_per_token.max(1))
}

/// `spec` if its numbers make sense and its drafts have a source (`draft_model`: the engine
/// has a draft model).
pub(super) fn check_speculation(spec: SpecOptions, draft_model: bool) -> Result<SpecOptions> {
    let bad = |m: String| Err(WickError::InvalidRequest(format!("speculative decoding: {m}")));
    if spec.draft_max == 0 {
        return Ok(SpecOptions::OFF);
    }
    if spec.method == SpecMethod::DraftModel && !draft_model {
        return bad("drafts by a draft model need one loaded (--model-draft)".into());
    }
    if !(0.0..=1.0).contains(&spec.p_min) {
        return bad(format!("p_min {} is not in [0, 1]", spec.p_min));
    }
    if spec.draft_max > MAX_DRAFT {
        return bad(format!("draft_max {} is over {MAX_DRAFT}", spec.draft_max));
    }
    if spec.draft_min > spec.draft_max {
        return bad(format!("draft_min {} is over draft_max {}", spec.draft_min, spec.draft_max));
    }
    if spec.ngram_min == 0 || spec.ngram_min > spec.ngram_max || spec.ngram_max > MAX_DRAFT {
        return bad(format!(
            "n-gram sizes {}..{} (1 ≤ min ≤ max ≤ {MAX_DRAFT})",
            spec.ngram_min, spec.ngram_max
        ));
    }
    Ok(spec)
}

/// Most tokens drafted in one step (llama-server's `--draft-max` takes any; past this a step
/// would be mostly rows that are thrown away).
pub(super) const MAX_DRAFT: usize = 64;

/// Fixes the kernel pool's size from the `threads` option and returns the size in effect.
pub(super) fn kernel_threads(wanted: Option<usize>) -> Result<usize> {
    match wanted {
        None => Ok(pool::threads()),
        Some(0) => Err(WickError::InvalidRequest("threads must be at least 1".into())),
        Some(n) => pool::set_threads(n).map(|()| n).map_err(|fixed| {
            WickError::InvalidRequest(format!(
                "the CPU kernel pool already runs {fixed} threads (it is process-wide and fixed by \
                 the first load); cannot use {n}"
            ))
        }),
    }
}
