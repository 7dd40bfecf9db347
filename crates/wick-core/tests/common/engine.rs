//! Engines on the test models and fixtures, and running requests through them to the end.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use wick_core::request::{Event, FinishReason, GenerateRequest, SpecOptions};
use wick_core::sampling::SamplingParams;
use wick_core::{Engine, EngineOptions, WickError};

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// SmolLM2-135M-Instruct, or None after reporting `test` as skipped.
pub fn smollm2(test: &str, opts: impl FnOnce(&mut EngineOptions)) -> Option<Engine> {
    let dir = std::env::var_os("WICK_MODEL_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join(".cache/models"));
    let path = dir.join("SmolLM2-135M-Instruct.Q4_1.gguf");
    if !path.exists() {
        super::skip(test, &format!("{} is missing (python3 scripts/fetch_models.py)", path.display()));
        return None;
    }
    let mut o = EngineOptions::new(path);
    o.context_size = Some(1024);
    opts(&mut o);
    Some(Engine::load(o).expect("load SmolLM2"))
}

pub const TOOL_START: u32 = 259;
pub const TOOL_END: u32 = 260;

/// A tiny random llama whose vocabulary is the fixture byte vocab plus `<|tool_call_start|>`
/// and `<|tool_call_end|>` as control tokens (written once per run, no external files).
pub fn tools_fixture_path() -> &'static Path {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        use candle_core::quantized::gguf_file::Value as V;
        let mut vocab = wick_fixtures::byte_vocab();
        for (key, value) in vocab.iter_mut() {
            let V::Array(a) = value else { continue };
            match key.as_str() {
                "tokenizer.ggml.tokens" => {
                    a.extend(["<|tool_call_start|>", "<|tool_call_end|>"].map(|t| V::String(t.into())))
                }
                "tokenizer.ggml.scores" => a.extend([V::F32(0.0), V::F32(0.0)]),
                "tokenizer.ggml.token_type" => a.extend([V::I32(3), V::I32(3)]),
                _ => {}
            }
        }
        let mut spec = wick_fixtures::standard_specs()
            .into_iter()
            .find(|s| s.file_name == "tiny-llama-q8_0.gguf")
            .expect("tiny-llama spec");
        spec.file_name = "tiny-llama-tools-q8_0.gguf".into();
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("wick-grammar");
        std::fs::create_dir_all(&dir).expect("temp dir");
        let tmp = dir.join(format!("{}.{}", spec.file_name, std::process::id()));
        wick_fixtures::write_fixture(&spec, &vocab, &tmp).expect("write fixture");
        let path = dir.join(&spec.file_name);
        std::fs::rename(&tmp, &path).expect("rename fixture");
        path
    })
}

pub fn tools_fixture() -> Engine {
    let mut o = EngineOptions::new(tools_fixture_path());
    o.context_size = Some(1024);
    Engine::load(o).expect("load the tools fixture")
}

pub struct Output {
    pub ids: Vec<u32>,
    pub text: String,
    pub finish: FinishReason,
    pub cached_tokens: usize,
    /// An embedding request's vectors.
    pub vectors: Vec<Vec<f32>>,
}

pub fn collect(mut h: wick_core::engine::SequenceHandle) -> Result<Output, WickError> {
    fold(std::iter::from_fn(|| h.events.blocking_recv()))
}

/// A sequence's events, up to its last, as one output.
pub fn fold(events: impl IntoIterator<Item = Event>) -> Result<Output, WickError> {
    let mut out = Output {
        ids: vec![],
        text: String::new(),
        finish: FinishReason::Cancelled,
        cached_tokens: 0,
        vectors: vec![],
    };
    for ev in events {
        match ev {
            Event::Token(t) => {
                out.ids.extend(t.ids);
                out.text += &t.text;
            }
            Event::Embedding(v) => out.vectors = v,
            Event::Done(d) => {
                out.finish = d.finish_reason;
                out.cached_tokens = d.usage.cached_tokens;
                return Ok(out);
            }
            Event::Error(e) => return Err(e),
        }
    }
    panic!("the event stream ended without a done event")
}

pub fn run(engine: &Engine, req: GenerateRequest) -> Output {
    collect(engine.submit(req).expect("submit")).expect("generation")
}

/// Runs all requests in one schedule (submitted while the scheduler is paused).
pub fn run_together(engine: &Engine, reqs: Vec<GenerateRequest>) -> Vec<Output> {
    engine.pause().expect("pause");
    let handles: Vec<_> = reqs.into_iter().map(|r| engine.submit(r).expect("submit")).collect();
    engine.resume().expect("resume");
    handles.into_iter().map(|h| collect(h).expect("generation")).collect()
}

pub fn chat(engine: &Engine, user: &str) -> Vec<u32> {
    let text = format!("<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n");
    engine.tokenizer().encode(&text, false, true).expect("encode")
}

pub fn req(prompt: Vec<u32>, max_tokens: usize, sampling: SamplingParams) -> GenerateRequest {
    GenerateRequest { sampling, ..GenerateRequest::greedy(prompt, max_tokens) }
}

/// `req` with its speculative decoding settings (None: the engine's).
pub fn spec_req(
    prompt: &[u32],
    n: usize,
    sampling: SamplingParams,
    speculative: Option<SpecOptions>,
) -> GenerateRequest {
    GenerateRequest { speculative, ..req(prompt.to_vec(), n, sampling) }
}

pub fn sampled(seed: u64) -> SamplingParams {
    SamplingParams { temperature: 1.0, seed: Some(seed), ..SamplingParams::default() }
}

/// A synthetic fixture of `.cache/fixtures` (`WICK_FIXTURES`), or None after reporting `test`
/// as skipped.
pub fn cached_fixture(test: &str, name: &str, opts: impl FnOnce(&mut EngineOptions)) -> Option<Engine> {
    let dir = std::env::var_os("WICK_FIXTURES")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join(".cache/fixtures"));
    let path = dir.join(name);
    if !path.exists() {
        super::skip(test, &format!("{} is missing (npm run fixtures)", path.display()));
        return None;
    }
    let mut o = EngineOptions::new(path);
    o.context_size = Some(1024);
    opts(&mut o);
    Some(Engine::load(o).expect("load fixture"))
}

/// The standard fixture shapes (`wick_fixtures::standard_specs`) with the built-in byte vocab
/// (259 tokens), written once per test binary into `CARGO_TARGET_TMPDIR/<name>`: tests that
/// need no external files. Each file is written under a temporary name and renamed, so test
/// binaries running at once never read half a file.
pub fn standard_fixtures(name: &str) -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
        std::fs::create_dir_all(&dir).expect("temp dir");
        let vocab = wick_fixtures::byte_vocab();
        for spec in wick_fixtures::standard_specs() {
            let tmp = dir.join(format!("{}.{}", spec.file_name, std::process::id()));
            wick_fixtures::write_fixture(&spec, &vocab, &tmp).expect("write fixture");
            std::fs::rename(&tmp, dir.join(&spec.file_name)).expect("rename fixture");
        }
        dir
    })
}
