//! The LoRA adapter API's JS objects and their mapping to engine types.

/// A LoRA adapter to load (a GGUF adapter as llama.cpp writes it).
#[napi(object)]
pub struct LoraAdapterSpec {
    pub path: String,
    /// Default: the file's stem.
    pub name: Option<String>,
    /// The scale requests that name no adapters get (default 1; 0 = loaded, not applied).
    pub scale: Option<f64>,
}

impl From<LoraAdapterSpec> for wick_core::engine::LoraSpec {
    fn from(s: LoraAdapterSpec) -> Self {
        Self { path: s.path.into(), name: s.name, scale: s.scale.unwrap_or(1.0) as f32 }
    }
}

/// A loaded LoRA adapter (`Engine.adapters()`).
#[napi(object)]
pub struct LoraAdapter {
    /// llama-server's adapter id (what requests' `lora: [{ id, scale }]` name).
    pub id: u32,
    pub name: String,
    pub path: String,
    /// The scale requests that name no adapters get.
    pub scale: f64,
    /// Base weights it changes.
    pub targets: u32,
}

impl From<wick_core::engine::AdapterInfo> for LoraAdapter {
    fn from(a: wick_core::engine::AdapterInfo) -> Self {
        Self {
            id: a.id as u32,
            name: a.name,
            path: a.path.display().to_string(),
            scale: a.scale as f64,
            targets: a.targets as u32,
        }
    }
}

/// An adapter and its scale for one request (llama-server's `lora` field).
#[napi(object)]
pub struct LoraScale {
    pub id: u32,
    pub scale: f64,
}
