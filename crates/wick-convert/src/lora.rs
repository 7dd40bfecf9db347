//! PEFT LoRA adapters (`adapter_config.json` + `adapter_model.safetensors`) → llama.cpp's GGUF
//! adapter, as `convert_lora_to_gguf.py` writes it: `general.type = adapter`,
//! `adapter.type = lora`, `adapter.lora.alpha`, and per adapted base weight `W` the pair
//! `W.lora_a` (ggml `{n_in, r}`: PEFT's `lora_A.weight`, `[r, n_in]`) and `W.lora_b` (ggml
//! `{r, n_out}`: `lora_B.weight`, `[n_out, r]`). Names go through the model converter's
//! HF → GGUF table (`arch::names`); llama's q/k rows are permuted in B as in the base weight.
//!
//! The base model gives the architecture and the shapes every pair is checked against: a
//! converted GGUF or a Hugging Face directory, from `base` or else from the adapter's
//! `base_model_name_or_path` when that is a local path (absolute, or relative to the adapter
//! directory). Types: F32 (the default of llama.cpp's script), F16, BF16, or Q8_0 where rows
//! fit (lora_b's rows are r long: with r not a multiple of 32 they fall back to F16, as the
//! script does).

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use serde_json::Value as Json;

use crate::arch::{names, params, Arch};
use crate::config::{read_json, HfConfig};
use crate::error::{ConvertError, Result};
use crate::gguf::{self, TensorEntry, Value};
use crate::output::{Progress, Report};
use crate::quant::mix::OutType;
use crate::quant::GgmlType;
use crate::rows::permuted_row;
use crate::safetensors::{Checkpoint, Dtype};

pub const ADAPTER_CONFIG: &str = "adapter_config.json";
pub const ADAPTER_WEIGHTS: &str = "adapter_model.safetensors";

/// Whether `dir` holds a PEFT adapter (has `adapter_config.json`).
pub fn is_peft_dir(dir: &Path) -> bool {
    dir.join(ADAPTER_CONFIG).is_file()
}

pub struct LoraOptions {
    /// The PEFT adapter directory.
    pub input: PathBuf,
    pub outfile: PathBuf,
    /// The base model: a GGUF file or a Hugging Face directory (default: the adapter's
    /// `base_model_name_or_path`, if it is a local path).
    pub base: Option<PathBuf>,
    /// f32, f16, bf16 or q8_0.
    pub outtype: OutType,
    pub cancel: Option<std::sync::Arc<AtomicBool>>,
}

/// What the base model tells the converter: architecture, heads (for llama's permutation)
/// and each weight's ggml dims by GGUF name.
#[derive(Debug)]
pub struct BaseModel {
    pub arch: Arch,
    hf_arch: String,
    n_head: usize,
    n_kv: Vec<usize>,
    pub tensors: BTreeMap<String, Vec<usize>>,
}

impl BaseModel {
    /// Reads a GGUF file's header or a Hugging Face directory's config and tensor shapes.
    pub fn open(path: &Path) -> Result<Self> {
        if path.is_dir() {
            Self::from_hf(path)
        } else if path.is_file() {
            Self::from_gguf(path)
        } else {
            Err(ConvertError::Missing {
                path: path.to_path_buf(),
                what: "the base model (GGUF or HF directory)",
            })
        }
    }

    fn from_hf(dir: &Path) -> Result<Self> {
        let cfg = HfConfig::open(dir)?;
        let hf_arch = cfg.hf_arch()?.to_string();
        let arch = Arch::from_hf(&hf_arch)?;
        let hp = params::hparams(arch, &cfg, 0)?;
        let ck = Checkpoint::open(dir)?;
        let mut tensors = BTreeMap::new();
        for (name, t) in &ck.tensors {
            if names::skipped(name) {
                continue;
            }
            if let Some(g) = names::gguf_name(arch, &names::canonical(arch, &hf_arch, name)) {
                tensors.insert(g, t.shape.iter().rev().copied().collect());
            }
        }
        Ok(Self { arch, hf_arch, n_head: hp.dims.n_head, n_kv: hp.dims.n_kv, tensors })
    }

    fn from_gguf(path: &Path) -> Result<Self> {
        let h = read_gguf_header(path)?;
        let s = |k: &str| match h.kv.get(k) {
            Some(GgufVal::Str(s)) => Some(s.clone()),
            _ => None,
        };
        let bad = |why: String| ConvertError::InvalidArgument(format!("base {}: {why}", path.display()));
        let arch_name = s("general.architecture").ok_or_else(|| bad("no general.architecture".into()))?;
        if s("general.type").as_deref() == Some("adapter") {
            return Err(bad("is an adapter, not a model".into()));
        }
        let arch = [Arch::Llama, Arch::Qwen2, Arch::Qwen3, Arch::Gemma3, Arch::Lfm2, Arch::Lfm2Moe]
            .into_iter()
            .find(|a| a.name() == arch_name)
            .ok_or(ConvertError::UnknownArchitecture(arch_name.clone()))?;
        let n_layer = h.kv.get(&format!("{arch_name}.block_count")).and_then(GgufVal::int).unwrap_or(0);
        let n_head =
            h.kv.get(&format!("{arch_name}.attention.head_count")).and_then(GgufVal::int).unwrap_or(0);
        let n_kv = match h.kv.get(&format!("{arch_name}.attention.head_count_kv")) {
            Some(GgufVal::Ints(v)) => v.clone(),
            Some(v) => vec![v.int().unwrap_or(n_head); n_layer.max(1)],
            None => vec![n_head; n_layer.max(1)],
        };
        Ok(Self { arch, hf_arch: String::new(), n_head, n_kv, tensors: h.tensors })
    }
}

/// The adapter directory's config, as far as the conversion needs it.
struct PeftConfig {
    rank: Option<usize>,
    alpha: f32,
    base: Option<String>,
}

fn peft_config(dir: &Path) -> Result<PeftConfig> {
    let path = dir.join(ADAPTER_CONFIG);
    if !path.is_file() {
        return Err(ConvertError::Missing { path, what: "the PEFT adapter config" });
    }
    let j = read_json(&path)?;
    let bad = |why: String| ConvertError::Json { path: path.clone(), why };
    let peft_type = j.get("peft_type").and_then(Json::as_str).unwrap_or("LORA");
    if peft_type != "LORA" {
        return Err(bad(format!("peft_type `{peft_type}`: only LORA adapters convert")));
    }
    for flag in ["use_dora", "fan_in_fan_out"] {
        if j.get(flag).and_then(Json::as_bool) == Some(true) {
            return Err(bad(format!(
                "`{flag}: true` is not supported (llama.cpp's adapters cannot express it)"
            )));
        }
    }
    if j.get("alpha_pattern").and_then(Json::as_object).is_some_and(|m| !m.is_empty()) {
        return Err(bad("a per-module `alpha_pattern` is not supported (one adapter.lora.alpha)".into()));
    }
    let per_module_rank = j.get("rank_pattern").and_then(Json::as_object).is_some_and(|m| !m.is_empty());
    let rank = if per_module_rank { None } else { j.get("r").and_then(Json::as_u64).map(|r| r as usize) };
    if rank.is_none() && !per_module_rank {
        return Err(bad("no rank `r`".into()));
    }
    let mut alpha =
        j.get("lora_alpha").and_then(Json::as_f64).ok_or_else(|| bad("no `lora_alpha`".into()))? as f32;
    if j.get("use_rslora").and_then(Json::as_bool) == Some(true) {
        // rsLoRA scales by alpha/√r; llama.cpp by alpha/r: write alpha·√r.
        let r = rank.ok_or_else(|| bad("use_rslora with a rank_pattern is not supported".into()))?;
        alpha *= (r as f32).sqrt();
    }
    let base = j.get("base_model_name_or_path").and_then(Json::as_str).map(str::to_string);
    Ok(PeftConfig { rank, alpha, base })
}

/// The base model to check against: `explicit`, else `base_model_name_or_path` if it names a
/// local GGUF or directory (relative to the adapter directory, then to the working directory).
fn resolve_base(dir: &Path, explicit: Option<&Path>, named: Option<&str>) -> Result<PathBuf> {
    if let Some(p) = explicit {
        return Ok(p.to_path_buf());
    }
    let Some(named) = named.filter(|n| !n.is_empty()) else {
        return Err(ConvertError::InvalidArgument(format!(
            "{}: no base model: adapter_config.json has no base_model_name_or_path; pass --base <model.gguf or HF directory>",
            dir.display()
        )));
    };
    for p in [dir.join(named), PathBuf::from(named)] {
        if p.is_file() || p.join("config.json").is_file() {
            return Ok(p);
        }
    }
    Err(ConvertError::InvalidArgument(format!(
        "{}: base model `{named}` (adapter_config.json's base_model_name_or_path) is not a local GGUF or model directory; pass --base <model.gguf or HF directory>",
        dir.display()
    )))
}

/// One adapted weight.
struct Pair {
    gguf: String,
    a: String,
    b: String,
    /// Rows of B reordered as llama's q/k (heads).
    permute: Option<usize>,
}

/// Converts a PEFT adapter directory into a GGUF adapter.
pub fn convert_lora(opts: &LoraOptions, mut progress: impl FnMut(&Progress)) -> Result<Report> {
    let start = Instant::now();
    let dir = &opts.input;
    if !dir.is_dir() {
        return Err(ConvertError::Missing { path: dir.clone(), what: "the adapter directory" });
    }
    let float = adapter_type(opts.outtype)?;
    let cfg = peft_config(dir)?;
    let weights = dir.join(ADAPTER_WEIGHTS);
    if !weights.is_file() {
        let why = if dir.join("adapter_model.bin").is_file() {
            "the adapter's weights (adapter_model.bin is PyTorch pickle; save with safetensors)"
        } else {
            "the adapter's weights"
        };
        return Err(ConvertError::Missing { path: weights, what: why });
    }
    let base_path = resolve_base(dir, opts.base.as_deref(), cfg.base.as_deref())?;
    let base = BaseModel::open(&base_path)?;
    let ck = Checkpoint::open(dir)?;

    let modules = lora_modules(&ck, &weights)?;
    let mut pairs = vec![];
    for (module, (a, b)) in modules {
        let (Some(a), Some(b)) = (a, b) else {
            return Err(ConvertError::tensor(format!(
                "module `{module}`: lora_A and lora_B must come in pairs"
            )));
        };
        pairs.push(plan_pair(&module, a, b, &base, &ck, &cfg)?);
    }
    pairs.sort_by_key(|p| {
        let layer: i64 = p
            .gguf
            .strip_prefix("blk.")
            .and_then(|r| r.split('.').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(-1);
        (layer, p.gguf.clone())
    });

    let mut entries = vec![];
    for p in &pairs {
        for (suffix, src) in [("lora_a", &p.a), ("lora_b", &p.b)] {
            let ne: Vec<usize> = ck.tensors[src].shape.iter().rev().copied().collect();
            let ty = if ne[0].is_multiple_of(float.block_size()) { float } else { GgmlType::F16 };
            entries.push(TensorEntry { name: format!("{}.{suffix}", p.gguf), ne, ty });
        }
    }
    let kv = adapter_kv(dir, base.arch.name(), cfg.alpha);

    let out = &opts.outfile;
    let bytes_written = crate::output::write_then_rename(out, |tmp| {
        write_adapter(&ck, &pairs, &kv, &entries, tmp, opts.cancel.as_deref(), &mut progress)
    })?;
    let sizes = ck.tensors.values().map(|t| (t.numel() * t.dtype.size()) as u64);
    Ok(Report {
        outfile: out.clone(),
        architecture: base.arch.name().into(),
        outtype: opts.outtype,
        tensors: entries.len(),
        bytes_written,
        bytes_read: sizes.clone().sum(),
        seconds: start.elapsed().as_secs_f64(),
        largest_tensor_bytes: sizes.max().unwrap_or(0),
        types: entries.iter().map(|e| (e.name.clone(), e.ty)).collect(),
    })
}

/// The GGUF type an adapter's tensors take for `--outtype` (float types and q8_0 only).
fn adapter_type(t: OutType) -> Result<GgmlType> {
    Ok(match t {
        OutType::F32 => GgmlType::F32,
        OutType::F16 => GgmlType::F16,
        OutType::Bf16 => GgmlType::Bf16,
        OutType::Q8_0 => GgmlType::Q8_0,
        t => {
            return Err(ConvertError::InvalidArgument(format!(
                "a LoRA adapter converts to f32, f16, bf16 or q8_0, not {}",
                t.name()
            )))
        }
    })
}

/// The checkpoint's lora_A / lora_B tensor names paired by module.
#[allow(clippy::type_complexity)]
fn lora_modules(
    ck: &Checkpoint,
    weights: &Path,
) -> Result<BTreeMap<String, (Option<String>, Option<String>)>> {
    let mut modules: BTreeMap<String, (Option<String>, Option<String>)> = BTreeMap::new();
    for name in ck.tensors.keys() {
        let short = name.strip_prefix("base_model.model.").unwrap_or(name);
        if short.ends_with(".base_layer.weight") {
            continue;
        }
        let (module, is_a) = if let Some(m) = short.strip_suffix(".lora_A.weight") {
            (m, true)
        } else if let Some(m) = short.strip_suffix(".lora_B.weight") {
            (m, false)
        } else if short.contains("lora_embedding_") {
            return Err(ConvertError::tensor(format!(
                "`{name}`: embedding adapters (new or retrained tokens) are not supported"
            )));
        } else {
            return Err(ConvertError::tensor(format!("`{name}`: not a lora_A or lora_B weight")));
        };
        let e = modules.entry(module.to_string()).or_default();
        if is_a {
            e.0 = Some(name.clone());
        } else {
            e.1 = Some(name.clone());
        }
    }
    if modules.is_empty() {
        return Err(ConvertError::tensor(format!("{}: no lora_A/lora_B tensors", weights.display())));
    }
    Ok(modules)
}

/// Module `module`'s pair (`a`, `b`) checked against the base and the config, named as the
/// base's tensor it adapts.
fn plan_pair(
    module: &str,
    a: String,
    b: String,
    base: &BaseModel,
    ck: &Checkpoint,
    cfg: &PeftConfig,
) -> Result<Pair> {
    let hf = names::canonical(base.arch, &base.hf_arch, &format!("{module}.weight"));
    let gguf = names::gguf_name(base.arch, &hf).ok_or_else(|| {
        ConvertError::tensor(format!(
            "module `{module}`: no {} tensor to adapt (wick convert maps the model converter's names only)",
            base.arch.name()
        ))
    })?;
    let Some(ne) = base.tensors.get(&gguf) else {
        let hint = if gguf == "output.weight" { " (its head is tied to token_embd)" } else { "" };
        return Err(ConvertError::tensor(format!("module `{module}`: the base model has no `{gguf}`{hint}")));
    };
    let (sa, sb) = (&ck.tensors[&a].shape, &ck.tensors[&b].shape);
    for (n, t) in [(&a, sa), (&b, sb)] {
        if t.len() != 2 {
            return Err(ConvertError::tensor(format!("`{n}`: shape {t:?}, expected 2 dimensions")));
        }
        if let Dtype::Other(d, _) = ck.tensors[n].dtype {
            return Err(ConvertError::Dtype { name: n.clone(), dtype: d.into() });
        }
    }
    let r = sa[0];
    if sb[1] != r {
        return Err(ConvertError::tensor(format!(
            "module `{module}`: rank mismatch: lora_A has {r} rows, lora_B {} columns",
            sb[1]
        )));
    }
    if let Some(cr) = cfg.rank {
        if cr != r {
            return Err(ConvertError::tensor(format!(
                "module `{module}`: rank mismatch: the tensors have rank {r}, adapter_config.json's r is {cr}"
            )));
        }
    }
    let (n_in, n_out) = (ne[0], ne.get(1).copied().unwrap_or(1));
    if ne.len() != 2 || sa[1] != n_in || sb[0] != n_out {
        return Err(ConvertError::ShapeMismatch {
            name: format!("{module} (base `{gguf}` is [{n_out}, {n_in}])"),
            got: vec![sb[0], sa[1]],
            want: vec![n_out, n_in],
        });
    }
    let permute = (base.arch == Arch::Llama)
        .then(|| {
            if hf.ends_with("q_proj.weight") {
                Some(base.n_head)
            } else if hf.ends_with("k_proj.weight") {
                names::split_layer(&hf).map(|(il, _)| base.n_kv[il.min(base.n_kv.len() - 1)])
            } else {
                None
            }
        })
        .flatten();
    Ok(Pair { gguf, a, b, permute })
}

/// The adapter's header keys, as `convert_lora_to_gguf.py` writes them.
fn adapter_kv(dir: &Path, arch: &str, alpha: f32) -> Vec<(String, Value)> {
    let name = dir
        .canonicalize()
        .ok()
        .and_then(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "lora".into());
    vec![
        ("general.architecture".to_string(), Value::Str(arch.into())),
        ("general.type".to_string(), Value::Str("adapter".into())),
        ("general.name".to_string(), Value::Str(name)),
        ("adapter.type".to_string(), Value::Str("lora".into())),
        ("adapter.lora.alpha".to_string(), Value::F32(alpha)),
        ("general.quantization_version".to_string(), Value::U32(2)),
    ]
}

fn write_adapter(
    ck: &Checkpoint,
    pairs: &[Pair],
    kv: &[(String, Value)],
    entries: &[TensorEntry],
    tmp: &Path,
    cancel: Option<&AtomicBool>,
    progress: &mut dyn FnMut(&Progress),
) -> Result<u64> {
    let io = |e| ConvertError::io(tmp, e);
    let header = gguf::header(kv, entries);
    let total = gguf::file_size(header.len(), entries);
    let mut w = BufWriter::new(File::create(tmp).map_err(io)?);
    w.write_all(&header).map_err(io)?;
    let mut written = header.len() as u64;
    let srcs = pairs.iter().flat_map(|p| [(&p.a, None), (&p.b, p.permute)]);
    for (i, ((src, permute), e)) in srcs.zip(entries).enumerate() {
        if cancel.is_some_and(|c| c.load(Ordering::Relaxed)) {
            return Err(ConvertError::Cancelled);
        }
        let t = &ck.tensors[src];
        let mut x = vec![0f32; t.numel()];
        match permute {
            None => ck.read_f32(t, 0, &mut x)?,
            Some(n_head) => {
                let (rows, row) = (t.shape[0], t.shape[1]);
                for (r, chunk) in x.chunks_mut(row).enumerate() {
                    ck.read_f32(t, permuted_row(r, rows, n_head) * row, chunk)?;
                }
            }
        }
        let mut buf = vec![0u8; e.n_bytes()];
        for (xs, os) in x.chunks(e.ne[0]).zip(buf.chunks_mut(e.ty.row_bytes(e.ne[0]))) {
            e.ty.encode(xs, os);
        }
        w.write_all(&buf).map_err(io)?;
        gguf::write_padding(&mut w, buf.len()).map_err(io)?;
        written += buf.len().div_ceil(gguf::ALIGNMENT) as u64 * gguf::ALIGNMENT as u64;
        progress(&Progress {
            tensor: e.name.clone(),
            tensors_done: i + 1,
            tensors_total: entries.len(),
            bytes_written: written,
            bytes_total: total,
        });
    }
    let file = w.into_inner().map_err(|e| io(e.into_error()))?;
    file.sync_all().map_err(io)?;
    Ok(written)
}

/// The metadata values the base check reads (others are skipped).
#[derive(Clone, Debug)]
enum GgufVal {
    Int(usize),
    Ints(Vec<usize>),
    Str(String),
    Other,
}

impl GgufVal {
    fn int(&self) -> Option<usize> {
        match self {
            Self::Int(n) => Some(*n),
            _ => None,
        }
    }
}

struct GgufHeader {
    kv: BTreeMap<String, GgufVal>,
    tensors: BTreeMap<String, Vec<usize>>,
}

/// A GGUF's metadata and tensor dims (v2 and v3), read without mapping the weights.
fn read_gguf_header(path: &Path) -> Result<GgufHeader> {
    let file = File::open(path).map_err(|e| ConvertError::io(path, e))?;
    let mut r = BufReader::new(file);
    let bad = |why: &str| {
        ConvertError::InvalidArgument(format!("base {}: not a GGUF model ({why})", path.display()))
    };
    let io = |_e: std::io::Error| bad("cut short");
    let mut read = |n: usize| -> Result<Vec<u8>> {
        let mut b = vec![0u8; n];
        r.read_exact(&mut b).map_err(io)?;
        Ok(b)
    };
    let magic = read(4)?;
    if magic != b"GGUF" {
        return Err(bad("bad magic"));
    }
    let u32_ = |b: Vec<u8>| u32::from_le_bytes(b.try_into().unwrap_or([0; 4]));
    let u64_ = |b: Vec<u8>| u64::from_le_bytes(b.try_into().unwrap_or([0; 8]));
    let version = u32_(read(4)?);
    if !(2..=3).contains(&version) {
        return Err(bad(&format!("version {version}")));
    }
    let n_tensors = u64_(read(8)?) as usize;
    let n_kv = u64_(read(8)?) as usize;
    const LIMIT: usize = 1 << 24;
    if n_tensors > LIMIT || n_kv > LIMIT {
        return Err(bad("implausible counts"));
    }
    let string = |read: &mut dyn FnMut(usize) -> Result<Vec<u8>>| -> Result<String> {
        let n = u64_(read(8)?) as usize;
        if n > LIMIT {
            return Err(bad("implausible string"));
        }
        Ok(String::from_utf8_lossy(&read(n)?).into_owned())
    };
    let size_of = |ty: u32| -> Option<usize> {
        match ty {
            0 | 1 | 7 => Some(1),
            2 | 3 => Some(2),
            4..=6 => Some(4),
            10..=12 => Some(8),
            _ => None,
        }
    };
    let int_of = |ty: u32, b: &[u8]| -> Option<usize> {
        match ty {
            4 | 5 => Some(u32::from_le_bytes(b[..4].try_into().ok()?) as usize),
            10 | 11 => Some(u64::from_le_bytes(b[..8].try_into().ok()?) as usize),
            _ => None,
        }
    };
    let mut kv = BTreeMap::new();
    for _ in 0..n_kv {
        let key = string(&mut read)?;
        let ty = u32_(read(4)?);
        let val = match ty {
            8 => GgufVal::Str(string(&mut read)?),
            9 => {
                let et = u32_(read(4)?);
                let n = u64_(read(8)?) as usize;
                if n > LIMIT {
                    return Err(bad("implausible array"));
                }
                if et == 8 {
                    for _ in 0..n {
                        string(&mut read)?;
                    }
                    GgufVal::Other
                } else {
                    let sz = size_of(et).ok_or_else(|| bad("unknown array type"))?;
                    let b = read(n * sz)?;
                    let ints: Option<Vec<usize>> = b.chunks(sz).map(|c| int_of(et, c)).collect();
                    ints.map_or(GgufVal::Other, GgufVal::Ints)
                }
            }
            _ => {
                let sz = size_of(ty).ok_or_else(|| bad("unknown value type"))?;
                let b = read(sz)?;
                int_of(ty, &b).map_or(GgufVal::Other, GgufVal::Int)
            }
        };
        kv.insert(key, val);
    }
    let mut tensors = BTreeMap::new();
    for _ in 0..n_tensors {
        let name = string(&mut read)?;
        let n_dims = u32_(read(4)?) as usize;
        if n_dims > 8 {
            return Err(bad("implausible tensor rank"));
        }
        let ne: Vec<usize> = (0..n_dims).map(|_| read(8).map(|b| u64_(b) as usize)).collect::<Result<_>>()?;
        read(4 + 8)?; // type, offset
        tensors.insert(name, ne);
    }
    Ok(GgufHeader { kv, tensors })
}
