//! The engine's public API: load a GGUF model, submit requests, stream events, cancel.
//! Generation runs on a dedicated scheduler thread, never on the caller's thread.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crate::cache::{kv_bytes_per_token, KvPool, KvTypes, BLOCK_SIZE};
use crate::embed::EmbedHead;
use crate::error::{Result, WickError};
use crate::gguf::{GgufFile, MetaValue, Metadata};
use crate::metrics::{Metrics, MetricsSnapshot};
use crate::models::vision::{VisionModel, VisionOptions};
use crate::models::ModelHparams;
use crate::request::{event_channel, EventReceiver, GenerateRequest, SpecOptions};
use crate::runtime::device::{DeviceChoice, Placement};
use crate::runtime::weight_cache::WeightCacheUse;
use crate::sampling::grammar::GrammarCompiler;
use crate::scheduler::images::{expand, Expanded};
use crate::scheduler::{Command, Fault, Health, Scheduler, SchedulerConfig, Sequence};
use crate::tokenizer::Tokenizer;

mod adapters;
mod draft;
mod embedding;
mod load;

use adapters::Adapters;
pub use adapters::{AdapterInfo, LoraSpec};
pub use embedding::EmbeddingInfo;
pub use load::pack_cache;
use load::{
    check_speculation, kernel_threads, kv_pool, load_tokenizer_and_model, load_vision,
    requested_context_size, LoadedModel,
};

/// Tokens per sequence when `EngineOptions::context_size` is None and the model does not say
/// how long it was trained (else the smaller of the two).
pub const DEFAULT_CONTEXT_SIZE: usize = 4096;

/// Sequences decoded together unless `EngineOptions::max_sequences` says otherwise.
pub const DEFAULT_MAX_SEQUENCES: usize = 4;

#[derive(Debug, Clone)]
pub struct EngineOptions {
    pub model_path: PathBuf,
    /// Tokens per sequence; default min(`DEFAULT_CONTEXT_SIZE`, the model's training context).
    pub context_size: Option<usize>,
    /// Sequences decoded together (at least 1); default `DEFAULT_MAX_SEQUENCES`.
    pub max_sequences: usize,
    /// Requests that may wait for admission before submit fails with QUEUE_FULL.
    pub max_queue: usize,
    /// Tokens per forward step, decodes and prompt chunks together.
    pub step_tokens: usize,
    /// Prompt tokens a sequence feeds per step (chunked prefill); None = the whole prompt in
    /// one pass (the binding's `prefillChunk: 0`). Default 256.
    pub prefill_chunk: Option<usize>,
    /// Tokens the shared KV pool holds, all sequences together; None = context size ×
    /// sequences. A smaller pool serves the same load by preempting.
    pub kv_tokens: Option<usize>,
    /// Bytes the shared KV pool may take (vLLM's `--kv-cache-memory-bytes`): its tokens are
    /// what fits at the storage types' bytes per token. `kv_tokens` wins when both are set.
    pub kv_bytes: Option<usize>,
    /// How the pool stores keys and values (llama.cpp's `--cache-type-k` / `--cache-type-v`).
    pub kv_types: KvTypes,
    /// Keep full KV blocks for reuse by later requests with the same prefix.
    pub prefix_cache: bool,
    /// Only the tokenizer: no weights, no generation.
    pub vocab_only: bool,
    /// Threads for the CPU kernels; None = `WICK_THREADS`, else every core. The kernel pool is
    /// process-wide and never resized: the first load (or first forward) fixes its size, and a
    /// later load asking for another size fails with INVALID_REQUEST.
    pub threads: Option<usize>,
    /// A vision projector (`mmproj` GGUF, LFM2-VL's `clip.projector_type = lfm2`): requests
    /// may then carry images.
    pub mmproj: Option<PathBuf>,
    /// The projector's per-image token bounds (llama.cpp's `--image-{min,max}-tokens`).
    pub vision: VisionOptions,
    /// A fault to inject (tests only); None = the `WICK_FAULT` environment variable, read
    /// once here at load (see `scheduler::Fault`).
    pub fault: Option<Fault>,
    /// Events a sequence may have waiting for its reader before it is cancelled as abandoned
    /// (a client that stopped reading its stream).
    pub max_unread_events: usize,
    /// Where the model runs (`--device`); `Auto` = `WICK_DEVICE` when set, else a GPU when
    /// this build has one's backend and one answers, else the exact CPU path.
    pub device: DeviceChoice,
    /// Layers on the GPU (llama-server's `-ngl`); `Some(0)` keeps the model on the CPU.
    /// Partial offload is not built: any other count places every layer.
    pub gpu_layers: Option<usize>,
    /// Share of the GPU's memory Wick may fill (vLLM's `--gpu-memory-utilization`, 0–1): the
    /// KV pool gets what this share leaves after the weights, unless `kv_tokens` is set.
    /// Ignored off CUDA.
    pub gpu_memory_utilization: Option<f32>,
    /// LoRA adapters loaded with the model (llama-server's `--lora` / `--lora-scaled`, vLLM's
    /// `--lora-modules`), in id order.
    pub lora: Vec<LoraSpec>,
    /// Speculative decoding for requests that do not say (off by default).
    pub speculative: SpecOptions,
    /// A draft model for `SpecMethod::DraftModel` (llama-server's `--model-draft`).
    pub draft_model: Option<PathBuf>,
    /// A directory for the pack cache (`runtime::weight_cache`): the next load of
    /// the same file maps its repacked weights from there instead of packing them. None: pack
    /// every load, save nothing.
    pub pack_cache: Option<PathBuf>,
}

impl EngineOptions {
    pub fn new(model_path: impl Into<PathBuf>) -> Self {
        Self {
            model_path: model_path.into(),
            context_size: None,
            max_sequences: DEFAULT_MAX_SEQUENCES,
            max_queue: 256,
            step_tokens: 512,
            prefill_chunk: Some(256),
            kv_tokens: None,
            kv_bytes: None,
            kv_types: KvTypes::F16,
            prefix_cache: true,
            vocab_only: false,
            threads: None,
            mmproj: None,
            vision: VisionOptions::default(),
            fault: None,
            max_unread_events: 4096,
            device: DeviceChoice::Auto,
            gpu_layers: None,
            gpu_memory_utilization: None,
            lora: Vec::new(),
            speculative: SpecOptions::OFF,
            draft_model: None,
            pack_cache: None,
        }
    }
}

/// Facts about the loaded model that the control plane needs (templates, limits, listing).
#[derive(Debug, Clone)]
pub struct EngineInfo {
    pub model: ModelHparams,
    pub name: Option<String>,
    pub context_size: usize,
    pub file_size: usize,
    pub bos_token: Option<u32>,
    pub eos_token: Option<u32>,
    pub add_bos: bool,
    pub chat_template: Option<String>,
    /// The file's recommended sampling: each numeric `general.sampling.<key>` (what converters
    /// write from generation_config.json) as (key, value); the service's defaults.
    pub sampling: Vec<(String, f64)>,
    pub vocab_only: bool,
    /// Threads of the process-wide CPU kernel pool.
    pub threads: usize,
    /// A vision projector is loaded (requests may carry images).
    pub vision: bool,
    /// Sequences decoded together (`EngineOptions::max_sequences`, at least 1).
    pub max_sequences: usize,
    /// Tokens the shared KV pool holds, all sequences together (whole blocks); 0 when
    /// vocab-only.
    pub kv_tokens: usize,
    /// KV bytes one token takes in the pool (keys and values of the attention layers as
    /// `kv_types` stores them; LFM2's conv layers hold none); 0 when vocab-only.
    pub kv_bytes_per_token: usize,
    /// How the pool stores keys and values.
    pub kv_types: KvTypes,
    /// Where the model runs (`cpu`, `cpu-candle`, `cuda:0`, `metal`).
    pub device: String,
    /// Why that is not the device asked for (one line), when it is not.
    pub device_notice: Option<String>,
    /// Blocks on the device when only some are (`-ngl N` below the block count; the output
    /// head stays on the CPU then); None when the model runs on one side.
    pub device_layers: Option<usize>,
    /// What embedding requests get; None when vocab-only.
    pub embedding: Option<EmbeddingInfo>,
    /// Speculative decoding for requests that do not say; always off on the device path,
    /// whose batched rows do not compute as one-token steps do (requests cannot turn it on).
    pub speculative: SpecOptions,
    /// The draft model, when one is loaded.
    pub draft_model: Option<ModelHparams>,
    /// What the load did with the pack cache, when it had one.
    pub pack_cache: Option<WeightCacheUse>,
}

/// A submitted request: its event stream and its cancel switch. Dropping the stream also
/// cancels the sequence (the scheduler sees the closed channel at its next step).
pub struct SequenceHandle {
    pub id: u64,
    pub events: EventReceiver,
    canceller: Canceller,
}

impl SequenceHandle {
    /// Stops generation before the next forward step and frees the sequence's cache.
    pub fn cancel(&self) {
        self.canceller.cancel();
    }
    pub fn canceller(&self) -> Canceller {
        self.canceller.clone()
    }
}

/// A cancel switch that can live apart from the event stream (e.g. in another thread).
#[derive(Clone)]
pub struct Canceller {
    cancel: Arc<AtomicBool>,
    wake: Sender<Command>,
}

impl Canceller {
    pub fn cancel(&self) {
        // Wake the scheduler only once, so it retires the sequence even when it is idle.
        if !self.cancel.swap(true, Ordering::Relaxed) {
            let _ = self.wake.send(Command::Wake);
        }
    }
}

struct Runner {
    tx: Sender<Command>,
    thread: Option<JoinHandle<()>>,
}

/// Whether the engine can serve: false once its scheduler thread died (`reason` says why) or
/// it was unloaded. A dead engine answers every request with ENGINE_DEAD until reloaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineHealth {
    pub ok: bool,
    pub reason: Option<String>,
}

pub struct Engine {
    info: EngineInfo,
    tokenizer: Arc<Tokenizer>,
    grammars: GrammarCompiler,
    metrics: Arc<Metrics>,
    max_queue: usize,
    max_unread_events: usize,
    next_id: AtomicU64,
    runner: Mutex<Option<Runner>>,
    health: Arc<Health>,
    vision: Option<Arc<VisionModel>>,
    embed_head: Option<Arc<EmbedHead>>,
    adapters: std::sync::RwLock<Adapters>,
}

impl Engine {
    /// Loads the model and starts its scheduler thread. Blocking: call it off the JS thread.
    pub fn load(opts: EngineOptions) -> Result<Self> {
        crate::runtime::alloc::keep_freed_memory();
        let fault = match opts.fault {
            Some(f) => Some(f),
            None => Fault::from_env()?,
        };
        let threads = kernel_threads(opts.threads)?;
        let gguf = GgufFile::open(&opts.model_path)?;
        let choice = match opts.device {
            DeviceChoice::Auto => DeviceChoice::from_env()?,
            asked => asked,
        };
        let device = Placement::resolve(choice, opts.gpu_layers);
        // `-ngl N` below the block count splits the blocks between the CPU and the device.
        let device = match gguf.block_count() {
            Ok(Some(n)) => device.fit_layers(n),
            _ => device,
        };
        let (tokenizer, model, pack_cache) = load_tokenizer_and_model(&gguf, &device, &opts)?;
        let name = gguf.metadata.opt_str("general.name")?.map(str::to_string);
        let model_info = match &model {
            Some(m) => m.info().clone(),
            None => ModelHparams {
                architecture: gguf.architecture().unwrap_or("unknown").to_string(),
                n_vocab: tokenizer.n_vocab(),
                ..ModelHparams::default()
            },
        };
        let adapters = Adapters::load_all(&opts, &gguf, &model_info.architecture, &device)?;
        let embed_head = match &model {
            Some(m) => Some(Arc::new(EmbedHead::load(&gguf, m.info().n_embd, m.causal())?)),
            None => None,
        };
        let vision = load_vision(&opts, &model_info, &device)?;
        let mut context_size = requested_context_size(opts.context_size, &model_info)?;
        let max_seqs = opts.max_sequences.max(1);
        let kv = match &model {
            None => None,
            Some(m) => {
                let pool = kv_pool(m.as_ref(), &opts, context_size, max_seqs, &device)?;
                // One sequence can never hold more than the whole pool.
                context_size = context_size.min(pool.capacity_tokens());
                Some(pool)
            }
        };
        let pool_tokens = kv.as_ref().map_or(0, KvPool::capacity_tokens);
        let (drafter, draft_model) =
            draft::load_drafter(&opts, &gguf, model_info.n_vocab, pool_tokens, &device)?.unzip();
        let info = EngineInfo {
            model: model_info,
            name,
            context_size,
            file_size: gguf.file_size(),
            bos_token: tokenizer.bos(),
            eos_token: tokenizer.eos(),
            add_bos: tokenizer.add_bos(),
            chat_template: tokenizer.chat_template().map(str::to_string),
            sampling: sampling_defaults(&gguf.metadata),
            vocab_only: opts.vocab_only,
            threads,
            vision: vision.is_some(),
            max_sequences: max_seqs,
            kv_tokens: pool_tokens,
            kv_bytes_per_token: kv.as_ref().map_or(0, |p| kv_bytes_per_token(p.layout(), p.types())),
            kv_types: opts.kv_types,
            device: device.name(),
            device_notice: device.notice.clone(),
            device_layers: device.split().map(|s| s.on_device()),
            embedding: embed_head.as_deref().map(EmbeddingInfo::of),
            speculative: match device.exact() {
                true => check_speculation(opts.speculative, draft_model.is_some())?,
                false => SpecOptions::OFF,
            },
            draft_model,
            pack_cache,
        };
        // The weights now live in the model's tensors: release the map, and the load's scratch
        // (candle copies, the tokenizer thread's arena) with it.
        drop(gguf);
        crate::runtime::alloc::release_freed_memory();
        let metrics = Arc::new(Metrics::default());
        metrics.kv_block_size.store(BLOCK_SIZE, Ordering::Relaxed);
        let health = Arc::new(Health::default());
        let runner = match model.zip(kv).zip(embed_head.clone()) {
            None => None,
            Some(((model, kv), embed_head)) => {
                let cfg = SchedulerConfig {
                    max_seqs,
                    step_tokens: opts.step_tokens,
                    prefill_chunk: opts.prefill_chunk,
                    fault,
                };
                let parts = SchedulerParts {
                    model,
                    embed_head,
                    kv,
                    tokenizer: tokenizer.clone(),
                    vision: vision.clone(),
                    drafter,
                };
                Some(start_scheduler(parts, cfg, metrics.clone(), health.clone())?)
            }
        };
        Ok(Self {
            info,
            grammars: GrammarCompiler::new(tokenizer.clone()),
            tokenizer,
            metrics,
            max_queue: opts.max_queue,
            max_unread_events: opts.max_unread_events,
            next_id: AtomicU64::new(1),
            runner: Mutex::new(runner),
            health,
            vision,
            embed_head,
            adapters: std::sync::RwLock::new(adapters),
        })
    }

    pub fn info(&self) -> &EngineInfo {
        &self.info
    }

    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    /// Validates and queues a request. Errors here are the request's fault (or a full queue).
    pub fn submit(&self, mut req: GenerateRequest) -> Result<SequenceHandle> {
        if req.prompt.is_empty() && req.images.is_empty() {
            return Err(WickError::InvalidRequest("the prompt is empty".into()));
        }
        let n_vocab = self.info.model.n_vocab;
        check_ids("", req.prompt.iter().copied(), n_vocab)?;
        let prompt = self.expand_images(&mut req)?;
        let n_prompt = prompt.tokens.len();
        check_ids("logit_bias ", req.sampling.logit_bias.iter().map(|&(id, _)| id), n_vocab)?;
        check_ids("marker ", req.marker_tokens.iter().copied(), n_vocab)?;
        if let Some(b) = &req.reasoning_budget {
            check_ids("reasoning marker ", b.start.iter().chain(&b.end).copied(), n_vocab)?;
        }
        check_ids("grammar trigger ", req.grammar.iter().filter_map(|g| g.trigger_token), n_vocab)?;
        req.sampling.validate().map_err(WickError::InvalidRequest)?;
        if self.info.vocab_only {
            return Err(WickError::InvalidRequest(
                "this engine was loaded vocab-only and cannot generate".into(),
            ));
        }
        let limit = match &req.embed {
            Some(opts) => self.check_embedding(&req, opts, n_prompt)?,
            None => self.check_generation(&req, n_prompt)?,
        };
        let lora = self.lora_mix(req.lora.as_deref())?;
        // Only the exact CPU path ("cpu") computes a verified draft's rows as decodes.
        req.speculative = Some(match req.speculative {
            Some(asked) if self.info.device == "cpu" => {
                check_speculation(asked, self.info.draft_model.is_some())?
            }
            _ => self.info.speculative,
        });
        // Before taking the runner lock: compiling a large grammar takes a while.
        let grammar = req.grammar.as_ref().map(|g| self.grammars.compile(g)).transpose()?;
        let guard = self.runner.lock().map_err(|_| WickError::EngineStopped)?;
        let runner = guard.as_ref().ok_or(WickError::EngineStopped)?;
        // Held until the request is in the channel: a scheduler that dies meanwhile drains it.
        let dead = self.health.lock();
        if let Some(reason) = dead.as_ref() {
            return Err(WickError::EngineDead(reason.clone()));
        }
        if self.metrics.waiting.load(Ordering::Relaxed) >= self.max_queue {
            return Err(WickError::QueueFull);
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, events) = event_channel(self.max_unread_events, req.hold_events);
        let cancel = Arc::new(AtomicBool::new(false));
        let seq = Sequence::new(req, prompt, grammar, lora, limit, tx, cancel.clone());
        self.metrics.waiting.fetch_add(1, Ordering::Relaxed);
        if runner.tx.send(Command::Submit(Box::new(seq))).is_err() {
            self.metrics.waiting.fetch_sub(1, Ordering::Relaxed);
            return Err(WickError::EngineStopped);
        }
        drop(dead);
        Ok(SequenceHandle { id, events, canceller: Canceller { cancel, wake: runner.tx.clone() } })
    }

    /// A generation request's token limit, once its lengths and the model allow it.
    fn check_generation(&self, req: &GenerateRequest, n_prompt: usize) -> Result<usize> {
        let ctx = self.info.context_size;
        if let Some(e) = self.info.embedding.as_ref().filter(|e| e.only) {
            let what = if e.ranks { "ranks documents" } else { "makes embeddings" };
            return Err(WickError::InvalidRequest(format!("this model {what} and does not generate text")));
        }
        if req.max_tokens == Some(0) {
            return Err(WickError::InvalidRequest("max_tokens must be at least 1".into()));
        }
        let wanted = n_prompt + req.max_tokens.unwrap_or(1);
        if n_prompt >= ctx || wanted > ctx {
            return Err(WickError::ContextLengthExceeded {
                prompt_tokens: n_prompt,
                context_size: ctx,
                max_tokens: req.max_tokens,
            });
        }
        Ok(req.max_tokens.map_or(ctx, |m| n_prompt + m))
    }

    /// The request's prompt with its images laid out (placeholder positions for their
    /// embeddings), taken out of `req`.
    fn expand_images(&self, req: &mut GenerateRequest) -> Result<Expanded> {
        let prompt = std::mem::take(&mut req.prompt);
        if req.images.is_empty() {
            return Ok(Expanded { tokens: prompt, images: Vec::new(), breaks: Vec::new() });
        }
        let Some(vision) = &self.vision else {
            return Err(WickError::InvalidRequest(
                "image input is not supported: this model has no vision projector (mmproj)".into(),
            ));
        };
        let images = std::mem::take(&mut req.images);
        expand(&prompt, &images, vision, &self.tokenizer)
    }

    pub fn metrics(&self) -> MetricsSnapshot {
        self.metrics.snapshot()
    }

    /// Whether the engine serves: not once its scheduler thread died (with the reason) or
    /// after `shutdown`. A vocab-only engine has no scheduler and is healthy while loaded.
    pub fn health(&self) -> EngineHealth {
        if let Some(reason) = self.health.reason() {
            return EngineHealth { ok: false, reason: Some(reason) };
        }
        let runner = self.runner.lock().map_err(|_| "the engine's lock is poisoned".to_string());
        let stopped = match runner.as_deref() {
            Err(why) => Some(why.clone()),
            Ok(None) if !self.info.vocab_only => Some("the engine was unloaded".into()),
            Ok(None) => None,
            Ok(Some(r)) => r
                .thread
                .as_ref()
                .is_none_or(|t| t.is_finished())
                .then(|| "the scheduler thread exited".into()),
        };
        match stopped {
            // The thread may have just died and be recording why: prefer its reason.
            Some(why) => EngineHealth { ok: false, reason: Some(self.health.reason().unwrap_or(why)) },
            None => EngineHealth { ok: true, reason: None },
        }
    }

    /// Holds the scheduler between steps: requests submitted while paused queue (and may be
    /// cancelled) and start together on `resume`, in submission order. Used to update or
    /// inspect a quiet engine, and by tests that need several requests in one schedule.
    pub fn pause(&self) -> Result<()> {
        self.send(Command::Pause)
    }

    pub fn resume(&self) -> Result<()> {
        self.send(Command::Resume)
    }

    fn send(&self, cmd: Command) -> Result<()> {
        let guard = self.runner.lock().map_err(|_| WickError::EngineStopped)?;
        let runner = guard.as_ref().ok_or(WickError::EngineStopped)?;
        runner.tx.send(cmd).map_err(|_| WickError::EngineStopped)
    }

    /// Stops the scheduler (pending sequences end with ENGINE_STOPPED) and frees the model.
    pub fn shutdown(&self) {
        let runner = self.runner.lock().ok().and_then(|mut g| g.take());
        if let Some(mut r) = runner {
            let _ = r.tx.send(Command::Shutdown);
            if let Some(t) = r.thread.take() {
                let _ = t.join();
            }
            drop(r);
            crate::runtime::alloc::release_freed_memory();
        }
    }
}

/// `EngineInfo::sampling`: the numeric `general.sampling.*` entries, keyed without the prefix.
fn sampling_defaults(meta: &Metadata) -> Vec<(String, f64)> {
    meta.entries
        .iter()
        .filter(|(_, v)| !matches!(v, MetaValue::Bool(_)))
        .filter_map(|(k, v)| Some((k.strip_prefix("general.sampling.")?.to_string(), v.as_f64()?)))
        .collect()
}

/// INVALID_REQUEST for the first id in `ids` outside the vocabulary.
fn check_ids(what: &str, mut ids: impl Iterator<Item = u32>, n_vocab: usize) -> Result<()> {
    match ids.find(|&t| t as usize >= n_vocab) {
        Some(bad) => Err(WickError::InvalidRequest(format!(
            "{what}token id {bad} is out of range (vocabulary size {n_vocab})"
        ))),
        None => Ok(()),
    }
}

/// What the scheduler thread takes over from the load.
struct SchedulerParts {
    model: LoadedModel,
    embed_head: Arc<EmbedHead>,
    kv: KvPool,
    tokenizer: Arc<Tokenizer>,
    vision: Option<Arc<VisionModel>>,
    drafter: Option<crate::scheduler::Drafter>,
}

/// Starts the scheduler thread; `run` records its own death in `health`.
fn start_scheduler(
    parts: SchedulerParts,
    cfg: SchedulerConfig,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
) -> Result<Runner> {
    let (tx, rx) = channel();
    let SchedulerParts { model, embed_head, kv, tokenizer, vision, drafter } = parts;
    let sched = Scheduler::new(model, embed_head, tokenizer, rx, cfg, kv, metrics, vision, drafter);
    let thread = std::thread::Builder::new()
        .name("wick-scheduler".into())
        .spawn(move || {
            // `run` records its own death; this catches a panic while it does so
            // (the requests it held then end through `Sequence`'s drop).
            let h = health.clone();
            if let Err(p) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| sched.run(h))) {
                let why = crate::error::panic_message(&p);
                health.die(format!("the scheduler thread panicked while stopping: {why}"));
            }
        })
        .map_err(|e| WickError::Internal(format!("cannot start the scheduler thread: {e}")))?;
    Ok(Runner { tx, thread: Some(thread) })
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.shutdown();
    }
}
