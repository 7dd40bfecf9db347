//! napi binding for wick-core. Thin by design: argument conversion, error codes, and moving
//! blocking work off the JS thread. All logic lives in wick-core (below) or ts/ (above).

#[macro_use]
extern crate napi_derive;

pub mod conversion;
mod error;
mod js_embed;
mod js_lora;
mod js_objects;
mod js_spec;

use std::sync::Arc;

use napi::bindgen_prelude::{AsyncBlock, Buffer};
use napi::Env;
use tokio::sync::Mutex;
use wick_core::cache::{KvType, KvTypes};
use wick_core::request::{EventReceiver, SpecOptions};

use error::{blocking, guarded, guarded_core, js_error, promise, to_js, Result};
use js_embed::EmbedRequest;
use js_lora::{LoraAdapter, LoraAdapterSpec, LoraScale};
use js_objects::{
    EngineHealth, EngineInfoJs, GenerateOptions, GgufInfo, InspectOptions, LoadOptions, Metrics,
    SequenceEvent,
};
use wick_core::engine::Canceller;
use wick_core::WickError;

#[napi]
pub struct Engine {
    inner: Arc<wick_core::Engine>,
}

#[napi]
impl Engine {
    /// Loads a GGUF model on a blocking worker thread (not the libuv pool).
    #[napi(catch_unwind)]
    pub fn load(env: &Env, opts: LoadOptions) -> napi::Result<AsyncBlock<Engine>> {
        let mut o = wick_core::EngineOptions::new(opts.model_path);
        o.context_size = opts.context_size.map(|c| c as usize);
        if let Some(n) = opts.max_sequences {
            o.max_sequences = n as usize;
        }
        if let Some(n) = opts.max_queue {
            o.max_queue = n as usize;
        }
        if let Some(n) = opts.step_tokens {
            o.step_tokens = n as usize;
        }
        // The one place the JS sentinel (0 = the whole prompt) becomes the engine's None.
        if let Some(n) = opts.prefill_chunk {
            o.prefill_chunk = (n > 0).then_some(n as usize);
        }
        o.kv_tokens = opts.kv_tokens.filter(|&n| n > 0).map(|n| n as usize);
        o.kv_bytes = opts.kv_cache_memory_bytes.filter(|&n| n >= 1.0).map(|n| n as usize);
        let cache_type = |t: &Option<String>| t.as_deref().map_or(Ok(KvType::F16), KvType::parse);
        o.kv_types = KvTypes {
            k: cache_type(&opts.cache_type_k).map_err(|e| js_error(env, e))?,
            v: cache_type(&opts.cache_type_v).map_err(|e| js_error(env, e))?,
        };
        o.prefix_cache = opts.prefix_cache.unwrap_or(true);
        o.vocab_only = opts.vocab_only.unwrap_or(false);
        o.threads = opts.threads.map(|n| n as usize);
        o.mmproj = opts.mmproj.map(Into::into);
        o.vision.image_min_tokens = opts.image_min_tokens.map(|n| n as usize);
        o.vision.image_max_tokens = opts.image_max_tokens.map(|n| n as usize);
        if let Some(d) = &opts.device {
            o.device = d.parse().map_err(|e| js_error(env, e))?;
        }
        o.gpu_layers = opts.gpu_layers.map(|n| n as usize);
        o.gpu_memory_utilization = opts.gpu_memory_utilization.map(|u| u as f32);
        o.lora = opts.lora.unwrap_or_default().into_iter().map(Into::into).collect();
        o.speculative = opts.speculative.map_or(SpecOptions::OFF, Into::into);
        o.pack_cache = opts.pack_cache_dir.map(Into::into);
        o.draft_model = opts.draft_model_path.map(Into::into);
        promise(env, async move {
            let engine =
                blocking(|| wick_core::Engine::load(o), WickError::load("the loader panicked")).await?;
            Ok(Engine { inner: Arc::new(engine) })
        })
    }

    #[napi(catch_unwind)]
    pub fn info(&self) -> Result<EngineInfoJs> {
        guarded("info", || Ok(self.inner.info().into()))
    }

    #[napi(catch_unwind)]
    pub fn tokenize(
        &self,
        text: String,
        add_special: Option<bool>,
        parse_special: Option<bool>,
    ) -> Result<Vec<u32>> {
        guarded("tokenize", || {
            self.inner
                .tokenizer()
                .encode(&text, add_special.unwrap_or(true), parse_special.unwrap_or(false))
                .map_err(to_js)
        })
    }

    /// Ids outside the vocabulary render as nothing (`Tokenizer::decode` checks them).
    #[napi(catch_unwind)]
    pub fn detokenize(&self, ids: Vec<u32>, skip_special: Option<bool>) -> Result<String> {
        guarded("detokenize", || Ok(self.inner.tokenizer().decode(&ids, skip_special.unwrap_or(false))))
    }

    /// Each token's bytes as it renders alone (a byte of a longer character stays a byte, where
    /// `detokenize` would give U+FFFD); ids outside the vocabulary give no bytes.
    #[napi(catch_unwind)]
    pub fn token_bytes(&self, ids: Vec<u32>) -> Result<Vec<Buffer>> {
        guarded("tokenBytes", || {
            Ok(ids.iter().map(|&id| self.inner.tokenizer().token_bytes(id).into()).collect())
        })
    }

    /// Exact vocabulary lookup of a token's text (e.g. a template's special tokens).
    #[napi(catch_unwind)]
    pub fn token_id(&self, text: String) -> Result<Option<u32>> {
        guarded("tokenId", || Ok(self.inner.tokenizer().token_id(&text)))
    }

    /// Queues a request. A CONTEXT_LENGTH_EXCEEDED error carries `promptTokens`,
    /// `contextSize` and (when set) `maxTokens` beside its code and message.
    #[napi(catch_unwind)]
    pub fn submit(&self, env: &Env, opts: GenerateOptions) -> napi::Result<Sequence> {
        guarded_core(env, "submit", || {
            let handle = self.inner.submit(opts.into())?;
            let canceller = handle.canceller();
            Ok(Sequence { events: Arc::new(Mutex::new(handle.events)), canceller })
        })
    }

    /// Queues an embedding request: its sequence yields one `embedding` event, then `done`.
    /// Errors as `submit`'s (a generation-only option does not apply).
    #[napi(catch_unwind)]
    pub fn embed(&self, env: &Env, req: EmbedRequest) -> napi::Result<Sequence> {
        guarded_core(env, "embed", || {
            let handle = self.inner.submit(req.into())?;
            let canceller = handle.canceller();
            Ok(Sequence { events: Arc::new(Mutex::new(handle.events)), canceller })
        })
    }

    /// Loads a LoRA adapter beside the loaded ones (off the JS thread); resolves to its id.
    #[napi(catch_unwind)]
    pub fn load_adapter(&self, env: &Env, spec: LoraAdapterSpec) -> napi::Result<AsyncBlock<u32>> {
        let inner = self.inner.clone();
        let spec: wick_core::engine::LoraSpec = spec.into();
        let load = move || inner.load_adapter(&spec).map(|id| id as u32);
        promise(env, blocking(load, WickError::load("loading the adapter panicked")))
    }

    /// Unloads the adapter named `name` (running sequences finish with it).
    #[napi(catch_unwind)]
    pub fn unload_adapter(&self, env: &Env, name: String) -> napi::Result<()> {
        guarded_core(env, "unloadAdapter", || self.inner.unload_adapter(&name))
    }

    /// The loaded LoRA adapters, by id.
    #[napi(catch_unwind)]
    pub fn adapters(&self) -> Result<Vec<LoraAdapter>> {
        guarded("adapters", || Ok(self.inner.adapters().into_iter().map(Into::into).collect()))
    }

    /// Sets the scales requests that name no adapters get (llama-server's `POST /lora-adapters`).
    #[napi(catch_unwind)]
    pub fn set_adapter_scales(&self, env: &Env, scales: Vec<LoraScale>) -> napi::Result<()> {
        guarded_core(env, "setAdapterScales", || {
            let s: Vec<(usize, f32)> = scales.iter().map(|x| (x.id as usize, x.scale as f32)).collect();
            self.inner.set_adapter_scales(&s)
        })
    }

    #[napi(catch_unwind)]
    pub fn metrics(&self) -> Result<Metrics> {
        guarded("metrics", || Ok(self.inner.metrics().into()))
    }

    /// `{ ok: false, reason }` once the scheduler thread died (every request then fails with
    /// ENGINE_DEAD: unload and load the model again) or after `unload`.
    #[napi(catch_unwind)]
    pub fn health(&self) -> Result<EngineHealth> {
        guarded("health", || {
            let h = self.inner.health();
            Ok(EngineHealth { ok: h.ok, reason: h.reason })
        })
    }

    /// Holds the scheduler between steps until `resume`; submissions queue meanwhile.
    #[napi(catch_unwind)]
    pub fn pause(&self) -> Result<()> {
        guarded("pause", || self.inner.pause().map_err(to_js))
    }

    #[napi(catch_unwind)]
    pub fn resume(&self) -> Result<()> {
        guarded("resume", || self.inner.resume().map_err(to_js))
    }

    /// Stops the scheduler; pending sequences end with ENGINE_STOPPED.
    #[napi(catch_unwind, ts_return_type = "Promise<void>")]
    pub fn unload(&self, env: &Env) -> napi::Result<AsyncBlock<()>> {
        let inner = self.inner.clone();
        let stopping = WickError::Internal("stopping the scheduler panicked".into());
        let stop = move || {
            inner.shutdown();
            Ok(())
        };
        promise(env, blocking(stop, stopping))
    }
}

/// The widest CPU kernels this process runs ("avx512vnni", "avx2" or "scalar"): detected once,
/// after the `WICK_ISA` cap. Prebuilt binaries target baseline x86-64 and pick these at run time,
/// so the server logs it at load.
#[napi]
pub fn cpu_isa() -> String {
    wick_core::kernels::cpu::feats::isa().name().to_string()
}

/// The GPU backends this addon was built with (`cuda`, `metal`); empty for the CPU addon.
#[napi]
pub fn gpu_backends() -> Vec<String> {
    wick_core::runtime::device::compiled_backends().into_iter().map(String::from).collect()
}

/// Where a model would run for a `--device` choice (`WICK_DEVICE` when absent), opening the GPU
/// as a load would. The CUDA addon's loader asks this in a child process first, so that a
/// broken driver takes down the probe, never the server.
#[napi(object)]
pub struct DeviceProbe {
    /// `cpu`, `cpu-candle`, `cuda:0`, `metal`.
    pub device: String,
    /// Why that is not the device asked for, when it is not.
    pub notice: Option<String>,
}

#[napi(catch_unwind)]
pub fn probe_device(device: Option<String>) -> Result<DeviceProbe> {
    use wick_core::runtime::device::{DeviceChoice, Placement};
    guarded("probeDevice", || {
        let choice = match device {
            Some(d) => d.parse::<DeviceChoice>().map_err(to_js)?,
            None => DeviceChoice::from_env().map_err(to_js)?,
        };
        let p = Placement::resolve(choice, None);
        Ok(DeviceProbe { device: p.name(), notice: p.notice.clone() })
    })
}

/// Reads a GGUF file's header (no weights) on a blocking worker thread: architecture,
/// parameter count, quantization mix, context length, experts, metadata.
#[napi(catch_unwind)]
pub fn inspect_model(
    env: &Env,
    path: String,
    opts: Option<InspectOptions>,
) -> napi::Result<AsyncBlock<GgufInfo>> {
    let max_array_len = opts.and_then(|o| o.max_array_len);
    let read = move || {
        let mut info = wick_core::gguf::info::GgufHeaderInfo::from_path(&path)?;
        if let Some(n) = max_array_len {
            info.truncate_arrays(n as usize);
        }
        Ok(GgufInfo::from(info))
    };
    promise(env, blocking(read, WickError::load("reading the GGUF header panicked")))
}

#[napi]
pub struct Sequence {
    events: Arc<Mutex<EventReceiver>>,
    canceller: Canceller,
}

#[napi]
impl Sequence {
    /// Waits for the next events and returns all that are ready (one boundary crossing for
    /// many tokens); null once the sequence has ended. Never rejects: engine errors arrive
    /// in-band, as an `error` event.
    #[napi(catch_unwind)]
    pub async fn next(&self) -> napi::Result<Option<Vec<SequenceEvent>>> {
        let mut rx = self.events.clone().lock_owned().await;
        let Some(first) = rx.recv().await else { return Ok(None) };
        // `catch_unwind` on an async fn covers only making the future, not polling it: the
        // conversion is guarded here (a panic ends the sequence in-band with INTERNAL).
        let drain = || {
            let mut out = vec![SequenceEvent::from(first)];
            while let Ok(e) = rx.try_recv() {
                out.push(e.into());
            }
            out
        };
        let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(drain)).unwrap_or_else(|_| {
            let e = WickError::Internal("reading the sequence's events panicked".into());
            vec![SequenceEvent::Error { code: e.code().into(), message: e.to_string() }]
        });
        Ok(Some(out))
    }

    #[napi(catch_unwind)]
    pub fn cancel(&self) -> Result<()> {
        guarded("cancel", || {
            self.canceller.cancel();
            Ok(())
        })
    }
}
