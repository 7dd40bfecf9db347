//! GGUF model files: metadata, tensor directory, and quantized tensors read from a memory map.

pub mod info;
mod reader;
mod value;

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use candle_core::quantized::{GgmlDType, QStorage, QTensor};
use candle_core::Device;

use crate::error::{Result, WickError};
pub use value::{MetaValue, Metadata};

/// A tensor's entry in the file: ggml dims (fastest-varying first) and where its bytes lie.
#[derive(Debug, Clone)]
pub struct TensorInfo {
    pub name: String,
    pub dims: Vec<usize>,
    pub dtype: GgmlDType,
    /// Absolute byte offset of the data in the file.
    pub start: usize,
    pub size: usize,
}

impl TensorInfo {
    /// Shape in candle order (slowest-varying first), the reverse of ggml's.
    pub fn shape(&self) -> Vec<usize> {
        self.dims.iter().rev().copied().collect()
    }
    pub fn elem_count(&self) -> usize {
        self.dims.iter().product()
    }
}

pub fn ggml_dtype(id: u32) -> Option<GgmlDType> {
    Some(match id {
        0 => GgmlDType::F32,
        1 => GgmlDType::F16,
        2 => GgmlDType::Q4_0,
        3 => GgmlDType::Q4_1,
        6 => GgmlDType::Q5_0,
        7 => GgmlDType::Q5_1,
        8 => GgmlDType::Q8_0,
        10 => GgmlDType::Q2K,
        11 => GgmlDType::Q3K,
        12 => GgmlDType::Q4K,
        13 => GgmlDType::Q5K,
        14 => GgmlDType::Q6K,
        30 => GgmlDType::BF16,
        _ => return None,
    })
}

/// An open GGUF file. Weights are read straight from the map into tensors at load; the map
/// is dropped with this value, so the process keeps one copy of the weights.
pub struct GgufFile {
    pub path: PathBuf,
    pub version: u32,
    pub metadata: Metadata,
    pub tensors: Vec<TensorInfo>,
    index: HashMap<String, usize>,
    map: memmap2::Mmap,
    /// Where the tensor data begins (the header, metadata and tensor directory lie before).
    data_offset: usize,
}

impl GgufFile {
    pub fn tensor_count(&self) -> usize {
        self.tensors.len()
    }

    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let file = std::fs::File::open(&path)
            .map_err(|e| WickError::load(format!("cannot open {}: {e}", path.display())))?;
        // SAFETY: the map is read-only; a file truncated underneath us is the usual mmap caveat.
        let map = unsafe { memmap2::Mmap::map(&file) }
            .map_err(|e| WickError::load(format!("cannot map {}: {e}", path.display())))?;
        let header = reader::read_header(&map)?;
        let data_offset = header.data_offset;
        let file_len = map.len();
        let mut tensors = Vec::with_capacity(header.tensors.len());
        let mut index = HashMap::with_capacity(header.tensors.len());
        for raw in header.tensors {
            let dtype = ggml_dtype(raw.ggml_type).ok_or_else(|| {
                WickError::load(format!("tensor `{}` has unsupported ggml type {}", raw.name, raw.ggml_type))
            })?;
            let (bs, ts) = (dtype.block_size(), dtype.type_size());
            let elems = raw
                .dims
                .iter()
                .try_fold(1usize, |a, &d| a.checked_mul(d))
                .ok_or_else(|| WickError::load(format!("tensor `{}` is too large", raw.name)))?;
            if raw.dims[0] % bs != 0 {
                return Err(WickError::load(format!(
                    "tensor `{}`: row length {} is not a multiple of the {:?} block size {bs}",
                    raw.name, raw.dims[0], dtype
                )));
            }
            let size = elems / bs * ts;
            let start = (header.data_offset as u64)
                .checked_add(raw.offset)
                .filter(|s| s.checked_add(size as u64).is_some_and(|e| e <= file_len as u64))
                .ok_or_else(|| {
                    WickError::load(format!(
                        "tensor `{}` data (offset {}, {size} bytes) lies past the end of the file ({file_len} bytes); the file is truncated or corrupt",
                        raw.name, raw.offset
                    ))
                })? as usize;
            if !start.is_multiple_of(4) {
                return Err(WickError::load(format!("tensor `{}` data is misaligned", raw.name)));
            }
            if index.insert(raw.name.clone(), tensors.len()).is_some() {
                return Err(WickError::load(format!("tensor `{}` appears twice", raw.name)));
            }
            tensors.push(TensorInfo { name: raw.name, dims: raw.dims, dtype, start, size });
        }
        Ok(Self {
            path,
            version: header.version,
            metadata: header.metadata,
            tensors,
            index,
            map,
            data_offset,
        })
    }

    /// A digest that changes when the file does, cheap enough for every load (what the pack
    /// cache is keyed by): the size and modification time, the whole header with its metadata
    /// and tensor directory, and 64 samples of 4 KiB spread over the tensor data. Hashing a
    /// multi-gigabyte file whole would cost more than the load it saves.
    pub fn fingerprint(&self) -> [u8; 32] {
        use sha2::{Digest, Sha256};
        let mut h = Sha256::new();
        h.update(b"gguf-fingerprint-1");
        h.update((self.map.len() as u64).to_le_bytes());
        let modified = std::fs::metadata(&self.path).and_then(|m| m.modified()).ok();
        let since = modified.and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok()).unwrap_or_default();
        h.update(since.as_nanos().to_le_bytes());
        let header_end = self.data_offset.min(self.map.len());
        h.update(&self.map[..header_end]);
        const SAMPLES: usize = 64;
        const SAMPLE: usize = 4096;
        let data = &self.map[header_end..];
        for i in 0..SAMPLES {
            let at = (data.len().saturating_sub(SAMPLE)) * i / (SAMPLES - 1);
            h.update(&data[at..(at + SAMPLE).min(data.len())]);
        }
        h.finalize().into()
    }

    pub fn file_size(&self) -> usize {
        self.map.len()
    }

    /// Sum of all tensor element counts.
    pub fn param_count(&self) -> u64 {
        self.tensors.iter().map(|t| t.elem_count() as u64).sum()
    }

    pub fn architecture(&self) -> Result<&str> {
        self.metadata.str("general.architecture")
    }

    /// `{arch}.block_count`, when the file says (unchecked: the model loader checks it).
    pub fn block_count(&self) -> Result<Option<usize>> {
        self.metadata.opt_usize(&format!("{}.block_count", self.architecture()?))
    }

    pub fn info(&self, name: &str) -> Option<&TensorInfo> {
        self.index.get(name).map(|&i| &self.tensors[i])
    }

    pub fn has(&self, name: &str) -> bool {
        self.index.contains_key(name)
    }

    fn require(&self, name: &str) -> Result<&TensorInfo> {
        self.info(name).ok_or_else(|| WickError::load(format!("missing tensor `{name}`")))
    }

    pub fn bytes(&self, name: &str) -> Result<&[u8]> {
        let t = self.require(name)?;
        Ok(&self.map[t.start..t.start + t.size])
    }

    /// The tensor as a (possibly quantized) candle QTensor on `device`.
    pub fn qtensor(&self, name: &str, device: &Device) -> Result<QTensor> {
        let t = self.require(name)?;
        let data = &self.map[t.start..t.start + t.size];
        let storage = QStorage::from_data(Cow::Borrowed(data), device, t.dtype)?;
        Ok(QTensor::new(storage, t.shape())?)
    }

    /// The tensor dequantized to f32, for small tensors (norms, conv kernels, biases).
    pub fn f32_tensor(&self, name: &str, device: &Device) -> Result<candle_core::Tensor> {
        Ok(self.qtensor(name, device)?.dequantize(device)?)
    }

    /// Checks a tensor's ggml dims, so a malformed file fails at load with the tensor's name.
    pub fn expect_dims(&self, name: &str, dims: &[usize]) -> Result<&TensorInfo> {
        let t = self.require(name)?;
        if t.dims != dims {
            return Err(WickError::load(format!(
                "tensor `{name}` has dims {:?}, expected {:?}",
                t.dims, dims
            )));
        }
        Ok(t)
    }
}
