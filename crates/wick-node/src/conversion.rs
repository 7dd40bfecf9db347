//! `wick convert` through the binding: a Hugging Face directory → GGUF on a thread of its own
//! (never the libuv pool: a conversion takes minutes), with a progress snapshot JS polls for
//! its progress bar, a cancel that removes the partial output, and the converter's errors
//! as coded JS errors.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use napi::bindgen_prelude::AsyncBlock;
use napi::Env;
use tokio::sync::oneshot;
use wick_convert::{ConvertError, OutType};

use crate::error::{promise_coded, Code, Result};

#[napi(object)]
pub struct ConvertOptions {
    /// The Hugging Face model directory (config.json, *.safetensors, tokenizer files).
    pub input: String,
    pub outfile: String,
    /// f32, f16, bf16, q8_0, q4_0, q4_k_m, q5_k_m or q6_k.
    pub outtype: String,
    /// Quantizing threads (default: one per core).
    pub threads: Option<u32>,
}

#[napi(object)]
#[derive(Clone, Default)]
pub struct ConvertProgress {
    /// The tensor just written.
    pub tensor: String,
    pub tensors_done: u32,
    pub tensors_total: u32,
    pub bytes_written: f64,
    pub bytes_total: f64,
}

#[napi(object)]
pub struct TensorType {
    pub name: String,
    /// ggml type name (Q4_K, F32, …).
    pub dtype: String,
}

#[napi(object)]
pub struct ConvertReport {
    pub outfile: String,
    pub architecture: String,
    pub outtype: String,
    pub tensors: u32,
    pub bytes_read: f64,
    pub bytes_written: f64,
    pub seconds: f64,
    /// The largest tensor of the checkpoint, in bytes.
    pub largest_tensor_bytes: f64,
    /// Every tensor's type, in file order.
    pub types: Vec<TensorType>,
}

fn coded(e: ConvertError) -> napi::Error<Code> {
    napi::Error::new(Code(e.code()), e.to_string())
}

type Outcome = std::result::Result<wick_convert::Report, ConvertError>;

/// A running conversion.
#[napi]
pub struct Conversion {
    cancel: Arc<AtomicBool>,
    progress: Arc<Mutex<ConvertProgress>>,
    result: Mutex<Option<oneshot::Receiver<Outcome>>>,
}

/// The output types `outtype` accepts.
#[napi(catch_unwind)]
pub fn convert_out_types() -> Result<Vec<String>> {
    Ok(OutType::ALL.iter().map(|t| t.name().to_string()).collect())
}

/// Starts converting `opts.input` into `opts.outfile` on a new thread.
#[napi(catch_unwind)]
pub fn start_conversion(opts: ConvertOptions) -> Result<Conversion> {
    let outtype = OutType::parse(&opts.outtype).ok_or_else(|| {
        coded(ConvertError::InvalidArgument(format!("unknown output type `{}`", opts.outtype)))
    })?;
    let cancel = Arc::new(AtomicBool::new(false));
    let progress = Arc::new(Mutex::new(ConvertProgress::default()));
    let core = wick_convert::ConvertOptions {
        input: opts.input.into(),
        outfile: opts.outfile.into(),
        outtype,
        threads: opts.threads.map(|n| n as usize),
        cancel: Some(cancel.clone()),
    };
    let (tx, rx) = oneshot::channel();
    let shared = progress.clone();
    std::thread::Builder::new()
        .name("wick-convert".into())
        .spawn(move || {
            let run = || {
                wick_convert::convert(&core, |p| {
                    if let Ok(mut s) = shared.lock() {
                        *s = ConvertProgress {
                            tensor: p.tensor.clone(),
                            tensors_done: p.tensors_done as u32,
                            tensors_total: p.tensors_total as u32,
                            bytes_written: p.bytes_written as f64,
                            bytes_total: p.bytes_total as f64,
                        };
                    }
                })
            };
            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(run))
                .unwrap_or_else(|_| Err(ConvertError::Internal("the converter panicked".into())));
            let _ = tx.send(outcome);
        })
        .map_err(|e| coded(ConvertError::Internal(format!("cannot start the converter thread: {e}"))))?;
    Ok(Conversion { cancel, progress, result: Mutex::new(Some(rx)) })
}

#[napi]
impl Conversion {
    /// Where the conversion is (after the last tensor written).
    #[napi(catch_unwind)]
    pub fn progress(&self) -> Result<ConvertProgress> {
        Ok(self.progress.lock().map(|p| p.clone()).unwrap_or_default())
    }

    /// Stops the conversion; `done()` then rejects with CANCELLED and no file is left.
    #[napi(catch_unwind)]
    pub fn cancel(&self) -> Result<()> {
        self.cancel.store(true, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }

    /// Resolves with the report once the file is in place; rejects with the error's code
    /// (CONVERT_FAILED, UNSUPPORTED_ARCHITECTURE, INVALID_REQUEST, CANCELLED).
    #[napi(catch_unwind, ts_return_type = "Promise<ConvertReport>")]
    pub fn done(&self, env: &Env) -> napi::Result<AsyncBlock<ConvertReport>> {
        let rx = self.result.lock().ok().and_then(|mut r| r.take());
        promise_coded(env, async move {
            let rx =
                rx.ok_or_else(|| coded(ConvertError::InvalidArgument("done() was already called".into())))?;
            let outcome = rx
                .await
                .map_err(|_| coded(ConvertError::Internal("the converter thread vanished".into())))?;
            let r = outcome.map_err(coded)?;
            Ok(ConvertReport {
                outfile: r.outfile.display().to_string(),
                architecture: r.architecture,
                outtype: r.outtype.name().into(),
                tensors: r.tensors as u32,
                bytes_read: r.bytes_read as f64,
                bytes_written: r.bytes_written as f64,
                seconds: r.seconds,
                largest_tensor_bytes: r.largest_tensor_bytes as f64,
                types: r
                    .types
                    .into_iter()
                    .map(|(name, t)| TensorType { name, dtype: t.name().into() })
                    .collect(),
            })
        })
    }
}
