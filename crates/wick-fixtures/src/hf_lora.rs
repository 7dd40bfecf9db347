//! Synthetic PEFT LoRA adapters for the synthetic Hugging Face checkpoints (`hf.rs`), as
//! `peft`'s `save_pretrained` writes them: `adapter_config.json` (`peft_type`, `r`,
//! `lora_alpha`, `target_modules`, `base_model_name_or_path`, …) and
//! `adapter_model.safetensors` with `base_model.model.<module>.lora_A.weight` (`[r, n_in]`)
//! and `…lora_B.weight` (`[n_out, r]`) per adapted linear layer.
//!
//! - `hf-llama-lora` (for `hf-llama`): q_proj and v_proj of both layers;
//! - `hf-lfm2-lora` (for `hf-lfm2`): q_proj, v_proj and out_proj of the attention layers and
//!   the short-conv blocks' in_proj and out_proj (PEFT matches `out_proj` in both).
//!
//! r 4, alpha 8, F32 values (so a converted F32 or F16 adapter holds exactly these, F16
//! rounding aside), A and B both N(0, σ) with `s·B·A` entries of about the base weight's σ.
//! `base_model_name_or_path` is `../hf-<arch>`: the base checkpoint beside the adapter, which
//! `wick convert` finds without `--base`. Writing these changes no other fixture.

use std::path::{Path, PathBuf};

use serde_json::json;
use wick_core::error::Result;

use super::build::Gaussian;
use super::hf::write_dir;
use super::hf_spec::{HfDtype, HfSpec};
use super::hf_weights::{write_json, write_safetensors, HfTensor};
use crate::{hf_small_specs, FixtureArch};

/// One PEFT adapter for a synthetic checkpoint.
#[derive(Clone, Debug)]
pub struct HfLoraSpec {
    pub dir_name: String,
    /// The checkpoint it adapts (`hf_small_specs()`).
    pub base: HfSpec,
    pub rank: usize,
    pub alpha: f32,
    /// PEFT `target_modules`: module names matched against the last part of each path.
    pub target_modules: Vec<&'static str>,
    pub seed: u64,
}

/// `hf-llama-lora` and `hf-lfm2-lora`.
pub fn hf_lora_specs() -> Vec<HfLoraSpec> {
    hf_small_specs()
        .into_iter()
        .filter_map(|base| {
            let (targets, seed) = match base.arch {
                FixtureArch::Llama => (vec!["q_proj", "v_proj"], 95),
                FixtureArch::Lfm2 => (vec!["q_proj", "v_proj", "in_proj", "out_proj"], 96),
                _ => return None,
            };
            Some(HfLoraSpec {
                dir_name: format!("{}-lora", base.dir_name),
                base,
                rank: 4,
                alpha: 8.0,
                target_modules: targets,
                seed,
            })
        })
        .collect()
}

/// One adapted module: its path in the base model (`model.layers.N.self_attn.q_proj`) and
/// the shape of its weight (`[n_out, n_in]`, PyTorch order).
#[derive(Clone, Debug, PartialEq)]
pub struct HfLoraModule {
    pub path: String,
    pub n_out: usize,
    pub n_in: usize,
}

/// The base's linear layers whose last name is in `spec.target_modules`, in layer order.
pub fn hf_lora_modules(spec: &HfLoraSpec) -> Vec<HfLoraModule> {
    let b = &spec.base;
    let (d, hd) = (b.d, b.d / b.n_head);
    let mut out = vec![];
    for (il, &kv) in b.n_kv.iter().enumerate() {
        let p = format!("model.layers.{il}");
        let mut linear: Vec<(String, usize, usize)> = vec![];
        if kv == 0 {
            linear.push((format!("{p}.conv.in_proj"), 3 * d, d));
            linear.push((format!("{p}.conv.out_proj"), d, d));
        } else {
            let o = if b.arch == FixtureArch::Llama { "o_proj" } else { "out_proj" };
            linear.push((format!("{p}.self_attn.q_proj"), b.n_head * hd, d));
            linear.push((format!("{p}.self_attn.k_proj"), kv * hd, d));
            linear.push((format!("{p}.self_attn.v_proj"), kv * hd, d));
            linear.push((format!("{p}.self_attn.{o}"), d, b.n_head * hd));
        }
        for (path, n_out, n_in) in linear {
            let last = path.rsplit('.').next().unwrap_or_default();
            if spec.target_modules.contains(&last) {
                out.push(HfLoraModule { path, n_out, n_in });
            }
        }
    }
    out
}

/// The adapter's tensors (names as PEFT saves them), values not yet drawn: A then B per
/// module.
pub fn hf_lora_tensors(spec: &HfLoraSpec) -> Vec<HfTensor> {
    // The base's block weights are N(0, 2/√d) (`hf_weights.rs`).
    let g = 2.0 / (spec.base.d as f32).sqrt();
    let scale = spec.alpha / spec.rank as f32;
    let sigma = (g / (scale * (spec.rank as f32).sqrt())).sqrt();
    let mut out = vec![];
    for m in hf_lora_modules(spec) {
        let p = format!("base_model.model.{}", m.path);
        out.push(HfTensor::drawn(format!("{p}.lora_A.weight"), vec![spec.rank, m.n_in], 0.0, sigma));
        out.push(HfTensor::drawn(format!("{p}.lora_B.weight"), vec![m.n_out, spec.rank], 0.0, sigma));
    }
    out
}

/// Writes the adapter of `spec` into `out_dir/spec.dir_name` (replacing it); returns the
/// directory.
pub fn write_hf_lora(spec: &HfLoraSpec, out_dir: &Path) -> Result<PathBuf> {
    write_dir(out_dir, &spec.dir_name, |tmp| {
        let config = json!({
            "peft_type": "LORA",
            "task_type": "CAUSAL_LM",
            "base_model_name_or_path": format!("../{}", spec.base.dir_name),
            "r": spec.rank,
            "lora_alpha": spec.alpha,
            "lora_dropout": 0.0,
            "bias": "none",
            "fan_in_fan_out": false,
            "inference_mode": true,
            "target_modules": spec.target_modules,
            "use_rslora": false,
            "use_dora": false,
        });
        write_json(&tmp.join("adapter_config.json"), &config)?;
        let tensors = hf_lora_tensors(spec);
        write_safetensors(
            &tmp.join("adapter_model.safetensors"),
            &tensors,
            HfDtype::F32,
            &mut Gaussian::new(spec.seed),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io_err;

    #[test]
    fn peft_adapters_name_the_base_modules() -> Result<()> {
        let specs = hf_lora_specs();
        assert_eq!(
            specs.iter().map(|s| s.dir_name.as_str()).collect::<Vec<_>>(),
            ["hf-llama-lora", "hf-lfm2-lora"]
        );
        let llama = hf_lora_modules(&specs[0]);
        assert_eq!(llama.len(), 4);
        assert_eq!(
            llama[0],
            HfLoraModule { path: "model.layers.0.self_attn.q_proj".into(), n_out: 64, n_in: 64 }
        );
        assert_eq!(llama[1].n_out, 32); // v_proj: 2 KV heads of 16
        let lfm2 = hf_lora_modules(&specs[1]);
        let paths: Vec<&str> = lfm2.iter().map(|m| m.path.as_str()).collect();
        assert!(
            paths.contains(&"model.layers.0.conv.in_proj") && paths.contains(&"model.layers.0.conv.out_proj")
        );
        assert!(paths.contains(&"model.layers.2.self_attn.out_proj"));
        assert!(!paths.iter().any(|p| p.ends_with("k_proj")));
        assert_eq!(lfm2.len(), 4 * 2 + 2 * 3);

        let dir = std::env::temp_dir().join(format!("wick-hf-lora-{}", std::process::id()));
        let out = write_hf_lora(&specs[0], &dir)?;
        let cfg: serde_json::Value =
            serde_json::from_slice(&std::fs::read(out.join("adapter_config.json")).map_err(io_err)?)
                .map_err(|e| wick_core::error::WickError::Internal(e.to_string()))?;
        assert_eq!((cfg["r"].as_u64(), cfg["lora_alpha"].as_f64()), (Some(4), Some(8.0)));
        let bytes = std::fs::read(out.join("adapter_model.safetensors")).map_err(io_err)?;
        let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
        let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
        assert_eq!(
            header["base_model.model.model.layers.1.self_attn.v_proj.lora_B.weight"]["shape"],
            json!([32, 4])
        );
        let numel: usize = hf_lora_tensors(&specs[0]).iter().map(|t| t.numel()).sum();
        assert_eq!(bytes.len(), 8 + n + 4 * numel);
        let _ = std::fs::remove_dir_all(&dir);
        Ok(())
    }
}
