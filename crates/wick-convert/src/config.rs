//! config.json as the converter reads it: `text_config` merged into the root (as
//! `TextModel.__init__` does) and `find_hparam`'s first-of-several-keys lookups.

use std::path::Path;

use serde_json::{Map, Value};

use crate::error::{ConvertError, Result};

pub fn read_json(path: &Path) -> Result<Value> {
    let bytes = std::fs::read(path).map_err(|e| ConvertError::io(path, e))?;
    serde_json::from_slice(&bytes)
        .map_err(|e| ConvertError::Json { path: path.to_path_buf(), why: e.to_string() })
}

/// Reads `path` if it exists.
pub fn read_json_opt(path: &Path) -> Result<Option<Value>> {
    if path.is_file() {
        read_json(path).map(Some)
    } else {
        Ok(None)
    }
}

#[derive(Clone, Debug)]
pub struct HfConfig {
    /// The file as written (for keys llama.cpp reads from the original, like `architectures`).
    pub raw: Map<String, Value>,
    /// With `text_config` merged in.
    pub params: Map<String, Value>,
}

impl HfConfig {
    pub fn open(dir: &Path) -> Result<Self> {
        let path = dir.join("config.json");
        if !path.is_file() {
            return Err(ConvertError::Missing { path, what: "the model's config.json" });
        }
        let Value::Object(raw) = read_json(&path)? else {
            return Err(ConvertError::config("not a JSON object"));
        };
        let mut params = raw.clone();
        if let Some(Value::Object(text)) = raw.get("text_config") {
            for (k, v) in text {
                params.insert(k.clone(), v.clone());
            }
        }
        Ok(Self { raw, params })
    }

    /// `architectures[0]`.
    pub fn hf_arch(&self) -> Result<&str> {
        self.raw
            .get("architectures")
            .and_then(|a| a.as_array())
            .and_then(|a| a.first())
            .and_then(|a| a.as_str())
            .ok_or_else(|| ConvertError::config("no `architectures` list"))
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.params.get(key).filter(|v| !v.is_null())
    }

    /// The first of `keys` present (`find_hparam(keys, optional=True)`).
    pub fn find(&self, keys: &[&str]) -> Option<&Value> {
        keys.iter().find_map(|k| self.get(k))
    }

    pub fn find_u64(&self, keys: &[&str]) -> Option<u64> {
        self.find(keys).and_then(|v| v.as_u64())
    }

    pub fn find_f64(&self, keys: &[&str]) -> Option<f64> {
        self.find(keys).and_then(|v| v.as_f64())
    }

    /// A required unsigned integer (`find_hparam(keys)`).
    pub fn need_u64(&self, keys: &[&str]) -> Result<u64> {
        self.find_u64(keys)
            .ok_or_else(|| ConvertError::config(format!("needs an integer `{}`", keys.join("` or `"))))
    }

    pub fn need_usize(&self, keys: &[&str]) -> Result<usize> {
        self.need_u64(keys).map(|n| n as usize)
    }

    pub fn bool(&self, key: &str) -> Option<bool> {
        self.get(key).and_then(|v| v.as_bool())
    }

    pub fn str(&self, key: &str) -> Option<&str> {
        self.get(key).and_then(|v| v.as_str())
    }
}
