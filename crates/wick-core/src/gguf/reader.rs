//! A bounds-checked GGUF (v2/v3) reader over a memory map. Every length read from the
//! file is checked against the bytes that remain before anything is allocated, so a
//! truncated or corrupt file yields a load error, never a panic or an abort.

use super::value::{MetaValue, Metadata};
use crate::error::{Result, WickError};

pub(crate) struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

fn corrupt(msg: impl std::fmt::Display) -> WickError {
    WickError::load(format!("corrupt GGUF file: {msg}"))
}

impl<'a> Cursor<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Self { buf, pos: 0 }
    }
    pub fn pos(&self) -> usize {
        self.pos
    }
    fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return Err(corrupt(format!(
                "unexpected end of file at byte {} (wanted {n} more bytes)",
                self.pos
            )));
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }
    fn arr<const N: usize>(&mut self) -> Result<[u8; N]> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }
    pub fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.arr()?))
    }
    pub fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.arr()?))
    }
    /// A count that must fit in the rest of the file at `min_item` bytes per item.
    fn count(&mut self, min_item: usize, what: &str) -> Result<usize> {
        let n = self.u64()?;
        let max = (self.remaining() / min_item.max(1)) as u64;
        if n > max {
            return Err(corrupt(format!("{what} count {n} does not fit in the file")));
        }
        Ok(n as usize)
    }
    pub fn string(&mut self) -> Result<String> {
        let n = self.count(1, "string length")?;
        let bytes = self.take(n)?;
        // llama.cpp accepts non-UTF-8 vocab entries; keep them lossily rather than failing.
        Ok(String::from_utf8_lossy(bytes).into_owned())
    }
    fn value(&mut self, ty: u32, depth: usize) -> Result<MetaValue> {
        Ok(match ty {
            0 => MetaValue::U8(self.arr::<1>()?[0]),
            1 => MetaValue::I8(self.arr::<1>()?[0] as i8),
            2 => MetaValue::U16(u16::from_le_bytes(self.arr()?)),
            3 => MetaValue::I16(i16::from_le_bytes(self.arr()?)),
            4 => MetaValue::U32(self.u32()?),
            5 => MetaValue::I32(i32::from_le_bytes(self.arr()?)),
            6 => MetaValue::F32(f32::from_le_bytes(self.arr()?)),
            7 => MetaValue::Bool(self.arr::<1>()?[0] != 0),
            8 => MetaValue::String(self.string()?),
            9 => {
                if depth > 2 {
                    return Err(corrupt("arrays nested too deeply"));
                }
                let elem = self.u32()?;
                let n = self.count(1, "array")?;
                let mut v = Vec::with_capacity(n);
                for _ in 0..n {
                    v.push(self.value(elem, depth + 1)?);
                }
                MetaValue::Array(v)
            }
            10 => MetaValue::U64(self.u64()?),
            11 => MetaValue::I64(i64::from_le_bytes(self.arr()?)),
            12 => MetaValue::F64(f64::from_le_bytes(self.arr()?)),
            t => return Err(corrupt(format!("unknown metadata value type {t}"))),
        })
    }
}

pub(crate) struct RawTensorInfo {
    pub name: String,
    pub dims: Vec<usize>,
    pub ggml_type: u32,
    pub offset: u64,
}

pub(crate) struct Header {
    pub version: u32,
    pub metadata: Metadata,
    pub tensors: Vec<RawTensorInfo>,
    pub data_offset: usize,
}

const MAGIC: &[u8; 4] = b"GGUF";

pub(crate) fn read_header(buf: &[u8]) -> Result<Header> {
    let mut c = Cursor::new(buf);
    let magic = c.take(4).map_err(|_| WickError::load("file is too small to be a GGUF model"))?;
    if magic != MAGIC {
        return Err(WickError::load(format!(
            "not a GGUF file (magic bytes {:02x?}, expected \"GGUF\")",
            magic
        )));
    }
    let version = c.u32()?;
    if !(2..=3).contains(&version) {
        return Err(WickError::load(format!("unsupported GGUF version {version} (2 and 3 are supported)")));
    }
    let n_tensors = c.count(24, "tensor")?;
    let n_kv = c.count(12, "metadata")?;
    let mut metadata = Metadata::default();
    for _ in 0..n_kv {
        let key = c.string()?;
        let ty = c.u32()?;
        let value = c.value(ty, 0)?;
        metadata.entries.push((key, value));
    }
    let mut tensors = Vec::with_capacity(n_tensors);
    for _ in 0..n_tensors {
        let name = c.string()?;
        let n_dims = c.u32()? as usize;
        if n_dims == 0 || n_dims > 4 {
            return Err(corrupt(format!("tensor `{name}` has {n_dims} dimensions")));
        }
        let mut dims = Vec::with_capacity(n_dims);
        for _ in 0..n_dims {
            let d = c.u64()?;
            if d == 0 || d > (1 << 40) {
                return Err(corrupt(format!("tensor `{name}` has dimension {d}")));
            }
            dims.push(d as usize);
        }
        let ggml_type = c.u32()?;
        let offset = c.u64()?;
        tensors.push(RawTensorInfo { name, dims, ggml_type, offset });
    }
    let alignment = metadata.opt_u64("general.alignment")?.unwrap_or(32) as usize;
    if alignment == 0 || !alignment.is_power_of_two() || alignment > 1 << 20 {
        return Err(corrupt(format!("general.alignment {alignment} is not a power of two")));
    }
    let data_offset = c.pos().div_ceil(alignment) * alignment;
    Ok(Header { version, metadata, tensors, data_offset })
}
