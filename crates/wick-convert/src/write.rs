//! The conversion pipeline: read and check everything (config, weights' headers, tokenizer,
//! tensor plan, types), write the GGUF header, then stream each tensor — a slab of rows at
//! a time, quantized on all cores — into a temporary file beside the output, renamed into
//! place at the end. Any error (or a cancel) removes the temporary file.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use rayon::prelude::*;

use crate::arch::{self, params, Arch, Planned, Source};
use crate::config::HfConfig;
use crate::error::{ConvertError, Result};
use crate::gguf::{self, TensorEntry, Value};
use crate::meta::{self, ParamCount};
use crate::output::{Progress, Report};
use crate::quant::mix::{self, ModelShape, OutType, TensorRef};
use crate::quant::GgmlType;
use crate::rows;
use crate::safetensors::{Checkpoint, Dtype};
use crate::vocab;

/// f32 values per slab: the unit read, converted and written at once (8 MiB of f32).
const SLAB_VALUES: usize = 2 << 20;

pub struct ConvertOptions {
    pub input: PathBuf,
    pub outfile: PathBuf,
    pub outtype: OutType,
    /// Worker threads for quantizing (default: rayon's, one per core).
    pub threads: Option<usize>,
    /// Set to stop early; the partial output is removed.
    pub cancel: Option<std::sync::Arc<AtomicBool>>,
}

/// Everything decided before writing: the header and each tensor's type and source.
pub struct Prepared {
    pub arch: Arch,
    pub kv: Vec<(String, Value)>,
    pub plan: Vec<Planned>,
    pub entries: Vec<TensorEntry>,
    /// The stage-1 (float file) type of each tensor: the values' precision before quantizing.
    pub base: Vec<GgmlType>,
    ck: Checkpoint,
}

/// Reads and checks `dir` for `outtype` without writing anything.
pub fn inspect(dir: &Path, outtype: OutType) -> Result<Prepared> {
    if !dir.is_dir() {
        return Err(ConvertError::Missing { path: dir.to_path_buf(), what: "the model directory" });
    }
    let cfg = HfConfig::open(dir)?;
    let arch = Arch::from_hf(cfg.hf_arch()?)?;
    let ck = Checkpoint::open(dir)?;
    let hp = params::hparams(arch, &cfg, outtype.file_type())?;
    let (tok_kv, n_tokens) = vocab::tokenizer_keys(dir, arch, &cfg)?;
    if n_tokens != hp.dims.n_vocab && arch != Arch::Gemma3 {
        return Err(ConvertError::tokenizer(format!(
            "{n_tokens} tokens, but config.json's vocab_size is {}",
            hp.dims.n_vocab
        )));
    }
    let mut plan = arch::plan(arch, &cfg, &ck, &hp.dims, n_tokens)?;
    if let Some(f) = hp.rope_freqs {
        plan.insert(
            0,
            Planned {
                name: "rope_freqs.weight".into(),
                ne: vec![f.len()],
                n_dims: 1,
                src: Source::Values(f),
            },
        );
        plan.sort_by_key(|p| p.sort_key());
    }
    for p in &plan {
        let names: Vec<&String> = match &p.src {
            Source::Tensor { hf, .. } => vec![hf],
            Source::Stack(n) => n.iter().collect(),
            Source::Values(_) => vec![],
        };
        for n in names {
            let t = &ck.tensors[n];
            if let Dtype::Other(d, _) = t.dtype {
                return Err(ConvertError::Dtype { name: n.clone(), dtype: d.into() });
            }
        }
    }
    let float = outtype.float_type().unwrap_or_else(|| auto_type(&ck));
    let base: Vec<GgmlType> =
        plan.iter().map(|p| if mix::stays_f32(&p.name, p.n_dims) { GgmlType::F32 } else { float }).collect();
    let types = match outtype.float_type() {
        Some(_) => base.clone(),
        None => {
            let shape = ModelShape {
                arch: arch.name().into(),
                n_layer: hp.dims.n_layer,
                n_expert: hp.n_expert,
                is_70b: arch == Arch::Llama && hp.dims.n_layer == 80 && hp.dims.n_kv[0] != hp.dims.n_head,
            };
            let refs: Vec<TensorRef> = plan
                .iter()
                .zip(&base)
                .map(|(p, &b)| TensorRef { name: &p.name, ne: &p.ne, base: b })
                .collect();
            mix::quantized_types(outtype, &shape, &refs)
        }
    };
    let entries: Vec<TensorEntry> = plan
        .iter()
        .zip(&types)
        .map(|(p, &ty)| TensorEntry { name: p.name.clone(), ne: p.ne.clone(), ty })
        .collect();
    for e in &entries {
        if e.ne[0] % e.ty.block_size() != 0 {
            return Err(ConvertError::tensor(format!(
                "`{}`: rows of {} do not fit {}",
                e.name,
                e.ne[0],
                e.ty.name()
            )));
        }
    }
    let params = ParamCount::of(plan.iter().map(|p| (p.name.as_str(), p.ne.as_slice())));
    let mut kv = vec![
        ("general.architecture".to_string(), Value::Str(arch.name().into())),
        ("general.type".to_string(), Value::Str("model".into())),
    ];
    kv.extend(meta::general_keys(dir, &cfg, &params)?);
    kv.extend(hp.kv);
    kv.push(("general.quantization_version".into(), Value::U32(2)));
    kv.extend(tok_kv);
    Ok(Prepared { arch, kv, plan, entries, base, ck })
}

/// The converter's `--outtype auto`: BF16 if the first matrix is bf16, else F16.
fn auto_type(ck: &Checkpoint) -> GgmlType {
    match ck.tensors.values().find(|t| t.shape.len() >= 2).map(|t| t.dtype) {
        Some(Dtype::Bf16) => GgmlType::Bf16,
        _ => GgmlType::F16,
    }
}

/// Converts `opts.input` into `opts.outfile`, calling `progress` after each tensor. A PEFT
/// adapter directory (`adapter_config.json`) becomes a GGUF adapter (`lora::convert_lora`,
/// the base model from its `base_model_name_or_path`).
pub fn convert(opts: &ConvertOptions, mut progress: impl FnMut(&Progress)) -> Result<Report> {
    if crate::lora::is_peft_dir(&opts.input) {
        let lora = crate::lora::LoraOptions {
            input: opts.input.clone(),
            outfile: opts.outfile.clone(),
            base: None,
            outtype: opts.outtype,
            cancel: opts.cancel.clone(),
        };
        return crate::lora::convert_lora(&lora, progress);
    }
    let start = Instant::now();
    let prep = inspect(&opts.input, opts.outtype)?;
    let out = &opts.outfile;
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(opts.threads.unwrap_or(0))
        .build()
        .map_err(|e| ConvertError::InvalidArgument(format!("threads: {e}")))?;
    let bytes_written = crate::output::write_then_rename(out, |tmp| {
        write_file(&prep, tmp, &pool, opts.cancel.as_deref(), &mut progress)
    })?;
    let bytes_read: u64 = prep.ck.tensors.values().map(|t| (t.numel() * t.dtype.size()) as u64).sum();
    let largest = prep.ck.tensors.values().map(|t| (t.numel() * t.dtype.size()) as u64).max().unwrap_or(0);
    Ok(Report {
        outfile: out.clone(),
        architecture: prep.arch.name().into(),
        outtype: opts.outtype,
        tensors: prep.entries.len(),
        bytes_written,
        bytes_read,
        seconds: start.elapsed().as_secs_f64(),
        largest_tensor_bytes: largest,
        types: prep.entries.iter().map(|e| (e.name.clone(), e.ty)).collect(),
    })
}

fn write_file(
    prep: &Prepared,
    tmp: &Path,
    pool: &rayon::ThreadPool,
    cancel: Option<&AtomicBool>,
    progress: &mut dyn FnMut(&Progress),
) -> Result<u64> {
    let io = |e| ConvertError::io(tmp, e);
    let header = gguf::header(&prep.kv, &prep.entries);
    let total = gguf::file_size(header.len(), &prep.entries);
    let file = File::create(tmp).map_err(io)?;
    let mut w = BufWriter::with_capacity(8 << 20, file);
    w.write_all(&header).map_err(io)?;
    let mut written = header.len() as u64;
    let mut buf_f32: Vec<f32> = vec![];
    let mut buf_out: Vec<u8> = vec![];
    for (i, ((p, e), &base)) in prep.plan.iter().zip(&prep.entries).zip(&prep.base).enumerate() {
        if cancel.is_some_and(|c| c.load(Ordering::Relaxed)) {
            return Err(ConvertError::Cancelled);
        }
        let row = e.ne[0];
        let n_rows = e.n_elements() / row;
        let rows_per_slab = (SLAB_VALUES / row).max(1);
        let mut r0 = 0;
        while r0 < n_rows {
            let nr = rows_per_slab.min(n_rows - r0);
            buf_f32.resize(nr * row, 0.0);
            buf_out.resize(nr * e.ty.row_bytes(row), 0);
            pool.install(|| encode_slab(prep, p, e.ty, base, r0 * row, row, &mut buf_f32, &mut buf_out))?;
            w.write_all(&buf_out).map_err(io)?;
            r0 += nr;
        }
        rows::release(&prep.ck, p);
        let n = e.n_bytes();
        gguf::write_padding(&mut w, n).map_err(io)?;
        written += n.div_ceil(gguf::ALIGNMENT) as u64 * gguf::ALIGNMENT as u64;
        progress(&Progress {
            tensor: e.name.clone(),
            tensors_done: i + 1,
            tensors_total: prep.entries.len(),
            bytes_written: written,
            bytes_total: total,
        });
    }
    let file = w.into_inner().map_err(|e| io(e.into_error()))?;
    file.sync_all().map_err(io)?;
    Ok(written)
}

/// Fills `x` with the values from element `first` on and encodes them into `out`, split
/// over the pool's threads by whole rows.
#[allow(clippy::too_many_arguments)]
fn encode_slab(
    prep: &Prepared,
    p: &Planned,
    ty: GgmlType,
    base: GgmlType,
    first: usize,
    row: usize,
    x: &mut [f32],
    out: &mut [u8],
) -> Result<()> {
    let n_rows = x.len() / row;
    let threads = rayon::current_num_threads().max(1);
    // At least 16k values per task: below that, scheduling costs more than it saves.
    let rows_per_task = n_rows.div_ceil(threads).max((16 << 10) / row).max(1);
    let row_bytes = ty.row_bytes(row);
    x.par_chunks_mut(rows_per_task * row)
        .zip(out.par_chunks_mut(rows_per_task * row_bytes))
        .enumerate()
        .try_for_each(|(k, (xs, os))| -> Result<()> {
            rows::fill(&prep.ck, p, first + k * rows_per_task * row, xs)?;
            if ty != base {
                // Quantize what the float file would hold (llama-quantize reads that file).
                base.round_trip(xs);
            }
            ty.encode(xs, os);
            Ok(())
        })
}
