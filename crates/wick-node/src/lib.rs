//! napi binding for wick-core. Thin by design: argument conversion, error codes, and moving
//! blocking work off the JS thread. All logic lives in wick-core (below) or ts/ (above).

#[macro_use]
extern crate napi_derive;

mod convert;
mod error;

use std::sync::Arc;

use tokio::sync::mpsc::UnboundedReceiver;
use tokio::sync::Mutex;

use convert::{GenerateOptions, GgufInfo, InspectOptions, LoadOptions, Metrics, ModelInfo, SequenceEvent};
use error::{to_js, to_js_async, Result};
use wick_core::engine::{Canceller, Event};

#[napi]
pub struct Engine {
    inner: Arc<wick_core::Engine>,
}

#[napi]
impl Engine {
    /// Loads a GGUF model on a blocking worker thread (not the libuv pool).
    #[napi(factory, catch_unwind)]
    pub async fn load(opts: LoadOptions) -> napi::Result<Engine> {
        if let Some(t) = opts.threads.filter(|&t| t > 0) {
            // candle reads this once, when its thread pool first starts.
            std::env::set_var("CANDLE_NUM_THREADS", t.to_string());
        }
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
        if let Some(n) = opts.prefill_chunk {
            o.prefill_chunk = (n > 0).then_some(n as usize);
        }
        o.kv_tokens = opts.kv_tokens.filter(|&n| n > 0).map(|n| n as usize);
        o.prefix_cache = opts.prefix_cache.unwrap_or(true);
        o.vocab_only = opts.vocab_only.unwrap_or(false);
        let engine = tokio::task::spawn_blocking(move || {
            std::panic::catch_unwind(|| wick_core::Engine::load(o))
                .unwrap_or_else(|_| Err(wick_core::WickError::load("the loader panicked")))
        })
        .await
        .map_err(|e| to_js_async(wick_core::WickError::Internal(e.to_string())))?
        .map_err(to_js_async)?;
        Ok(Engine { inner: Arc::new(engine) })
    }

    #[napi(catch_unwind)]
    pub fn info(&self) -> ModelInfo {
        self.inner.info().into()
    }

    #[napi(catch_unwind)]
    pub fn tokenize(
        &self,
        text: String,
        add_special: Option<bool>,
        parse_special: Option<bool>,
    ) -> Result<Vec<u32>> {
        self.inner
            .tokenizer()
            .encode(&text, add_special.unwrap_or(true), parse_special.unwrap_or(false))
            .map_err(to_js)
    }

    #[napi(catch_unwind)]
    pub fn detokenize(&self, ids: Vec<u32>, skip_special: Option<bool>) -> String {
        self.inner.tokenizer().decode(&ids, skip_special.unwrap_or(false))
    }

    /// Exact vocabulary lookup of a token's text (e.g. a template's special tokens).
    #[napi(catch_unwind)]
    pub fn token_id(&self, text: String) -> Option<u32> {
        self.inner.tokenizer().token_id(&text)
    }

    #[napi(catch_unwind)]
    pub fn submit(&self, opts: GenerateOptions) -> Result<Sequence> {
        let handle = self.inner.submit(opts.into()).map_err(to_js)?;
        let canceller = handle.canceller();
        Ok(Sequence { events: Arc::new(Mutex::new(handle.events)), canceller })
    }

    #[napi(catch_unwind)]
    pub fn metrics(&self) -> Metrics {
        self.inner.metrics().into()
    }

    /// Holds the scheduler between steps until `resume`; submissions queue meanwhile.
    #[napi(catch_unwind)]
    pub fn pause(&self) -> Result<()> {
        self.inner.pause().map_err(to_js)
    }

    #[napi(catch_unwind)]
    pub fn resume(&self) -> Result<()> {
        self.inner.resume().map_err(to_js)
    }

    /// Stops the scheduler; pending sequences end with ENGINE_STOPPED.
    #[napi(catch_unwind)]
    pub async fn unload(&self) -> napi::Result<()> {
        let inner = self.inner.clone();
        tokio::task::spawn_blocking(move || inner.shutdown())
            .await
            .map_err(|e| to_js_async(wick_core::WickError::Internal(e.to_string())))
    }
}

/// Reads a GGUF file's header (no weights) on a blocking worker thread: architecture,
/// parameter count, quantization mix, context length, experts, metadata.
#[napi(catch_unwind)]
pub async fn inspect_model(path: String, opts: Option<InspectOptions>) -> napi::Result<GgufInfo> {
    let max_array_len = opts.and_then(|o| o.max_array_len);
    tokio::task::spawn_blocking(move || {
        let mut info = std::panic::catch_unwind(|| wick_core::gguf::info::ModelInfo::from_path(&path))
            .unwrap_or_else(|_| Err(wick_core::WickError::load("reading the GGUF header panicked")))?;
        if let Some(n) = max_array_len {
            info.truncate_arrays(n as usize);
        }
        Ok::<_, wick_core::WickError>(GgufInfo::from(info))
    })
    .await
    .map_err(|e| to_js_async(wick_core::WickError::Internal(e.to_string())))?
    .map_err(to_js_async)
}

#[napi]
pub struct Sequence {
    events: Arc<Mutex<UnboundedReceiver<Event>>>,
    canceller: Canceller,
}

#[napi]
impl Sequence {
    /// Waits for the next events and returns all that are ready (one boundary crossing for
    /// many tokens); null once the sequence has ended.
    #[napi(catch_unwind)]
    pub async fn next(&self) -> napi::Result<Option<Vec<SequenceEvent>>> {
        let mut rx = self.events.clone().lock_owned().await;
        let Some(first) = rx.recv().await else { return Ok(None) };
        let mut out = vec![SequenceEvent::from(first)];
        while let Ok(e) = rx.try_recv() {
            out.push(e.into());
        }
        Ok(Some(out))
    }

    #[napi(catch_unwind)]
    pub fn cancel(&self) {
        self.canceller.cancel();
    }
}
