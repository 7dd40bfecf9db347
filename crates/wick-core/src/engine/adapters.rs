//! The engine's LoRA adapters: loading, unloading, default scales, and the set a request runs
//! with.

use std::path::PathBuf;
use std::sync::Arc;

use super::Engine;
use crate::error::{Result, WickError};
use crate::lora::{Adapter, BaseTensors, LoraMix};
use crate::runtime::device::Placement;

/// An adapter to load: its GGUF, its name (the file stem when None), and the scale requests
/// that name no adapters get it at (llama-server's global scale; 0 = loaded, not applied).
#[derive(Debug, Clone)]
pub struct LoraSpec {
    pub path: PathBuf,
    pub name: Option<String>,
    pub scale: f32,
}

/// A loaded adapter as the APIs list it.
#[derive(Debug, Clone)]
pub struct AdapterInfo {
    pub id: usize,
    pub name: String,
    pub path: PathBuf,
    /// The scale requests that name no adapters get.
    pub scale: f32,
    /// Base weights it changes.
    pub targets: usize,
}

/// The engine's adapters by id (an unloaded adapter's id is not reused) with their default
/// scales, and what they are checked against.
pub(super) struct Adapters {
    pub(super) list: Vec<Option<(Arc<Adapter>, f32)>>,
    pub(super) base: BaseTensors,
    pub(super) arch: String,
    pub(super) placement: Placement,
}

impl Adapters {
    /// The adapters `opts` names (`EngineOptions::lora`), checked against the model `gguf`
    /// (of architecture `arch`) and loaded in id order.
    pub(super) fn load_all(
        opts: &super::EngineOptions,
        gguf: &crate::gguf::GgufFile,
        arch: &str,
        placement: &Placement,
    ) -> Result<Self> {
        let base = gguf.tensors.iter().map(|t| (t.name.clone(), t.dims.clone())).collect();
        let mut adapters =
            Adapters { list: vec![], base, arch: arch.to_string(), placement: placement.clone() };
        if opts.vocab_only && !opts.lora.is_empty() {
            return Err(WickError::InvalidRequest(
                "LoRA adapters need the model's weights (not vocab-only)".into(),
            ));
        }
        for spec in &opts.lora {
            adapters.load(spec)?;
        }
        Ok(adapters)
    }

    pub(super) fn load(&mut self, spec: &LoraSpec) -> Result<usize> {
        let name = match &spec.name {
            Some(n) => n.clone(),
            None => spec.path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default(),
        };
        if !spec.scale.is_finite() {
            return Err(WickError::InvalidRequest(format!(
                "LoRA adapter `{name}`: scale {} is not finite",
                spec.scale
            )));
        }
        if self.list.iter().flatten().any(|(a, _)| a.name == name) {
            return Err(WickError::InvalidRequest(format!(
                "a LoRA adapter named `{name}` is already loaded"
            )));
        }
        let id = self.list.len();
        let a = Adapter::load(&spec.path, id, &name, &self.arch, &self.base, &self.placement)?;
        self.list.push(Some((Arc::new(a), spec.scale)));
        Ok(id)
    }
}

impl Engine {
    /// The adapters a request runs with: those it names, else the engine's defaults; in id
    /// order, scale-0 ones left out.
    pub(super) fn lora_mix(&self, asked: Option<&[(usize, f32)]>) -> Result<LoraMix> {
        let set =
            self.adapters.read().map_err(|_| WickError::Internal("the adapter list is poisoned".into()))?;
        let mut mix: LoraMix = match asked {
            None => set.list.iter().flatten().map(|(a, s)| (a.clone(), *s)).collect(),
            Some(list) => list
                .iter()
                .map(|&(id, scale)| match set.list.get(id).and_then(Option::as_ref) {
                    Some((a, _)) if scale.is_finite() => Ok((a.clone(), scale)),
                    Some(_) => Err(WickError::InvalidRequest(format!(
                        "LoRA adapter {id}: scale {scale} is not finite"
                    ))),
                    None => Err(WickError::InvalidRequest(format!("there is no LoRA adapter with id {id}"))),
                })
                .collect::<Result<_>>()?,
        };
        mix.retain(|(_, s)| *s != 0.0);
        mix.sort_by_key(|(a, _)| a.id);
        mix.dedup_by_key(|(a, _)| a.id);
        Ok(mix)
    }

    /// Loads an adapter beside the running ones (vLLM's `/v1/load_lora_adapter`); its id.
    pub fn load_adapter(&self, spec: &LoraSpec) -> Result<usize> {
        if self.info.vocab_only {
            return Err(WickError::InvalidRequest(
                "LoRA adapters need the model's weights (not vocab-only)".into(),
            ));
        }
        let mut set =
            self.adapters.write().map_err(|_| WickError::Internal("the adapter list is poisoned".into()))?;
        set.load(spec)
    }

    /// Unloads the adapter named `name`; sequences running with it finish with it.
    pub fn unload_adapter(&self, name: &str) -> Result<()> {
        let mut set =
            self.adapters.write().map_err(|_| WickError::Internal("the adapter list is poisoned".into()))?;
        let slot = set.list.iter_mut().find(|e| e.as_ref().is_some_and(|(a, _)| a.name == name));
        match slot {
            Some(e) => {
                *e = None;
                Ok(())
            }
            None => Err(WickError::InvalidRequest(format!("there is no LoRA adapter named `{name}`"))),
        }
    }

    /// The loaded adapters, by id.
    pub fn adapters(&self) -> Vec<AdapterInfo> {
        let Ok(set) = self.adapters.read() else { return vec![] };
        set.list
            .iter()
            .flatten()
            .map(|(a, scale)| AdapterInfo {
                id: a.id,
                name: a.name.clone(),
                path: a.path.clone(),
                scale: *scale,
                targets: a.n_targets(),
            })
            .collect()
    }

    /// Sets the scales requests that name no adapters get (llama-server's `POST
    /// /lora-adapters`); adapters left out keep theirs.
    pub fn set_adapter_scales(&self, scales: &[(usize, f32)]) -> Result<()> {
        let mut set =
            self.adapters.write().map_err(|_| WickError::Internal("the adapter list is poisoned".into()))?;
        for &(id, scale) in scales {
            if !scale.is_finite() {
                return Err(WickError::InvalidRequest(format!(
                    "LoRA adapter {id}: scale {scale} is not finite"
                )));
            }
            match set.list.get_mut(id).and_then(Option::as_mut) {
                Some((_, s)) => *s = scale,
                None => {
                    return Err(WickError::InvalidRequest(format!("there is no LoRA adapter with id {id}")))
                }
            }
        }
        Ok(())
    }
}
