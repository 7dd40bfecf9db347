//! Plain JS objects crossing the boundary, and their mapping to engine types.

use napi::bindgen_prelude::{Float32Array, Uint8Array};
use wick_core::engine::EngineInfo;
use wick_core::runtime::weight_cache::WeightCacheUse;

use crate::js_embed::EmbeddingInfo;
use crate::js_lora::{LoraAdapterSpec, LoraScale};
use crate::js_spec::Speculation;
use wick_core::gguf::{info, MetaValue};
use wick_core::metrics::MetricsSnapshot;
use wick_core::request::{self, DoneEvent, Event, GenerateRequest, TokenEvent};
use wick_core::sampling::grammar::{GrammarKind as CoreGrammarKind, GrammarSpec};
use wick_core::sampling::{SamplingParams, TokenLogprob};

#[napi(object)]
pub struct LoadOptions {
    pub model_path: String,
    pub context_size: Option<u32>,
    pub max_sequences: Option<u32>,
    pub max_queue: Option<u32>,
    pub step_tokens: Option<u32>,
    /// Prompt tokens per sequence per step; absent = the engine's default (256). 0 = the
    /// whole prompt in one pass: the one sentinel, turned into the engine's `None` at load
    /// (`Engine::load`) and nowhere else.
    pub prefill_chunk: Option<u32>,
    /// Tokens the shared KV pool holds (all sequences); default context size × sequences.
    pub kv_tokens: Option<u32>,
    /// Bytes the shared KV pool may take (vLLM's `--kv-cache-memory-bytes`) when `kvTokens`
    /// is absent: its tokens are what fits at the cache types' bytes per token.
    pub kv_cache_memory_bytes: Option<f64>,
    /// How the pool stores keys / values: `f16` (default), `q8_0` or `q4_0` (llama.cpp's
    /// `--cache-type-k` / `--cache-type-v`).
    pub cache_type_k: Option<String>,
    pub cache_type_v: Option<String>,
    /// Reuse cached KV blocks of equal prompt prefixes (default true).
    pub prefix_cache: Option<bool>,
    pub vocab_only: Option<bool>,
    /// CPU threads for the kernels (process-wide, fixed by the first load; another count
    /// later fails with INVALID_REQUEST). Default `WICK_THREADS`, else every core.
    pub threads: Option<u32>,
    /// A vision projector GGUF (LFM2-VL `mmproj`): requests may then carry images.
    pub mmproj: Option<String>,
    /// Image tokens per image at least / at most (llama.cpp's `--image-min-tokens` /
    /// `--image-max-tokens`; LFM2-VL's defaults are 64 and 256).
    pub image_min_tokens: Option<u32>,
    pub image_max_tokens: Option<u32>,
    /// `auto` (default; `WICK_DEVICE` when set), `cpu`, `cuda`, `cuda:N`, `metal`, or
    /// `cpu-candle` (the GPU code path on the CPU: a check, not a speed option).
    pub device: Option<String>,
    /// Layers on the GPU (llama-server's `-ngl`); 0 keeps the model on the CPU.
    pub gpu_layers: Option<u32>,
    /// Share of the GPU's memory to fill (vLLM's `--gpu-memory-utilization`): sizes the KV
    /// pool from what is left after the weights when `kvTokens` is absent. CUDA only.
    pub gpu_memory_utilization: Option<f64>,
    /// LoRA adapters loaded with the model, in id order (llama-server's `--lora`).
    pub lora: Option<Vec<LoraAdapterSpec>>,
    /// Speculative decoding for requests that do not say (default off).
    pub speculative: Option<Speculation>,
    /// A draft model GGUF for `speculative.method = "draft"` (llama-server's `--model-draft`):
    /// its vocabulary must be the model's.
    pub draft_model_path: Option<String>,
    /// A directory for the pack cache: the weights this load repacks are saved there, and the
    /// next load of the same file maps them instead of packing again. Absent: none.
    pub pack_cache_dir: Option<String>,
}

/// What the load did with the pack cache (`EngineInfo::pack_cache`).
#[napi(object)]
pub struct PackCacheInfo {
    /// `read` (weights mapped from `path`), `writing` (this load packed them; `path` appears
    /// once they are saved) or `unused` (`reason` says why).
    pub state: String,
    pub path: Option<String>,
    /// Weights mapped from the file (`read`).
    pub weights: Option<u32>,
    pub reason: Option<String>,
}

impl From<&WeightCacheUse> for PackCacheInfo {
    fn from(u: &WeightCacheUse) -> Self {
        let (state, path, weights, reason) = match u {
            WeightCacheUse::Read { path, weights } => ("read", Some(path), Some(*weights as u32), None),
            WeightCacheUse::Writing { path } => ("writing", Some(path), None, None),
            WeightCacheUse::Unused { why } => ("unused", None, None, Some(why.clone())),
        };
        Self { state: state.into(), path: path.map(|p| p.display().to_string()), weights, reason }
    }
}

/// What a loaded engine reports (`Engine.info()`, the `ModelInfo` type in JS): the model, its
/// limits and the engine's sizing facts (`wick_core::engine::EngineInfo`).
#[napi(object, js_name = "ModelInfo")]
pub struct EngineInfoJs {
    pub architecture: String,
    pub name: Option<String>,
    pub n_vocab: u32,
    pub n_ctx_train: u32,
    pub n_layer: u32,
    pub n_embd: u32,
    pub n_head: u32,
    pub n_head_kv: u32,
    pub n_params: f64,
    pub context_size: u32,
    pub file_size: f64,
    pub bos_token: Option<u32>,
    pub eos_token: Option<u32>,
    pub add_bos: bool,
    pub chat_template: Option<String>,
    /// The file's recommended sampling: `general.sampling.<key>` → value (numeric keys only).
    pub sampling: std::collections::HashMap<String, f64>,
    pub vocab_only: bool,
    /// CPU kernel threads in effect (process-wide).
    pub threads: u32,
    /// A vision projector is loaded: requests may carry images.
    pub vision: bool,
    /// Sequences decoded together (the engine's default when the load left it out).
    pub max_sequences: u32,
    /// Tokens the shared KV pool holds, all sequences together; 0 when vocab-only.
    pub kv_tokens: f64,
    /// KV cache bytes one token takes (attention layers only; LFM2's conv layers hold none);
    /// 0 when vocab-only.
    pub kv_bytes_per_token: f64,
    /// How the pool stores keys and values (`f16`, `q8_0`, `q4_0`).
    pub cache_type_k: String,
    pub cache_type_v: String,
    /// Where the model runs: `cpu`, `cpu-candle`, `cuda:0`, `metal`.
    pub device: String,
    /// Why that is not the device asked for (one line, e.g. no GPU), when it is not.
    pub device_notice: Option<String>,
    /// Blocks on the device when only some are (`-ngl N` below the block count).
    pub device_layers: Option<u32>,
    /// What embedding requests get; absent when vocab-only.
    pub embedding: Option<EmbeddingInfo>,
    /// Speculative decoding for requests that do not say; absent when off.
    pub speculative: Option<Speculation>,
    /// What the load did with the pack cache; absent when it had none.
    pub pack_cache: Option<PackCacheInfo>,
    /// The draft model, when one is loaded.
    pub draft_model: Option<DraftModelInfo>,
}

/// A loaded draft model (`EngineInfo::draft_model`).
#[napi(object)]
pub struct DraftModelInfo {
    pub architecture: String,
    pub n_params: f64,
    pub n_layer: u32,
    pub n_embd: u32,
}

impl From<&EngineInfo> for EngineInfoJs {
    fn from(i: &EngineInfo) -> Self {
        let m = &i.model;
        Self {
            architecture: m.architecture.clone(),
            name: i.name.clone(),
            n_vocab: m.n_vocab as u32,
            n_ctx_train: m.n_ctx_train as u32,
            n_layer: m.n_layer as u32,
            n_embd: m.n_embd as u32,
            n_head: m.n_head as u32,
            n_head_kv: m.n_head_kv as u32,
            n_params: m.n_params as f64,
            context_size: i.context_size as u32,
            file_size: i.file_size as f64,
            bos_token: i.bos_token,
            eos_token: i.eos_token,
            add_bos: i.add_bos,
            chat_template: i.chat_template.clone(),
            sampling: i.sampling.iter().cloned().collect(),
            vocab_only: i.vocab_only,
            threads: i.threads as u32,
            vision: i.vision,
            max_sequences: i.max_sequences as u32,
            kv_tokens: i.kv_tokens as f64,
            kv_bytes_per_token: i.kv_bytes_per_token as f64,
            cache_type_k: i.kv_types.k.name().to_string(),
            cache_type_v: i.kv_types.v.name().to_string(),
            device: i.device.clone(),
            device_notice: i.device_notice.clone(),
            device_layers: i.device_layers.map(|n| n as u32),
            embedding: i.embedding.as_ref().map(Into::into),
            speculative: i.speculative.is_on().then(|| i.speculative.into()),
            pack_cache: i.pack_cache.as_ref().map(Into::into),
            draft_model: i.draft_model.as_ref().map(|d| DraftModelInfo {
                architecture: d.architecture.clone(),
                n_params: d.n_params as f64,
                n_layer: d.n_layer as u32,
                n_embd: d.n_embd as u32,
            }),
        }
    }
}

/// `Engine::health`: false once the scheduler thread died (with why) or after unload.
#[napi(object)]
pub struct EngineHealth {
    pub ok: bool,
    pub reason: Option<String>,
}

#[napi(object)]
pub struct InspectOptions {
    /// Metadata arrays longer than this come back empty (Ollama's non-verbose `model_info`).
    pub max_array_len: Option<u32>,
}

/// Tensors of one ggml type and their bytes in the file.
#[napi(object)]
pub struct QuantShare {
    pub dtype: String,
    pub tensors: u32,
    pub bytes: f64,
}

/// A GGUF file's header, as `wick show` reports it (wick_core::gguf::info::GgufHeaderInfo).
#[napi(object)]
pub struct GgufInfo {
    pub architecture: String,
    pub name: Option<String>,
    pub gguf_version: u32,
    pub file_size: f64,
    pub parameter_count: f64,
    /// llama.cpp's LLAMA_FTYPE number (`general.file_type`).
    pub file_type: Option<u32>,
    /// "Q4_K_M", or the ggml type holding most bytes when the file does not say.
    pub quantization: String,
    /// Most bytes first.
    pub quant_mix: Vec<QuantShare>,
    /// Weight bytes one decoded token streams from memory (every weight but an untied token
    /// embedding; a mixture's experts at their routed share): the bandwidth floor's numerator.
    pub decode_bytes: f64,
    pub context_length: Option<f64>,
    pub embedding_length: Option<f64>,
    pub block_count: Option<f64>,
    pub head_count: Option<f64>,
    pub head_count_kv: Option<f64>,
    pub expert_count: Option<f64>,
    pub expert_used_count: Option<f64>,
    pub vocab_size: Option<f64>,
    pub chat_template: Option<String>,
    /// Every metadata key → its value (numbers, strings, booleans, arrays).
    pub metadata: serde_json::Map<String, serde_json::Value>,
}

impl From<info::GgufHeaderInfo> for GgufInfo {
    fn from(i: info::GgufHeaderInfo) -> Self {
        let n = |v: Option<u64>| v.map(|x| x as f64);
        Self {
            name: i.name,
            gguf_version: i.gguf_version,
            file_size: i.file_size as f64,
            parameter_count: i.parameter_count as f64,
            file_type: i.file_type,
            quantization: i.quantization,
            quant_mix: i
                .quant_mix
                .iter()
                .map(|q| QuantShare {
                    dtype: q.dtype.into(),
                    tensors: q.tensors as u32,
                    bytes: q.bytes as f64,
                })
                .collect(),
            decode_bytes: i.decode_bytes as f64,
            context_length: n(i.context_length),
            embedding_length: n(i.embedding_length),
            block_count: n(i.block_count),
            head_count: n(i.head_count),
            head_count_kv: n(i.head_count_kv),
            expert_count: n(i.expert_count),
            expert_used_count: n(i.expert_used_count),
            vocab_size: n(i.vocab_size),
            chat_template: i.chat_template,
            metadata: i.metadata.iter().map(|(k, v)| (k.clone(), json(v))).collect(),
            architecture: i.architecture,
        }
    }
}

fn json(v: &MetaValue) -> serde_json::Value {
    use serde_json::Value as J;
    let num = |x: f64| serde_json::Number::from_f64(x).map_or(J::Null, J::Number);
    match v {
        MetaValue::U8(x) => (*x).into(),
        MetaValue::I8(x) => (*x).into(),
        MetaValue::U16(x) => (*x).into(),
        MetaValue::I16(x) => (*x).into(),
        MetaValue::U32(x) => (*x).into(),
        MetaValue::I32(x) => (*x).into(),
        MetaValue::U64(x) => (*x).into(),
        MetaValue::I64(x) => (*x).into(),
        // Through its shortest decimal form, so 1e-5f32 reads 1e-5 rather than 9.99999974e-6.
        MetaValue::F32(x) => num(x.to_string().parse().unwrap_or(f64::NAN)),
        MetaValue::F64(x) => num(*x),
        MetaValue::Bool(x) => (*x).into(),
        MetaValue::String(x) => x.as_str().into(),
        MetaValue::Array(a) => a.iter().map(json).collect(),
    }
}

#[napi(object)]
pub struct GenerateOptions {
    /// Prompt token ids, BOS included when wanted.
    pub prompt_tokens: Vec<u32>,
    /// Tokens to generate at most; default until the context is full.
    pub max_tokens: Option<u32>,
    /// 0 is greedy; default 1.
    pub temperature: Option<f64>,
    /// 0 (default) is off.
    pub top_k: Option<u32>,
    /// 1 (default) is off.
    pub top_p: Option<f64>,
    /// 0 (default) is off.
    pub min_p: Option<f64>,
    /// Multiplicative (llama.cpp style); 1 (default) is off.
    pub repetition_penalty: Option<f64>,
    /// Tokens the repetition penalty looks back at; 0 = all (default 64).
    pub repeat_last_n: Option<u32>,
    /// Additive, OpenAI style: subtracted once from every token generated so far.
    pub presence_penalty: Option<f64>,
    /// Additive, OpenAI style: subtracted per occurrence in the generated tokens.
    pub frequency_penalty: Option<f64>,
    /// Integer seed (JS numbers up to 2^53).
    pub seed: Option<f64>,
    /// Generation ends before any of these strings (matched on the visible text).
    pub stop: Option<Vec<String>>,
    /// Keep generating past end-of-generation tokens.
    pub ignore_eos: Option<bool>,
    /// Report the chosen token's logprob and this many alternatives.
    pub top_logprobs: Option<u32>,
    /// Control tokens whose text appears in the generated text (a tool parser's markers such
    /// as `<|tool_call_start|>`); every other control token renders as nothing. Token ids
    /// are reported either way.
    pub marker_tokens: Option<Vec<u32>>,
    /// Added to the raw logits before penalties and temperature (OpenAI `logit_bias`: -100
    /// effectively bans a token, +100 effectively forces it). An id outside the vocabulary
    /// is INVALID_REQUEST.
    pub logit_bias: Option<Vec<LogitBias>>,
    /// Constrains the output to a grammar; a grammar that does not compile (or exceeds the
    /// parser limits) makes `submit` throw INVALID_GRAMMAR.
    pub grammar: Option<Grammar>,
    /// Images in the prompt (needs a model loaded with `mmproj`), in prompt order.
    pub images: Option<Vec<ImageInput>>,
    /// Ends the answer's thinking block after a number of tokens by forcing its closing marker.
    pub reasoning_budget: Option<ReasoningBudget>,
    /// LoRA adapters for this request with their scales (adapters left out are off); absent:
    /// the engine's default scales.
    pub lora: Option<Vec<LoraScale>>,
    /// Speculative decoding for this request; absent: the engine's. Ignored off the exact CPU
    /// path.
    pub speculative: Option<Speculation>,
    /// The caller reads the whole answer at once (a response that is not streamed): token
    /// events come with the done event instead of one by one, so the JS thread is not woken
    /// per token. Default false.
    pub hold_events: Option<bool>,
}

/// A thinking block's budget and its markers as token ids.
#[napi(object)]
pub struct ReasoningBudget {
    /// Tokens generated inside the block before its closing marker is forced (0: at once).
    pub tokens: u32,
    /// The opening marker, when the answer (not the prompt) opens the block.
    pub start: Vec<u32>,
    /// The closing marker.
    pub end: Vec<u32>,
    /// The prompt already opened the block.
    pub inside: bool,
}

/// A decoded image placed in the prompt: RGB8 pixels, row-major, 3 bytes a pixel. The engine
/// lays it out as the projector wants (LFM2-VL: `<|image_start|>`, tiles, thumbnail,
/// `<|image_end|>`) before prompt token `at`.
#[napi(object)]
pub struct ImageInput {
    /// Index in `promptTokens` the image goes before (`promptTokens.length` = at the end).
    pub at: u32,
    pub width: u32,
    pub height: u32,
    /// `width·height·3` bytes.
    pub rgb: Uint8Array,
}

/// One `logit_bias` entry.
#[napi(object)]
pub struct LogitBias {
    /// Token id (below the vocabulary size).
    pub id: u32,
    /// Added to the token's logit; finite.
    pub bias: f64,
}

/// What a grammar's `source` is.
#[napi(string_enum = "snake_case")]
pub enum GrammarKind {
    /// llguidance's Lark dialect: `%json { … }` embeds a JSON schema, `<|name|>` names a
    /// special token.
    Lark,
    /// A JSON schema (`{"type":"object"}` for OpenAI's `json_object`).
    JsonSchema,
}

/// A grammar the output must follow.
#[napi(object)]
pub struct Grammar {
    /// How `source` is written.
    pub kind: GrammarKind,
    /// The grammar (Lark) or the JSON schema as text; at most 128 KiB.
    pub source: String,
    /// Lazy grammar (for `tool_choice: auto`): generation is free until this token is sampled;
    /// then the grammar, whose first terminal is this token, constrains until it completes,
    /// and generation is free again. Without it, every token is constrained and the sequence
    /// ends (`stop`) when the grammar is complete.
    pub trigger_token: Option<u32>,
}

impl From<Grammar> for GrammarSpec {
    fn from(g: Grammar) -> Self {
        let kind = match g.kind {
            GrammarKind::Lark => CoreGrammarKind::Lark,
            GrammarKind::JsonSchema => CoreGrammarKind::JsonSchema,
        };
        Self { kind, source: g.source, trigger_token: g.trigger_token }
    }
}

impl From<GenerateOptions> for GenerateRequest {
    fn from(o: GenerateOptions) -> Self {
        let d = SamplingParams::default();
        let f = |v: Option<f64>, def: f32| v.map_or(def, |x| x as f32);
        Self {
            prompt: o.prompt_tokens,
            max_tokens: o.max_tokens.map(|m| m as usize),
            sampling: SamplingParams {
                temperature: f(o.temperature, d.temperature),
                top_k: o.top_k.map_or(d.top_k, |k| k as usize),
                top_p: f(o.top_p, d.top_p),
                min_p: f(o.min_p, d.min_p),
                repetition_penalty: f(o.repetition_penalty, d.repetition_penalty),
                repeat_last_n: o.repeat_last_n.map_or(d.repeat_last_n, |n| n as usize),
                presence_penalty: f(o.presence_penalty, d.presence_penalty),
                frequency_penalty: f(o.frequency_penalty, d.frequency_penalty),
                seed: o.seed.map(|s| s as i64 as u64),
                logit_bias: o.logit_bias.unwrap_or_default().iter().map(|b| (b.id, b.bias as f32)).collect(),
            },
            stop: o.stop.unwrap_or_default(),
            ignore_eos: o.ignore_eos.unwrap_or(false),
            top_logprobs: o.top_logprobs.map(|n| n as usize),
            marker_tokens: o.marker_tokens.unwrap_or_default(),
            grammar: o.grammar.map(GrammarSpec::from),
            reasoning_budget: o.reasoning_budget.map(|b| request::ReasoningBudget {
                tokens: b.tokens as usize,
                start: b.start,
                end: b.end,
                inside: b.inside,
            }),
            images: o
                .images
                .unwrap_or_default()
                .iter()
                .map(|i| request::PromptImage {
                    at: i.at as usize,
                    width: i.width as usize,
                    height: i.height as usize,
                    rgb: std::sync::Arc::from(&i.rgb[..]),
                })
                .collect(),
            embed: None,
            lora: o.lora.map(|l| l.iter().map(|x| (x.id as usize, x.scale as f32)).collect()),
            speculative: o.speculative.map(Into::into),
            hold_events: o.hold_events.unwrap_or(false),
        }
    }
}

#[napi(object)]
#[derive(Clone)]
pub struct Logprob {
    pub id: u32,
    pub logprob: f64,
}

#[napi(object)]
pub struct TokenLogprobs {
    pub id: u32,
    pub logprob: f64,
    pub top: Vec<Logprob>,
}

#[napi(object)]
pub struct Usage {
    pub prompt_tokens: u32,
    pub completion_tokens: u32,
    pub cached_tokens: u32,
}

#[napi(object)]
pub struct Timings {
    pub queue_ms: f64,
    pub prompt_ms: f64,
    pub decode_ms: f64,
}

/// Why a sequence ended.
#[napi(string_enum = "lowercase")]
pub enum FinishReason {
    Stop,
    Length,
    Cancelled,
}

impl From<request::FinishReason> for FinishReason {
    fn from(r: request::FinishReason) -> Self {
        match r {
            request::FinishReason::Stop => Self::Stop,
            request::FinishReason::Length => Self::Length,
            request::FinishReason::Cancelled => Self::Cancelled,
        }
    }
}

/// One event of a sequence, told apart by `type`.
#[napi(discriminant = "type", discriminant_case = "lowercase", object_from_js = false)]
pub enum SequenceEvent {
    /// Generated tokens and their text delta (stop strings and partial characters held back).
    Token { ids: Vec<u32>, text: String, logprobs: Option<Vec<TokenLogprobs>> },
    /// An embedding request's vectors (one pooled vector, one per token for `none`, or the
    /// classifier's scores for `rank`); `done` follows.
    Embedding { vectors: Vec<Float32Array> },
    /// The last event of a sequence that ended normally.
    /// `stop_sequence`: the stop string that ended it, when one did.
    Done { finish_reason: FinishReason, usage: Usage, timings: Timings, stop_sequence: Option<String> },
    /// The last event of a sequence that failed; `code` is the engine's stable error code.
    Error { code: String, message: String },
}

fn lp(t: &TokenLogprob) -> Logprob {
    Logprob { id: t.id, logprob: t.logprob as f64 }
}

impl From<Event> for SequenceEvent {
    fn from(e: Event) -> Self {
        match e {
            Event::Token(TokenEvent { ids, text, logprobs }) => Self::Token {
                ids,
                text,
                logprobs: (!logprobs.is_empty()).then(|| {
                    logprobs
                        .iter()
                        .map(|(c, top)| TokenLogprobs {
                            id: c.id,
                            logprob: c.logprob as f64,
                            top: top.iter().map(lp).collect(),
                        })
                        .collect()
                }),
            },
            Event::Done(DoneEvent { finish_reason, usage, timings, stop }) => Self::Done {
                stop_sequence: stop,
                finish_reason: finish_reason.into(),
                usage: Usage {
                    prompt_tokens: usage.prompt_tokens as u32,
                    completion_tokens: usage.completion_tokens as u32,
                    cached_tokens: usage.cached_tokens as u32,
                },
                timings: Timings {
                    queue_ms: timings.queue_ms,
                    prompt_ms: timings.prompt_ms,
                    decode_ms: timings.decode_ms,
                },
            },
            Event::Embedding(vectors) => {
                Self::Embedding { vectors: vectors.into_iter().map(Float32Array::new).collect() }
            }
            Event::Error(err) => Self::Error { code: err.code().into(), message: err.to_string() },
        }
    }
}

/// The binding's view of `MetricsSnapshot`, from the same list (`wick_core::with_metrics!`).
/// All f64: JS numbers hold counts exactly up to 2^53, where u32 would wrap at 2^32.
macro_rules! js_metrics {
    ($( $(#[doc = $doc:literal])* $name:ident, )*) => {
        /// Engine gauges and counters (wick_core::metrics).
        #[napi(object)]
        pub struct Metrics {
            $( $(#[doc = $doc])* pub $name: f64, )*
        }

        impl From<MetricsSnapshot> for Metrics {
            fn from(m: MetricsSnapshot) -> Self {
                Self { $( $name: m.$name as f64, )* }
            }
        }
    };
}

wick_core::with_metrics!(js_metrics);
