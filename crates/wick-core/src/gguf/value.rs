//! GGUF metadata values and typed accessors.

use crate::error::{Result, WickError};

#[derive(Debug, Clone, PartialEq)]
pub enum MetaValue {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    U64(u64),
    I64(i64),
    F32(f32),
    F64(f64),
    Bool(bool),
    String(String),
    Array(Vec<MetaValue>),
}

impl MetaValue {
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Self::U8(v) => Some(v as u64),
            Self::U16(v) => Some(v as u64),
            Self::U32(v) => Some(v as u64),
            Self::U64(v) => Some(v),
            Self::I8(v) if v >= 0 => Some(v as u64),
            Self::I16(v) if v >= 0 => Some(v as u64),
            Self::I32(v) if v >= 0 => Some(v as u64),
            Self::I64(v) if v >= 0 => Some(v as u64),
            Self::Bool(v) => Some(v as u64),
            _ => None,
        }
    }
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            Self::I8(v) => Some(v as i64),
            Self::I16(v) => Some(v as i64),
            Self::I32(v) => Some(v as i64),
            Self::I64(v) => Some(v),
            _ => self.as_u64().and_then(|v| i64::try_from(v).ok()),
        }
    }
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Self::F32(v) => Some(v as f64),
            Self::F64(v) => Some(v),
            _ => self.as_i64().map(|v| v as f64),
        }
    }
    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            Self::Bool(v) => Some(v),
            _ => self.as_u64().map(|v| v != 0),
        }
    }
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Self::String(s) => Some(s),
            _ => None,
        }
    }
    pub fn as_array(&self) -> Option<&[MetaValue]> {
        match self {
            Self::Array(a) => Some(a),
            _ => None,
        }
    }
}

/// Key → value map of a GGUF header, with accessors that turn a missing or mistyped
/// key into a load error naming the key.
#[derive(Debug, Default, Clone)]
pub struct Metadata {
    pub entries: Vec<(String, MetaValue)>,
}

impl Metadata {
    pub fn get(&self, key: &str) -> Option<&MetaValue> {
        self.entries.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }
    fn typed<T>(&self, key: &str, what: &str, f: impl Fn(&MetaValue) -> Option<T>) -> Result<Option<T>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => {
                f(v).map(Some).ok_or_else(|| WickError::load(format!("metadata key `{key}` is not {what}")))
            }
        }
    }
    fn required<T>(v: Result<Option<T>>, key: &str) -> Result<T> {
        v?.ok_or_else(|| WickError::load(format!("missing metadata key `{key}`")))
    }
    pub fn opt_u64(&self, key: &str) -> Result<Option<u64>> {
        self.typed(key, "an unsigned integer", MetaValue::as_u64)
    }
    pub fn u64(&self, key: &str) -> Result<u64> {
        Self::required(self.opt_u64(key), key)
    }
    pub fn opt_usize(&self, key: &str) -> Result<Option<usize>> {
        Ok(self.opt_u64(key)?.map(|v| v as usize))
    }
    pub fn usize(&self, key: &str) -> Result<usize> {
        Ok(self.u64(key)? as usize)
    }
    pub fn opt_f32(&self, key: &str) -> Result<Option<f32>> {
        self.typed(key, "a number", |v| v.as_f64().map(|x| x as f32))
    }
    pub fn f32(&self, key: &str) -> Result<f32> {
        Self::required(self.opt_f32(key), key)
    }
    pub fn opt_bool(&self, key: &str) -> Result<Option<bool>> {
        self.typed(key, "a boolean", MetaValue::as_bool)
    }
    pub fn opt_str(&self, key: &str) -> Result<Option<&str>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_str()
                .map(Some)
                .ok_or_else(|| WickError::load(format!("metadata key `{key}` is not a string"))),
        }
    }
    pub fn str(&self, key: &str) -> Result<&str> {
        self.opt_str(key)?.ok_or_else(|| WickError::load(format!("missing metadata key `{key}`")))
    }
    pub fn opt_array(&self, key: &str) -> Result<Option<&[MetaValue]>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_array()
                .map(Some)
                .ok_or_else(|| WickError::load(format!("metadata key `{key}` is not an array"))),
        }
    }
    /// A per-layer integer that may be stored as a scalar or as an array (e.g. `head_count_kv`).
    pub fn per_layer_usize(&self, key: &str, n_layer: usize) -> Result<Vec<usize>> {
        match self.get(key) {
            None => Err(WickError::load(format!("missing metadata key `{key}`"))),
            Some(MetaValue::Array(a)) => {
                if a.len() != n_layer {
                    return Err(WickError::load(format!(
                        "metadata key `{key}` has {} entries, expected {n_layer}",
                        a.len()
                    )));
                }
                a.iter()
                    .map(|v| v.as_u64().map(|x| x as usize))
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(|| WickError::load(format!("metadata key `{key}` has non-integer entries")))
            }
            Some(v) => {
                let x = v
                    .as_u64()
                    .ok_or_else(|| WickError::load(format!("metadata key `{key}` is not an integer")))?;
                Ok(vec![x as usize; n_layer])
            }
        }
    }
    pub fn str_array(&self, key: &str) -> Result<Option<Vec<&str>>> {
        match self.opt_array(key)? {
            None => Ok(None),
            Some(a) => a
                .iter()
                .map(|v| v.as_str())
                .collect::<Option<Vec<_>>>()
                .map(Some)
                .ok_or_else(|| WickError::load(format!("metadata key `{key}` has non-string entries"))),
        }
    }
    pub fn f32_array(&self, key: &str) -> Result<Option<Vec<f32>>> {
        match self.opt_array(key)? {
            None => Ok(None),
            Some(a) => a
                .iter()
                .map(|v| v.as_f64().map(|x| x as f32))
                .collect::<Option<Vec<_>>>()
                .map(Some)
                .ok_or_else(|| WickError::load(format!("metadata key `{key}` has non-numeric entries"))),
        }
    }
    pub fn i64_array(&self, key: &str) -> Result<Option<Vec<i64>>> {
        match self.opt_array(key)? {
            None => Ok(None),
            Some(a) => a
                .iter()
                .map(|v| v.as_i64())
                .collect::<Option<Vec<_>>>()
                .map(Some)
                .ok_or_else(|| WickError::load(format!("metadata key `{key}` has non-integer entries"))),
        }
    }
}
