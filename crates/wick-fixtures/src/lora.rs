//! Synthetic LoRA adapters in llama.cpp's GGUF adapter format (`llama-adapter.cpp`,
//! `convert_lora_to_gguf.py`), for the standard llama and lfm2 fixtures:
//!
//! - keys: `general.architecture` (the base's), `general.type = "adapter"`, `general.name`,
//!   `adapter.type = "lora"`, `adapter.lora.alpha` (f32), `general.quantization_version`;
//! - per adapted base weight `W` (ggml `{n_in, n_out}`): `W.lora_a` (ggml `{n_in, r}`) and
//!   `W.lora_b` (ggml `{r, n_out}`); llama.cpp computes `W·x + s·B·(A·x)` with
//!   `s = scale · alpha / r` (`alpha = 0`: `s = scale`).
//!
//! Written for `tiny-llama-q8_0.gguf` and `tiny-lfm2-q8_0.gguf` (`LORA_TARGETS`):
//! - `lora-<base>-attn-f16.gguf`: attn_q/k/v/output of every attention layer, r 4, alpha 8, F16;
//! - `lora-<base>-ffn-f32.gguf`: ffn_gate/up/down of every layer and (lfm2) the short-conv
//!   in_proj/out_proj, r 8, alpha 4, F32;
//! - `lora-<base>-all-q8_0.gguf`: both sets plus `output` where the head is untied (llama),
//!   r 32, alpha 16, Q8_0 (r = 32 so lora_b's rows of r values fill whole Q8_0 blocks; with a
//!   rank that is not a multiple of 32, llama.cpp's converter writes lora_b in F16 instead).
//!
//! A and B are both N(0, σ) (real training starts B at zero), with σ chosen so the low-rank
//! update `s·B·A` has entries of `rel` times the base weight's σ (3.0 for the attention
//! adapters, 0.3 for the others): each adapted matmul's output moves by about that fraction,
//! so greedy text departs from the base model within a few tokens without the logits
//! blowing up. Each file has its own seed; no other fixture
//! changes.
//!
//! The `--bad` set adds `BAD_LORA` files: an adapter with lfm2's tensors labelled `llama`, and
//! a llama adapter whose lora_a rows are too long for tiny-llama.

use std::path::{Path, PathBuf};

use candle_core::quantized::{gguf_file, GgmlDType, QTensor};
use wick_core::error::{Result, WickError};
use wick_core::gguf::GgufFile;

use super::build::{refs, Gaussian};
use super::gguf_write::{io_err, write_gguf, Meta};
use crate::{standard_specs, FixtureArch, FixtureSpec};

/// Which base weights an adapter adapts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LoraTargets {
    /// attn_q, attn_k, attn_v, attn_output of every attention layer.
    Attn,
    /// ffn_gate, ffn_up, ffn_down of every layer; lfm2's shortconv in_proj and out_proj.
    Ffn,
    /// Both, plus `output.weight` when the base has an untied head.
    All,
}

/// One synthetic adapter.
#[derive(Clone, Debug)]
pub struct LoraSpec {
    pub file_name: String,
    /// The standard fixture it adapts (`standard_specs()` file name).
    pub base: &'static str,
    pub targets: LoraTargets,
    pub rank: usize,
    pub alpha: f32,
    pub dtype: GgmlDType,
    pub seed: u64,
    /// The entries of `s·B·A` have `rel` × the base weight's σ (see the module docs).
    pub rel: f32,
}

impl LoraSpec {
    /// `alpha / rank`: the factor on `B·A` at a user scale of 1.
    pub fn scale(&self) -> f32 {
        if self.alpha == 0.0 {
            1.0
        } else {
            self.alpha / self.rank as f32
        }
    }
}

/// (target set, tag, rank, alpha, dtype, rel) of every standard adapter. The attention
/// adapters move their matmuls further: in lfm2 only 2 of 6 layers have attention, and at 1.0
/// its greedy tokens still equal the base model's.
const LORA_TARGETS: [(LoraTargets, &str, usize, f32, GgmlDType, f32); 3] = [
    (LoraTargets::Attn, "attn-f16", 4, 8.0, GgmlDType::F16, ATTN_REL),
    (LoraTargets::Ffn, "ffn-f32", 8, 4.0, GgmlDType::F32, 0.3),
    (LoraTargets::All, "all-q8_0", 32, 16.0, GgmlDType::Q8_0, 0.3),
];
const ATTN_REL: f32 = 3.0;

/// The bases the standard adapters are written for.
pub const LORA_BASES: [&str; 2] = ["tiny-llama-q8_0.gguf", "tiny-lfm2-q8_0.gguf"];

/// The standard adapters: every `LORA_TARGETS` entry for every `LORA_BASES` base, named
/// `lora-<base>-<tag>.gguf` (e.g. `lora-tiny-llama-q8_0-attn-f16.gguf`).
pub fn lora_specs() -> Vec<LoraSpec> {
    let mut out = vec![];
    for (b, base) in LORA_BASES.iter().enumerate() {
        for (t, (targets, tag, rank, alpha, dtype, rel)) in LORA_TARGETS.iter().enumerate() {
            out.push(LoraSpec {
                file_name: format!("lora-{}-{tag}.gguf", base.trim_end_matches(".gguf")),
                base,
                targets: *targets,
                rank: *rank,
                alpha: *alpha,
                dtype: *dtype,
                seed: 300 + 10 * b as u64 + t as u64,
                rel: *rel,
            });
        }
    }
    out
}

/// One adapted base weight: its GGUF name, ggml dims `{n_in, n_out}` and the σ of its
/// values in the base fixture.
#[derive(Clone, Debug, PartialEq)]
pub struct LoraTarget {
    pub name: String,
    pub n_in: usize,
    pub n_out: usize,
    pub base_sigma: f32,
}

/// The base weights `targets` selects in a fixture of `spec`'s shapes (`n_vocab` for the
/// head), in layer order — the names and shapes `build.rs` writes.
pub fn lora_targets(spec: &FixtureSpec, targets: LoraTargets, n_vocab: usize) -> Vec<LoraTarget> {
    let (d, ff, g) = (spec.d, spec.ff, spec.sigma);
    let hd = d / spec.n_head;
    let attn = matches!(targets, LoraTargets::Attn | LoraTargets::All);
    let ffn = matches!(targets, LoraTargets::Ffn | LoraTargets::All);
    let mut out = vec![];
    let mut t =
        |name: String, n_in, n_out, base_sigma| out.push(LoraTarget { name, n_in, n_out, base_sigma });
    for (il, &n_kv) in spec.n_kv.iter().enumerate() {
        let p = format!("blk.{il}");
        if n_kv == 0 {
            if ffn {
                t(format!("{p}.shortconv.in_proj.weight"), d, 3 * d, g);
                t(format!("{p}.shortconv.out_proj.weight"), d, d, g);
            }
        } else if attn {
            t(format!("{p}.attn_q.weight"), d, d, g);
            t(format!("{p}.attn_k.weight"), d, n_kv * hd, g);
            t(format!("{p}.attn_v.weight"), d, n_kv * hd, g);
            t(format!("{p}.attn_output.weight"), d, d, g);
        }
        if ffn {
            t(format!("{p}.ffn_gate.weight"), d, ff, g);
            t(format!("{p}.ffn_up.weight"), d, ff, g);
            t(format!("{p}.ffn_down.weight"), ff, d, g);
        }
    }
    // Only llama's head is untied among the two bases (lfm2 ties it to token_embd).
    if targets == LoraTargets::All && spec.arch == FixtureArch::Llama {
        t("output.weight".into(), d, n_vocab, 8.0 / (d as f32).sqrt());
    }
    out
}

/// The keys of an adapter for `arch` (as `convert_lora_to_gguf.py` writes them).
pub fn lora_meta(arch: &str, name: &str, alpha: f32) -> Meta {
    use gguf_file::Value as V;
    vec![
        ("general.architecture".into(), V::String(arch.into())),
        ("general.type".into(), V::String("adapter".into())),
        ("general.name".into(), V::String(name.into())),
        ("adapter.type".into(), V::String("lora".into())),
        ("adapter.lora.alpha".into(), V::F32(alpha)),
        ("general.quantization_version".into(), V::U32(2)),
    ]
}

/// The `lora_a` / `lora_b` tensors for `targets`: A `[r, n_in]` and B `[n_out, r]` in candle
/// order (ggml `{n_in, r}`, `{r, n_out}`), both N(0, σ) with `scale·σ²·√r = rel·σ_W`.
pub fn lora_tensors(
    targets: &[LoraTarget],
    rank: usize,
    scale: f32,
    rel: f32,
    dtype: GgmlDType,
    seed: u64,
) -> Result<Vec<(String, QTensor)>> {
    let mut rng = Gaussian::new(seed);
    let mut out = vec![];
    for t in targets {
        let sigma = (rel * t.base_sigma / (scale * (rank as f32).sqrt())).sqrt();
        let a = rng.tensor(&[rank, t.n_in], 0.0, sigma)?;
        let b = rng.tensor(&[t.n_out, rank], 0.0, sigma)?;
        out.push((format!("{}.lora_a", t.name), QTensor::quantize(&a, dtype)?));
        out.push((format!("{}.lora_b", t.name), QTensor::quantize(&b, dtype)?));
    }
    Ok(out)
}

fn base_spec(name: &str) -> Result<FixtureSpec> {
    standard_specs()
        .into_iter()
        .find(|s| s.file_name == name)
        .ok_or_else(|| WickError::Internal(format!("no fixture spec `{name}`")))
}

fn n_vocab(llama_src: &Path, spec: &FixtureSpec) -> Result<usize> {
    let vocab = GgufFile::open(llama_src.join("models").join(spec.vocab_file))?;
    vocab
        .metadata
        .get("tokenizer.ggml.tokens")
        .and_then(|v| v.as_array())
        .map(|a| a.len())
        .ok_or_else(|| WickError::Internal(format!("{}: no tokenizer.ggml.tokens", spec.vocab_file)))
}

/// The metadata and tensors of one adapter (`llama_src` for the base's vocabulary size).
pub fn build_lora(spec: &LoraSpec, llama_src: &Path) -> Result<(Meta, Vec<(String, QTensor)>)> {
    let base = base_spec(spec.base)?;
    let n_vocab = if spec.targets == LoraTargets::All { n_vocab(llama_src, &base)? } else { 0 };
    let targets = lora_targets(&base, spec.targets, n_vocab);
    let meta = lora_meta(base.arch.name(), spec.file_name.trim_end_matches(".gguf"), spec.alpha);
    let tensors = lora_tensors(&targets, spec.rank, spec.scale(), spec.rel, spec.dtype, spec.seed)?;
    Ok((meta, tensors))
}

/// Writes the standard adapters (`lora_specs()`) into `out_dir`; returns the paths written.
pub fn write_lora_fixtures(out_dir: &Path, llama_src: &Path) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(out_dir).map_err(io_err)?;
    let mut written = vec![];
    for spec in lora_specs() {
        let (meta, tensors) = build_lora(&spec, llama_src)?;
        let path = out_dir.join(&spec.file_name);
        write_gguf(&path, &meta, &refs(&tensors))?;
        written.push(path);
    }
    Ok(written)
}

/// The LoRA benchmark's adapters (`benches/lora.ts`): `n` adapters of every linear layer of
/// LFM2-350M's bench shape (`bench-lfm2-350m-q4_0.gguf`, `bench_specs`), r = 16, alpha = 32,
/// F16, as fine-tunes of small models usually are; `bench-lora-lfm2-350m-<i>.gguf`.
pub fn write_bench_loras(out_dir: &Path, n: usize) -> Result<Vec<PathBuf>> {
    let base = crate::bench_specs()
        .into_iter()
        .find(|s| s.file_name == "bench-lfm2-350m-q4_0.gguf")
        .ok_or_else(|| WickError::Internal("no bench-lfm2-350m-q4_0 spec".into()))?;
    let targets = lora_targets(&base, LoraTargets::All, 0);
    std::fs::create_dir_all(out_dir).map_err(io_err)?;
    let (rank, alpha) = (16, 32.0);
    (0..n)
        .map(|i| {
            let name = format!("bench-lora-lfm2-350m-{i}");
            let meta = lora_meta(base.arch.name(), &name, alpha);
            let tensors =
                lora_tensors(&targets, rank, alpha / rank as f32, 0.3, GgmlDType::F16, 400 + i as u64)?;
            let path = out_dir.join(format!("{name}.gguf"));
            write_gguf(&path, &meta, &refs(&tensors))?;
            Ok(path)
        })
        .collect()
}

/// An adapter that does not fit its base: a loader must refuse it.
#[derive(Clone, Debug)]
pub struct BadLora {
    pub path: PathBuf,
    /// The standard fixture it claims to adapt.
    pub base: &'static str,
    /// Why it does not fit, in words.
    pub why: &'static str,
}

/// The broken adapters (`--bad`):
/// - `bad-lora-wrong-base.gguf`: lfm2's FFN and short-conv targets (`tiny-lfm2-q8_0`'s
///   shapes, 6 layers) with `general.architecture = llama`: for tiny-llama its
///   `blk.0.shortconv.in_proj.weight` and layers 2–5 do not exist; for tiny-lfm2 the
///   architecture differs (llama.cpp: "model arch and LoRA arch mismatch").
/// - `bad-lora-wrong-shape.gguf`: a llama adapter of tiny-llama's attn_q whose lora_a rows are
///   128 long where the base's rows are 64 (llama.cpp: "has incorrect shape").
pub fn write_bad_lora_files(out_dir: &Path) -> Result<Vec<BadLora>> {
    std::fs::create_dir_all(out_dir).map_err(io_err)?;
    let mut out = vec![];
    let lfm2 = base_spec("tiny-lfm2-q8_0.gguf")?;
    let targets = lora_targets(&lfm2, LoraTargets::Ffn, 0);
    let tensors = lora_tensors(&targets, 8, 0.5, 0.3, GgmlDType::F32, 390)?;
    let path = out_dir.join("bad-lora-wrong-base.gguf");
    write_gguf(&path, &lora_meta("llama", "bad-lora-wrong-base", 4.0), &refs(&tensors))?;
    out.push(BadLora {
        path,
        base: "tiny-llama-q8_0.gguf",
        why: "lfm2 tensors (blk.0.shortconv.in_proj.weight, layers 2-5) labelled llama",
    });

    let target = LoraTarget { name: "blk.0.attn_q.weight".into(), n_in: 128, n_out: 64, base_sigma: 0.5 };
    let tensors = lora_tensors(&[target], 4, 2.0, 0.3, GgmlDType::F32, 391)?;
    let path = out_dir.join("bad-lora-wrong-shape.gguf");
    write_gguf(&path, &lora_meta("llama", "bad-lora-wrong-shape", 8.0), &refs(&tensors))?;
    out.push(BadLora {
        path,
        base: "tiny-llama-q8_0.gguf",
        why: "blk.0.attn_q.weight.lora_a is {128, 4}; tiny-llama's attn_q rows are 64 long",
    });
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::default_llama_src;
    use candle_core::Device;

    fn f32s(g: &GgufFile, name: &str) -> Vec<f32> {
        g.f32_tensor(name, &Device::Cpu).unwrap().flatten_all().unwrap().to_vec1().unwrap()
    }

    #[test]
    fn adapters_read_back_with_their_keys_and_shapes() -> Result<()> {
        let src = default_llama_src();
        if !src.join("models/ggml-vocab-llama-spm.gguf").is_file() {
            eprintln!("skipped: no llama.cpp source at {}", src.display());
            return Ok(());
        }
        let dir = std::env::temp_dir().join(format!("wick-lora-fixtures-{}", std::process::id()));
        let paths = write_lora_fixtures(&dir, &src)?;
        assert_eq!(paths.len(), 6);
        for spec in lora_specs() {
            let g = GgufFile::open(dir.join(&spec.file_name))?;
            let base = base_spec(spec.base)?;
            assert_eq!(g.metadata.str("general.architecture")?, base.arch.name());
            assert_eq!(g.metadata.str("general.type")?, "adapter");
            assert_eq!(g.metadata.str("adapter.type")?, "lora");
            assert_eq!(
                g.metadata.get("adapter.lora.alpha").and_then(|v| v.as_f64()),
                Some(spec.alpha as f64)
            );
            let n_vocab = if spec.targets == LoraTargets::All { n_vocab(&src, &base)? } else { 0 };
            let targets = lora_targets(&base, spec.targets, n_vocab);
            assert_eq!(g.tensor_count(), 2 * targets.len(), "{}", spec.file_name);
            for t in &targets {
                let a = g.info(&format!("{}.lora_a", t.name)).expect("lora_a");
                let b = g.info(&format!("{}.lora_b", t.name)).expect("lora_b");
                assert_eq!((a.dims.clone(), a.dtype), (vec![t.n_in, spec.rank], spec.dtype), "{}", t.name);
                assert_eq!((b.dims.clone(), b.dtype), (vec![spec.rank, t.n_out], spec.dtype), "{}", t.name);
            }
            let names: Vec<&str> = targets.iter().map(|t| t.name.as_str()).collect();
            let has = |n: &str| names.contains(&n);
            match (spec.targets, base.arch) {
                (LoraTargets::Attn, FixtureArch::Lfm2) => {
                    assert_eq!(names.len(), 8); // attention at layers 2 and 4
                    assert!(has("blk.2.attn_k.weight") && !has("blk.0.attn_q.weight"));
                }
                (LoraTargets::Ffn, FixtureArch::Lfm2) => {
                    assert!(has("blk.0.shortconv.in_proj.weight") && has("blk.5.ffn_down.weight"));
                    assert!(!has("blk.2.shortconv.in_proj.weight"));
                }
                (LoraTargets::All, FixtureArch::Llama) => assert!(has("output.weight")),
                (LoraTargets::All, FixtureArch::Lfm2) => assert!(!has("output.weight")),
                _ => {}
            }
        }
        // The update moves each matmul by about `rel` of its output: check ‖s·B·A‖ on one.
        let g = GgufFile::open(dir.join("lora-tiny-llama-q8_0-ffn-f32.gguf"))?;
        let (a, b) = (f32s(&g, "blk.0.ffn_up.weight.lora_a"), f32s(&g, "blk.0.ffn_up.weight.lora_b"));
        let (r, n_in, n_out) = (8, 64, 128);
        let mut sq = 0.0f64;
        for o in 0..n_out {
            for i in 0..n_in {
                let v: f32 = (0..r).map(|k| b[o * r + k] * a[k * n_in + i]).sum::<f32>() * 0.5;
                sq += (v as f64).powi(2);
            }
        }
        let rms = (sq / (n_in * n_out) as f64).sqrt();
        assert!((rms / (0.3 * 0.5) - 1.0).abs() < 0.25, "rms of s·B·A {rms}");
        for p in paths {
            let _ = std::fs::remove_file(p);
        }
        let _ = std::fs::remove_dir(&dir);
        Ok(())
    }

    #[test]
    fn adapter_targets_exist_in_the_base_fixtures() -> Result<()> {
        // Names and shapes of lora_targets() against the base's own tensors (built, not read).
        let vocab = crate::byte_vocab();
        for base in LORA_BASES {
            let spec = base_spec(base)?;
            let (_, tensors) = crate::build_fixture(&spec, &vocab)?;
            for targets in [LoraTargets::Attn, LoraTargets::Ffn, LoraTargets::All] {
                for t in lora_targets(&spec, targets, 259) {
                    let w =
                        tensors.iter().find(|(n, _)| *n == t.name).unwrap_or_else(|| panic!("{}", t.name));
                    // candle order [n_out, n_in].
                    assert_eq!(w.1.shape().dims(), &[t.n_out, t.n_in], "{base}: {}", t.name);
                }
            }
        }
        Ok(())
    }

    #[test]
    fn bad_adapters_do_not_fit_tiny_llama() -> Result<()> {
        let dir = std::env::temp_dir().join(format!("wick-bad-lora-{}", std::process::id()));
        let bad = write_bad_lora_files(&dir)?;
        let llama = base_spec("tiny-llama-q8_0.gguf")?;
        let (_, tensors) = crate::build_fixture(&llama, &crate::byte_vocab())?;
        for b in &bad {
            let g = GgufFile::open(&b.path)?;
            assert_eq!(g.metadata.str("general.architecture")?, "llama");
            assert_eq!(g.metadata.str("general.type")?, "adapter");
            // Some pair names a base tensor tiny-llama lacks, or has the wrong row length.
            let misfit = g.tensors.iter().filter(|i| i.name.ends_with(".lora_a")).any(|i| {
                let w = i.name.trim_end_matches(".lora_a");
                match tensors.iter().find(|(k, _)| k == w) {
                    None => true,
                    Some((_, t)) => t.shape().dims()[1] != i.dims[0],
                }
            });
            assert!(misfit, "{}", b.path.display());
            let _ = std::fs::remove_file(&b.path);
        }
        let _ = std::fs::remove_dir(&dir);
        Ok(())
    }
}
