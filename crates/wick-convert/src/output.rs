//! What a conversion reports and where it writes, shared by the model converter (`write`)
//! and the adapter converter (`lora`).

use std::path::{Path, PathBuf};

use crate::error::{ConvertError, Result};
use crate::quant::mix::OutType;
use crate::quant::GgmlType;

/// Where the conversion is, after each tensor.
#[derive(Clone, Debug)]
pub struct Progress {
    pub tensor: String,
    pub tensors_done: usize,
    pub tensors_total: usize,
    pub bytes_written: u64,
    pub bytes_total: u64,
}

/// What was written.
#[derive(Clone, Debug)]
pub struct Report {
    pub outfile: PathBuf,
    pub architecture: String,
    pub outtype: OutType,
    pub tensors: usize,
    pub bytes_written: u64,
    /// Bytes of weights read from the checkpoint.
    pub bytes_read: u64,
    pub seconds: f64,
    /// The largest tensor of the checkpoint, in bytes (the memory bound's unit).
    pub largest_tensor_bytes: u64,
    /// Tensor name → type, in file order.
    pub types: Vec<(String, GgmlType)>,
}

/// The temporary file an output is written to before it is renamed into place: beside it (so
/// the rename stays on one file system), hidden, named by this process.
fn temp_beside(out: &Path) -> Result<PathBuf> {
    let parent = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    if !parent.is_dir() {
        return Err(ConvertError::InvalidArgument(format!("{}: no such directory", parent.display())));
    }
    let file_name =
        out.file_name().ok_or_else(|| ConvertError::InvalidArgument("--outfile needs a file name".into()))?;
    Ok(parent.join(format!(".{}.tmp{}", file_name.to_string_lossy(), std::process::id())))
}

/// Writes `out` through `write` into its temporary file (`temp_beside`) and renames it into
/// place; the temporary file is removed on any failure. Returns what `write` returns.
pub(crate) fn write_then_rename<T>(out: &Path, write: impl FnOnce(&Path) -> Result<T>) -> Result<T> {
    let tmp = temp_beside(out)?;
    let written = match write(&tmp) {
        Ok(v) => v,
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
    };
    if let Err(e) = std::fs::rename(&tmp, out) {
        let _ = std::fs::remove_file(&tmp);
        return Err(ConvertError::io(out, e));
    }
    Ok(written)
}
