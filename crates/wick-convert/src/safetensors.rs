//! A Hugging Face checkpoint's weights: one or more mmapped safetensors files (sharded via
//! `model.safetensors.index.json`), read tensor by tensor as f32 rows. Pages are dropped from
//! the process once a tensor is done, so memory stays near one tensor however large the model.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use half::bf16;
use memmap2::{Mmap, UncheckedAdvice};

use crate::error::{ConvertError, Result};

/// Element types a checkpoint may hold. Only the float ones can be converted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dtype {
    F32,
    F16,
    Bf16,
    /// Anything else (integers, bool, fp8, f64): named for the error message.
    Other(&'static str, usize),
}

impl Dtype {
    fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "F32" => Self::F32,
            "F16" => Self::F16,
            "BF16" => Self::Bf16,
            "F64" => Self::Other("F64", 8),
            "I64" => Self::Other("I64", 8),
            "U64" => Self::Other("U64", 8),
            "I32" => Self::Other("I32", 4),
            "U32" => Self::Other("U32", 4),
            "I16" => Self::Other("I16", 2),
            "U16" => Self::Other("U16", 2),
            "I8" => Self::Other("I8", 1),
            "U8" => Self::Other("U8", 1),
            "BOOL" => Self::Other("BOOL", 1),
            "F8_E4M3" => Self::Other("F8_E4M3", 1),
            "F8_E5M2" => Self::Other("F8_E5M2", 1),
            _ => return None,
        })
    }

    pub fn size(self) -> usize {
        match self {
            Self::F32 => 4,
            Self::F16 | Self::Bf16 => 2,
            Self::Other(_, n) => n,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::F32 => "F32",
            Self::F16 => "F16",
            Self::Bf16 => "BF16",
            Self::Other(n, _) => n,
        }
    }
}

/// One tensor of the checkpoint: where its bytes are.
#[derive(Clone, Debug)]
pub struct SrcTensor {
    pub name: String,
    pub dtype: Dtype,
    /// PyTorch order (outermost first).
    pub shape: Vec<usize>,
    shard: usize,
    /// Byte range in the shard's mmap.
    start: usize,
    end: usize,
}

impl SrcTensor {
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
}

struct Shard {
    path: PathBuf,
    map: Mmap,
}

/// All tensors of a checkpoint directory, by name.
pub struct Checkpoint {
    shards: Vec<Shard>,
    pub tensors: BTreeMap<String, SrcTensor>,
}

impl Checkpoint {
    /// Opens `dir`'s safetensors: the shards `model.safetensors.index.json` names, else
    /// every `*.safetensors` file in the directory.
    pub fn open(dir: &Path) -> Result<Self> {
        let files = shard_files(dir)?;
        let mut ck = Checkpoint { shards: vec![], tensors: BTreeMap::new() };
        for path in files {
            let file = File::open(&path).map_err(|e| ConvertError::io(&path, e))?;
            // SAFETY: read-only map; the file is not ours to change, and a file truncated
            // under us is outside what any mmap reader can guard against.
            let map = unsafe { Mmap::map(&file) }.map_err(|e| ConvertError::io(&path, e))?;
            let idx = ck.shards.len();
            for t in parse_header(&path, &map, idx)? {
                if ck.tensors.contains_key(&t.name) {
                    return Err(ConvertError::tensor(format!(
                        "tensor `{}` is in more than one shard",
                        t.name
                    )));
                }
                ck.tensors.insert(t.name.clone(), t);
            }
            ck.shards.push(Shard { path, map });
        }
        Ok(ck)
    }

    pub fn get(&self, name: &str) -> Option<&SrcTensor> {
        self.tensors.get(name)
    }

    /// The shard a tensor lives in, for messages.
    pub fn path_of(&self, t: &SrcTensor) -> &Path {
        &self.shards[t.shard].path
    }

    /// Reads `out.len()` consecutive elements of `t` starting at element `first`, as f32.
    pub fn read_f32(&self, t: &SrcTensor, first: usize, out: &mut [f32]) -> Result<()> {
        let size = t.dtype.size();
        let bytes = &self.shards[t.shard].map[t.start + first * size..t.start + (first + out.len()) * size];
        match t.dtype {
            Dtype::F32 => {
                for (o, b) in out.iter_mut().zip(bytes.chunks_exact(4)) {
                    *o = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                }
            }
            Dtype::F16 => crate::quant::f16c::decode(bytes, out),
            Dtype::Bf16 => {
                for (o, b) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                    *o = bf16::from_le_bytes([b[0], b[1]]).to_f32();
                }
            }
            Dtype::Other(d, _) => return Err(ConvertError::Dtype { name: t.name.clone(), dtype: d.into() }),
        }
        Ok(())
    }

    /// Drops `t`'s pages from this process (they stay in the page cache): a mapped file's
    /// pages count in the resident set until then.
    pub fn release(&self, t: &SrcTensor) {
        let map = &self.shards[t.shard].map;
        if t.end > t.start {
            // SAFETY: a read-only shared file mapping; dropped pages are read again from the
            // file if touched, so no data is lost.
            let _ =
                unsafe { map.unchecked_advise_range(UncheckedAdvice::DontNeed, t.start, t.end - t.start) };
        }
    }
}

/// The shard files of `dir`, in order.
fn shard_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let index = dir.join("model.safetensors.index.json");
    if index.is_file() {
        let v = crate::config::read_json(&index)?;
        let map = v.get("weight_map").and_then(|m| m.as_object()).ok_or_else(|| ConvertError::Json {
            path: index.clone(),
            why: "no `weight_map` object".into(),
        })?;
        let mut files: Vec<String> = map.values().filter_map(|f| f.as_str().map(String::from)).collect();
        files.sort();
        files.dedup();
        let mut out = vec![];
        for f in files {
            let p = dir.join(&f);
            if !p.is_file() {
                return Err(ConvertError::Missing {
                    path: p,
                    what: "a shard named in model.safetensors.index.json",
                });
            }
            out.push(p);
        }
        return Ok(out);
    }
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| ConvertError::io(dir, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
        .collect();
    out.sort();
    if out.is_empty() {
        return Err(ConvertError::Missing {
            path: dir.join("model.safetensors"),
            what: "no *.safetensors weights in the directory",
        });
    }
    Ok(out)
}

/// Parses and checks a safetensors header: 8-byte length, JSON, every tensor's byte range
/// inside the file and as long as its shape and dtype say.
fn parse_header(path: &Path, buf: &[u8], shard: usize) -> Result<Vec<SrcTensor>> {
    let bad = |why: String| ConvertError::Safetensors { path: path.to_path_buf(), why };
    if buf.len() < 8 {
        return Err(bad(format!("{} bytes, shorter than the 8-byte header length", buf.len())));
    }
    let n = u64::from_le_bytes(buf[..8].try_into().expect("8 bytes")) as usize;
    if n > buf.len() - 8 {
        return Err(bad(format!("header of {n} bytes, but the file has {} (truncated?)", buf.len())));
    }
    let header: serde_json::Value =
        serde_json::from_slice(&buf[8..8 + n]).map_err(|e| bad(format!("header is not JSON: {e}")))?;
    let obj = header.as_object().ok_or_else(|| bad("header is not a JSON object".into()))?;
    let data = 8 + n;
    let data_len = buf.len() - data;
    let mut out = vec![];
    for (name, v) in obj {
        if name == "__metadata__" {
            continue;
        }
        let dtype = v.get("dtype").and_then(|d| d.as_str()).unwrap_or("?");
        let dtype =
            Dtype::parse(dtype).ok_or_else(|| bad(format!("tensor `{name}`: unknown dtype {dtype}")))?;
        let shape: Vec<usize> = v
            .get("shape")
            .and_then(|s| s.as_array())
            .and_then(|a| a.iter().map(|x| x.as_u64().map(|n| n as usize)).collect())
            .ok_or_else(|| bad(format!("tensor `{name}`: no shape")))?;
        let offs: Vec<usize> = v
            .get("data_offsets")
            .and_then(|s| s.as_array())
            .and_then(|a| a.iter().map(|x| x.as_u64().map(|n| n as usize)).collect())
            .filter(|o: &Vec<usize>| o.len() == 2)
            .ok_or_else(|| bad(format!("tensor `{name}`: no data_offsets")))?;
        let (b, e) = (offs[0], offs[1]);
        let want = shape.iter().product::<usize>() * dtype.size();
        if e < b || e - b != want {
            return Err(bad(format!(
                "tensor `{name}`: {} data bytes for shape {shape:?} {}",
                e.saturating_sub(b),
                dtype.name()
            )));
        }
        if e > data_len {
            return Err(bad(format!(
                "tensor `{name}` ends at byte {e} of a {data_len}-byte data section (truncated)"
            )));
        }
        out.push(SrcTensor { name: name.clone(), dtype, shape, shard, start: data + b, end: data + e });
    }
    Ok(out)
}
