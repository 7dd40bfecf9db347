//! Tiny random-weight GGUF models for tests, written with candle's `gguf_file::write`.
//! Real tokenizers are copied from llama.cpp's vocab-only GGUFs (`models/ggml-vocab-*.gguf`
//! in the source bundle of the node-llama-cpp npm package, unpacked by
//! `scripts/llama-src.sh`), so llama.cpp loads the same files and serves as the reference.
//!
//! Block weights are seeded N(0, 0.5) and norms 1 + N(0, 0.1) (MODELS.md). The embedding and
//! output are N(0, 8/sqrt(d)) — N(0, 1) at d=64 — so logits have a standard deviation near 8
//! at every width: top-1 margins are clear (greedy comparisons do not hinge on ties) without
//! collapsing to p = 1 at d=256. Such random layers amplify perturbations strongly, so the
//! greedy comparison with llama.cpp only holds because Wick's CPU kernels round exactly as
//! llama.cpp's do (models/ggml_matmul.rs, models/cpu_attention.rs).
//! The f32 values depend only on the shapes and seed, so the Q8_0, Q4_0 and F16 files of one
//! architecture hold the same model at different precisions.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use candle_core::quantized::{gguf_file, GgmlDType, QTensor};
use candle_core::{Device, Tensor};

use crate::error::{Result, WickError};
use crate::gguf::{GgufFile, MetaValue};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FixtureArch {
    Llama,
    Lfm2,
    Qwen2,
    Qwen3,
    Gemma3,
    Lfm2Moe,
}

impl FixtureArch {
    pub fn name(self) -> &'static str {
        match self {
            FixtureArch::Llama => "llama",
            FixtureArch::Lfm2 => "lfm2",
            FixtureArch::Qwen2 => "qwen2",
            FixtureArch::Qwen3 => "qwen3",
            FixtureArch::Gemma3 => "gemma3",
            FixtureArch::Lfm2Moe => "lfm2moe",
        }
    }
}

/// LFM2-MoE routing shape of a fixture.
#[derive(Clone, Copy, Debug)]
pub struct MoeSpec {
    pub n_expert: usize,
    pub n_used: usize,
    pub ff_exp: usize,
    /// `leading_dense_block_count`; `None` leaves the key out (llama.cpp then reads 0).
    pub dense_lead: Option<usize>,
}

/// One fixture file: architecture, shapes, weight type and tokenizer source.
#[derive(Clone, Debug)]
pub struct FixtureSpec {
    pub file_name: String,
    pub arch: FixtureArch,
    pub dtype: GgmlDType,
    pub d: usize,
    pub n_head: usize,
    /// Per layer; 0 marks an LFM2 short-conv layer.
    pub n_kv: Vec<usize>,
    pub ff: usize,
    /// Vocab-only GGUF in llama.cpp's `models/` whose `tokenizer.*` keys are copied.
    pub vocab_file: &'static str,
    /// LFM2 final norm name: `token_embd_norm.weight` (llama.cpp) or `output_norm.weight`.
    pub final_norm: &'static str,
    pub seed: u64,
    /// σ of the block weights; the embedding and output use N(0, 8/sqrt(d)).
    pub sigma: f32,
    pub moe: Option<MoeSpec>,
}

const LFM2_KV: [usize; 6] = [0, 0, 2, 0, 2, 0];
const L_CACHE: usize = 3;

/// The standard set: llama and lfm2, each in Q8_0, Q4_0, F16 and Q4_K (K-quants need rows
/// that are multiples of 256, so those use d=256, ff=512), plus an lfm2 whose final norm is
/// named `output_norm.weight`.
pub fn standard_specs() -> Vec<FixtureSpec> {
    let mut out = vec![];
    for (arch, name, vocab) in [
        (FixtureArch::Llama, "llama", "ggml-vocab-llama-spm.gguf"),
        (FixtureArch::Lfm2, "lfm2", "ggml-vocab-llama-bpe.gguf"),
    ] {
        let n_kv = match arch {
            FixtureArch::Llama => vec![2, 2],
            _ => LFM2_KV.to_vec(),
        };
        for (dtype, tag) in [
            (GgmlDType::Q8_0, "q8_0"),
            (GgmlDType::Q4_0, "q4_0"),
            (GgmlDType::F16, "f16"),
            (GgmlDType::Q4K, "q4_k"),
        ] {
            let k_quant = dtype == GgmlDType::Q4K;
            out.push(FixtureSpec {
                file_name: format!("tiny-{name}-{tag}.gguf"),
                arch,
                dtype,
                d: if k_quant { 256 } else { 64 },
                n_head: 4,
                n_kv: n_kv.clone(),
                ff: if k_quant { 512 } else { 128 },
                vocab_file: vocab,
                final_norm: "token_embd_norm.weight",
                seed: if k_quant { 20 } else { 10 } + arch as u64,
                sigma: 0.5,
                moe: None,
            });
        }
    }
    let mut outnorm = out
        .iter()
        .find(|s| s.file_name == "tiny-lfm2-q8_0.gguf")
        .cloned();
    if let Some(s) = outnorm.as_mut() {
        s.file_name = "tiny-lfm2-outnorm-q8_0.gguf".into();
        s.final_norm = "output_norm.weight";
        out.push(s.clone());
    }
    out.extend(extra_arch_specs());
    out
}

/// qwen2, qwen3, gemma3 (6 layers: five sliding-window, one global) and lfm2moe (4 experts
/// without `leading_dense_block_count`, 8 experts with 2 leading dense layers, the latter
/// also with its final norm named `output_norm.weight`), all Q8_0 at d=64.
pub fn extra_arch_specs() -> Vec<FixtureSpec> {
    let base = |name: &str, arch, n_kv: Vec<usize>, vocab, seed| FixtureSpec {
        file_name: format!("tiny-{name}-q8_0.gguf"),
        arch,
        dtype: GgmlDType::Q8_0,
        d: 64,
        n_head: 4,
        n_kv,
        ff: 128,
        vocab_file: vocab,
        final_norm: "token_embd_norm.weight",
        seed,
        sigma: 0.5,
        moe: None,
    };
    let moe = |n_expert, dense_lead| {
        Some(MoeSpec {
            n_expert,
            n_used: 2,
            ff_exp: 64,
            dense_lead,
        })
    };
    let mut e4 = base(
        "lfm2moe-e4",
        FixtureArch::Lfm2Moe,
        LFM2_KV.to_vec(),
        "ggml-vocab-llama-bpe.gguf",
        40,
    );
    e4.moe = moe(4, None);
    let mut e8 = base(
        "lfm2moe-e8-lead2",
        FixtureArch::Lfm2Moe,
        LFM2_KV.to_vec(),
        "ggml-vocab-llama-bpe.gguf",
        41,
    );
    e8.moe = moe(8, Some(2));
    let mut e8_out = e8.clone();
    e8_out.file_name = "tiny-lfm2moe-e8-lead2-outnorm-q8_0.gguf".into();
    e8_out.final_norm = "output_norm.weight";
    vec![
        base(
            "qwen2",
            FixtureArch::Qwen2,
            vec![2, 2],
            "ggml-vocab-qwen2.gguf",
            30,
        ),
        base(
            "qwen3",
            FixtureArch::Qwen3,
            vec![2, 2],
            "ggml-vocab-qwen2.gguf",
            31,
        ),
        base(
            "gemma3",
            FixtureArch::Gemma3,
            vec![2; 6],
            "ggml-vocab-llama-spm.gguf",
            32,
        ),
        e4,
        e8,
        e8_out,
    ]
}

/// `<repo>/.cache/llama.cpp`, where `scripts/llama-src.sh` unpacks the llama.cpp source.
pub fn default_llama_src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.cache/llama.cpp")
}

/// Writes every standard fixture into `out_dir`; returns the paths written.
pub fn write_standard(out_dir: &Path, llama_src: &Path) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(out_dir).map_err(io_err)?;
    let mut vocabs: HashMap<&str, Vec<(String, gguf_file::Value)>> = HashMap::new();
    let mut written = vec![];
    for spec in standard_specs() {
        if !vocabs.contains_key(spec.vocab_file) {
            let vocab = GgufFile::open(llama_src.join("models").join(spec.vocab_file))?;
            vocabs.insert(spec.vocab_file, tokenizer_metadata(&vocab));
        }
        let path = out_dir.join(&spec.file_name);
        write_fixture(&spec, &vocabs[spec.vocab_file], &path)?;
        written.push(path);
    }
    Ok(written)
}

/// The `tokenizer.*` keys of a GGUF, converted for candle's writer.
pub fn tokenizer_metadata(vocab: &GgufFile) -> Vec<(String, gguf_file::Value)> {
    vocab
        .metadata
        .entries
        .iter()
        .filter(|(k, _)| k.starts_with("tokenizer."))
        .map(|(k, v)| (k.clone(), to_gguf_value(v)))
        .collect()
}

fn to_gguf_value(v: &MetaValue) -> gguf_file::Value {
    use gguf_file::Value as V;
    match v {
        MetaValue::U8(x) => V::U8(*x),
        MetaValue::I8(x) => V::I8(*x),
        MetaValue::U16(x) => V::U16(*x),
        MetaValue::I16(x) => V::I16(*x),
        MetaValue::U32(x) => V::U32(*x),
        MetaValue::I32(x) => V::I32(*x),
        MetaValue::U64(x) => V::U64(*x),
        MetaValue::I64(x) => V::I64(*x),
        MetaValue::F32(x) => V::F32(*x),
        MetaValue::F64(x) => V::F64(*x),
        MetaValue::Bool(x) => V::Bool(*x),
        MetaValue::String(x) => V::String(x.clone()),
        MetaValue::Array(a) => V::Array(a.iter().map(to_gguf_value).collect()),
    }
}

/// Seeded N(0, 1) samples: SplitMix64 + Box–Muller, so fixtures do not change with the
/// version of any RNG crate.
pub struct Gaussian {
    state: u64,
    spare: Option<f32>,
}

impl Gaussian {
    pub fn new(seed: u64) -> Self {
        Self {
            state: seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xD1B5_4A32_D192_ED03,
            spare: None,
        }
    }
    fn uniform(&mut self) -> f64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        ((z >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }
    pub fn sample(&mut self) -> f32 {
        if let Some(s) = self.spare.take() {
            return s;
        }
        let (u1, u2) = (self.uniform(), self.uniform());
        let r = (-2.0 * u1.ln()).sqrt();
        let t = 2.0 * std::f64::consts::PI * u2;
        self.spare = Some((r * t.sin()) as f32);
        (r * t.cos()) as f32
    }
    /// A `[rows, cols]` (candle order) tensor of `mean + sigma * N(0,1)`.
    pub fn tensor(&mut self, shape: &[usize], mean: f32, sigma: f32) -> Result<Tensor> {
        let n: usize = shape.iter().product();
        let v: Vec<f32> = (0..n).map(|_| mean + sigma * self.sample()).collect();
        Ok(Tensor::from_vec(v, shape, &Device::Cpu)?)
    }
}

/// Named tensors in candle shape order, generated in a fixed order.
struct TensorSet {
    rng: Gaussian,
    dtype: GgmlDType,
    out: Vec<(String, QTensor)>,
}

impl TensorSet {
    fn matrix(&mut self, name: &str, rows: usize, cols: usize, sigma: f32) -> Result<()> {
        let t = self.rng.tensor(&[rows, cols], 0.0, sigma)?;
        self.out
            .push((name.to_string(), QTensor::quantize(&t, self.dtype)?));
        Ok(())
    }
    /// Experts stacked as `[n_expert, rows, cols]` (ggml `{cols, rows, n_expert}`).
    fn stacked(&mut self, name: &str, shape: &[usize], sigma: f32) -> Result<()> {
        let t = self.rng.tensor(shape, 0.0, sigma)?;
        self.out
            .push((name.to_string(), QTensor::quantize(&t, self.dtype)?));
        Ok(())
    }
    fn f32(&mut self, name: &str, shape: &[usize], mean: f32, sigma: f32) -> Result<()> {
        let t = self.rng.tensor(shape, mean, sigma)?;
        self.out
            .push((name.to_string(), QTensor::quantize(&t, GgmlDType::F32)?));
        Ok(())
    }
}

/// Writes one fixture with the given tokenizer keys to `path` (via a temporary file and a
/// rename, so a concurrent reader never sees a half-written model).
pub fn write_fixture(
    spec: &FixtureSpec,
    vocab: &[(String, gguf_file::Value)],
    path: &Path,
) -> Result<()> {
    let (meta, tensors) = build_fixture(spec, vocab)?;
    write_gguf(path, &meta, &refs(&tensors))
}

type Meta = Vec<(String, gguf_file::Value)>;

fn refs(tensors: &[(String, QTensor)]) -> Vec<(&str, &QTensor)> {
    tensors.iter().map(|(k, t)| (k.as_str(), t)).collect()
}

/// The metadata and tensors of a fixture, before writing.
pub fn build_fixture(
    spec: &FixtureSpec,
    vocab: &[(String, gguf_file::Value)],
) -> Result<(Meta, Vec<(String, QTensor)>)> {
    use gguf_file::Value as V;
    let n_vocab = match vocab.iter().find(|(k, _)| k == "tokenizer.ggml.tokens") {
        Some((_, V::Array(a))) => a.len(),
        _ => {
            return Err(WickError::Internal(
                "vocab has no tokenizer.ggml.tokens array".into(),
            ))
        }
    };
    let (d, ff, n_head) = (spec.d, spec.ff, spec.n_head);
    let hd = d / n_head;
    let n_layer = spec.n_kv.len();
    let arch = spec.arch.name();
    let k = |s: &str| format!("{arch}.{s}");
    let mut meta: Vec<(String, V)> = vec![
        ("general.architecture".into(), V::String(arch.into())),
        (
            "general.name".into(),
            V::String(spec.file_name.trim_end_matches(".gguf").into()),
        ),
        (k("context_length"), V::U32(4096)),
        (k("embedding_length"), V::U32(d as u32)),
        (k("block_count"), V::U32(n_layer as u32)),
        (k("feed_forward_length"), V::U32(ff as u32)),
        (k("attention.head_count"), V::U32(n_head as u32)),
        (k("attention.layer_norm_rms_epsilon"), V::F32(1e-5)),
        (k("vocab_size"), V::U32(n_vocab as u32)),
    ];
    match spec.arch {
        FixtureArch::Llama | FixtureArch::Qwen2 | FixtureArch::Qwen3 | FixtureArch::Gemma3 => meta
            .extend([
                (
                    k("attention.head_count_kv"),
                    V::U32(spec.n_kv.first().copied().unwrap_or(n_head) as u32),
                ),
                (k("rope.dimension_count"), V::U32(hd as u32)),
                (
                    k("rope.freq_base"),
                    V::F32(if spec.arch == FixtureArch::Llama {
                        10000.0
                    } else {
                        1_000_000.0
                    }),
                ),
            ]),
        FixtureArch::Lfm2 | FixtureArch::Lfm2Moe => meta.extend([
            (
                k("attention.head_count_kv"),
                V::Array(spec.n_kv.iter().map(|&n| V::I32(n as i32)).collect()),
            ),
            (k("rope.freq_base"), V::F32(1_000_000.0)),
            (k("shortconv.l_cache"), V::U32(L_CACHE as u32)),
        ]),
    }
    if spec.arch == FixtureArch::Gemma3 {
        meta.push((k("attention.key_length"), V::U32(hd as u32)));
        meta.push((k("attention.value_length"), V::U32(hd as u32)));
        // Longer than any test sequence: the sliding-window mask is not exercised.
        meta.push((k("attention.sliding_window"), V::U32(4096)));
    }
    if let Some(m) = spec.moe {
        meta.extend([
            (k("expert_count"), V::U32(m.n_expert as u32)),
            (k("expert_used_count"), V::U32(m.n_used as u32)),
            (k("expert_feed_forward_length"), V::U32(m.ff_exp as u32)),
            (k("expert_gating_func"), V::U32(2)),
        ]);
        if let Some(n) = m.dense_lead {
            meta.push((k("leading_dense_block_count"), V::U32(n as u32)));
        }
    }
    meta.extend(vocab.iter().cloned());

    let g = spec.sigma;
    let out_sigma = 8.0 / (d as f32).sqrt();
    let mut ts = TensorSet {
        rng: Gaussian::new(spec.seed),
        dtype: spec.dtype,
        out: vec![],
    };
    // Gemma 3 multiplies embeddings by √d: keep them near N(0, 1) after that, like the
    // post-normed block outputs, or the residual stream is the input token and little else.
    let embd_sigma = if spec.arch == FixtureArch::Gemma3 {
        1.0 / (d as f32).sqrt()
    } else {
        out_sigma
    };
    ts.matrix("token_embd.weight", n_vocab, d, embd_sigma)?;
    for (il, &n_kv) in spec.n_kv.iter().enumerate() {
        let p = format!("blk.{il}");
        ts.f32(&format!("{p}.attn_norm.weight"), &[d], 1.0, 0.1)?;
        if n_kv == 0 {
            ts.f32(&format!("{p}.shortconv.conv.weight"), &[d, L_CACHE], 0.0, g)?;
            ts.matrix(&format!("{p}.shortconv.in_proj.weight"), 3 * d, d, g)?;
            ts.matrix(&format!("{p}.shortconv.out_proj.weight"), d, d, g)?;
        } else {
            ts.matrix(&format!("{p}.attn_q.weight"), d, d, g)?;
            ts.matrix(&format!("{p}.attn_k.weight"), n_kv * hd, d, g)?;
            ts.matrix(&format!("{p}.attn_v.weight"), n_kv * hd, d, g)?;
            ts.matrix(&format!("{p}.attn_output.weight"), d, d, g)?;
            if spec.arch == FixtureArch::Qwen2 {
                for (t, n) in [("q", d), ("k", n_kv * hd), ("v", n_kv * hd)] {
                    ts.f32(&format!("{p}.attn_{t}.bias"), &[n], 0.0, g)?;
                }
            }
            if !matches!(spec.arch, FixtureArch::Llama | FixtureArch::Qwen2) {
                ts.f32(&format!("{p}.attn_q_norm.weight"), &[hd], 1.0, 0.1)?;
                ts.f32(&format!("{p}.attn_k_norm.weight"), &[hd], 1.0, 0.1)?;
            }
        }
        if spec.arch == FixtureArch::Gemma3 {
            ts.f32(&format!("{p}.post_attention_norm.weight"), &[d], 1.0, 0.1)?;
        }
        ts.f32(&format!("{p}.ffn_norm.weight"), &[d], 1.0, 0.1)?;
        match spec.moe {
            Some(m) if il >= m.dense_lead.unwrap_or(0) => {
                let (e, fe) = (m.n_expert, m.ff_exp);
                // The router stays f32, as llama-quantize leaves it.
                ts.f32(
                    &format!("{p}.ffn_gate_inp.weight"),
                    &[e, d],
                    0.0,
                    1.0 / (d as f32).sqrt(),
                )?;
                ts.f32(&format!("{p}.exp_probs_b.bias"), &[e], 0.0, 0.1)?;
                ts.stacked(&format!("{p}.ffn_gate_exps.weight"), &[e, fe, d], g)?;
                ts.stacked(&format!("{p}.ffn_up_exps.weight"), &[e, fe, d], g)?;
                ts.stacked(&format!("{p}.ffn_down_exps.weight"), &[e, d, fe], g)?;
            }
            _ => {
                ts.matrix(&format!("{p}.ffn_gate.weight"), ff, d, g)?;
                ts.matrix(&format!("{p}.ffn_up.weight"), ff, d, g)?;
                ts.matrix(&format!("{p}.ffn_down.weight"), d, ff, g)?;
            }
        }
        if spec.arch == FixtureArch::Gemma3 {
            ts.f32(&format!("{p}.post_ffw_norm.weight"), &[d], 1.0, 0.1)?;
        }
    }
    match spec.arch {
        FixtureArch::Llama => {
            ts.f32("output_norm.weight", &[d], 1.0, 0.1)?;
            ts.matrix("output.weight", n_vocab, d, out_sigma)?;
        }
        FixtureArch::Lfm2 | FixtureArch::Lfm2Moe => ts.f32(spec.final_norm, &[d], 1.0, 0.1)?,
        FixtureArch::Gemma3 => {
            ts.f32("output_norm.weight", &[d], 1.0, 0.1)?;
            ts.matrix("output.weight", n_vocab, d, out_sigma)?;
        }
        // Tied heads.
        FixtureArch::Qwen2 | FixtureArch::Qwen3 => ts.f32("output_norm.weight", &[d], 1.0, 0.1)?,
    }
    Ok((meta, ts.out))
}

/// Writes a GGUF atomically (temporary file in the same directory, then rename).
pub fn write_gguf(
    path: &Path,
    meta: &[(String, gguf_file::Value)],
    tensors: &[(&str, &QTensor)],
) -> Result<()> {
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let result = (|| {
        let mut w = BufWriter::new(File::create(&tmp).map_err(io_err)?);
        write_gguf_to(&mut w, meta, tensors)?;
        w.flush().map_err(io_err)?;
        drop(w);
        std::fs::rename(&tmp, path).map_err(io_err)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

fn io_err(e: std::io::Error) -> WickError {
    WickError::Internal(format!("writing fixture: {e}"))
}

fn write_gguf_to<W: std::io::Write + std::io::Seek>(
    w: &mut W,
    meta: &[(String, gguf_file::Value)],
    tensors: &[(&str, &QTensor)],
) -> Result<()> {
    let meta: Vec<(&str, &gguf_file::Value)> = meta.iter().map(|(k, v)| (k.as_str(), v)).collect();
    Ok(gguf_file::write(w, &meta, tensors)?)
}

/// A minimal SentencePiece-style vocab (`<unk>`, `<s>`, `</s>` and the 256 byte tokens) so
/// a loadable model can be written without llama.cpp's vocab files.
pub fn byte_vocab() -> Meta {
    use gguf_file::Value as V;
    let mut tokens: Vec<V> = ["<unk>", "<s>", "</s>"]
        .iter()
        .map(|t| V::String(t.to_string()))
        .collect();
    tokens.extend((0..256).map(|b| V::String(format!("<0x{b:02X}>"))));
    let n = tokens.len();
    // unknown, control, control, then bytes (llama.cpp token types 2, 3, 6).
    let types = (0..n)
        .map(|i| V::I32([2, 3, 3].get(i).copied().unwrap_or(6)))
        .collect();
    vec![
        ("tokenizer.ggml.model".into(), V::String("llama".into())),
        ("tokenizer.ggml.tokens".into(), V::Array(tokens)),
        (
            "tokenizer.ggml.scores".into(),
            V::Array(vec![V::F32(0.0); n]),
        ),
        ("tokenizer.ggml.token_type".into(), V::Array(types)),
        ("tokenizer.ggml.bos_token_id".into(), V::U32(1)),
        ("tokenizer.ggml.eos_token_id".into(), V::U32(2)),
        ("tokenizer.ggml.unknown_token_id".into(), V::U32(0)),
        ("tokenizer.ggml.add_bos_token".into(), V::Bool(true)),
    ]
}

/// A deliberately broken model file and how loading it must fail.
#[derive(Debug, Clone)]
pub struct BadFile {
    pub path: PathBuf,
    /// Text the load error must contain.
    pub expect: &'static str,
    /// Fails in `GgufFile::open` already (else only in `models::load`).
    pub fails_at_open: bool,
}

/// Writes broken models (truncated, wrong magic, missing tensor, unknown architecture, tensor
/// data past the end) into `out_dir`, each derived from a small valid llama.
pub fn write_bad_files(out_dir: &Path) -> Result<Vec<BadFile>> {
    use gguf_file::Value as V;
    std::fs::create_dir_all(out_dir).map_err(io_err)?;
    let spec = FixtureSpec {
        file_name: "bad-base.gguf".into(),
        arch: FixtureArch::Llama,
        dtype: GgmlDType::Q8_0,
        d: 64,
        n_head: 4,
        n_kv: vec![2, 2],
        ff: 128,
        vocab_file: "",
        final_norm: "",
        seed: 7,
        sigma: 0.5,
        moe: None,
    };
    let (meta, tensors) = build_fixture(&spec, &byte_vocab())?;
    let mut valid = std::io::Cursor::new(Vec::new());
    let tensors = refs(&tensors);
    write_gguf_to(&mut valid, &meta, &tensors)?;
    let valid = valid.into_inner();
    let mut out = vec![];
    let mut raw = |name: &str, bytes: &[u8], expect: &'static str| -> Result<()> {
        let path = out_dir.join(name);
        std::fs::write(&path, bytes).map_err(io_err)?;
        out.push(BadFile {
            path,
            expect,
            fails_at_open: true,
        });
        Ok(())
    };
    raw(
        "bad-truncated.gguf",
        &valid[..valid.len() * 6 / 10],
        "past the end of the file",
    )?;
    raw(
        "bad-truncated-header.gguf",
        &valid[..40],
        "corrupt GGUF file",
    )?;
    let mut magic = valid.clone();
    magic[..4].copy_from_slice(b"GGML");
    raw("bad-magic.gguf", &magic, "not a GGUF file")?;
    raw(
        "bad-offset-past-eof.gguf",
        &offset_past_eof(),
        "past the end of the file",
    )?;

    let missing: Vec<_> = tensors
        .iter()
        .filter(|(n, _)| *n != "blk.1.ffn_down.weight")
        .copied()
        .collect();
    let path = out_dir.join("bad-missing-tensor.gguf");
    write_gguf(&path, &meta, &missing)?;
    out.push(BadFile {
        path,
        expect: "missing tensor `blk.1.ffn_down.weight`",
        fails_at_open: false,
    });

    let mut unknown = meta.clone();
    unknown[0].1 = V::String("wickmamba".into());
    let path = out_dir.join("bad-unknown-arch.gguf");
    write_gguf(&path, &unknown, &tensors)?;
    out.push(BadFile {
        path,
        expect: "wickmamba",
        fails_at_open: false,
    });
    Ok(out)
}

/// A hand-built GGUF v3 whose only tensor claims data 1 MiB past the start of a 2 KiB
/// data section.
fn offset_past_eof() -> Vec<u8> {
    let mut b = Vec::new();
    let s = |b: &mut Vec<u8>, x: &str| {
        b.extend((x.len() as u64).to_le_bytes());
        b.extend(x.as_bytes());
    };
    b.extend(b"GGUF");
    b.extend(3u32.to_le_bytes());
    b.extend(1u64.to_le_bytes()); // tensors
    b.extend(1u64.to_le_bytes()); // metadata entries
    s(&mut b, "general.architecture");
    b.extend(8u32.to_le_bytes());
    s(&mut b, "llama");
    s(&mut b, "token_embd.weight");
    b.extend(2u32.to_le_bytes());
    b.extend(64u64.to_le_bytes());
    b.extend(8u64.to_le_bytes());
    b.extend(0u32.to_le_bytes()); // F32
    b.extend((1u64 << 20).to_le_bytes());
    b.resize(b.len().div_ceil(32) * 32 + 64 * 8 * 4, 0);
    b
}
