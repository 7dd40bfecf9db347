//! The converter as a plain binary (benchmarks, memory measurements, scripts without Node):
//!
//!   wick-convert <model_dir> --outfile <f.gguf> [--outtype q4_k_m] [--threads N] [--json]
//!   wick-convert <peft_adapter_dir> --outfile <f.gguf> [--base <model.gguf|hf_dir>] [--outtype f32]
//!
//! A directory with `adapter_config.json` is a PEFT LoRA adapter: it becomes a GGUF adapter
//! (default type f32, as llama.cpp's convert_lora_to_gguf.py), checked against `--base` (or
//! the adapter's `base_model_name_or_path` when that is a local path).
//!
//! Progress goes to stderr; the last line on stdout is a summary (JSON with --json) that
//! includes the process's peak resident set (VmHWM), for the memory bound's check.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use wick_convert::{convert, convert_lora, is_peft_dir, ConvertOptions, LoraOptions, OutType};

fn usage(err: &str) -> ExitCode {
    if !err.is_empty() {
        eprintln!("wick-convert: {err}");
    }
    let types: Vec<&str> = OutType::ALL.iter().map(|t| t.name()).collect();
    eprintln!(
        "usage: wick-convert <model_dir> --outfile <f.gguf> [--outtype {}] [--threads N] [--json]",
        types.join("|")
    );
    eprintln!("       wick-convert <peft_adapter_dir> --outfile <f.gguf> [--base <model.gguf|hf_dir>] [--outtype f32|f16|bf16|q8_0]");
    if err.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(2)
    }
}

/// Peak resident set size in bytes, from /proc/self/status (Linux).
fn peak_rss() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse::<u64>().ok().map(|kb| kb * 1024)
}

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let (mut input, mut outfile, mut outtype, mut threads, mut json) = (None, None, None, None, false);
    let mut base = None;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--outfile" => outfile = args.next().map(PathBuf::from),
            "--outtype" => match args.next().as_deref().and_then(OutType::parse) {
                Some(t) => outtype = Some(t),
                None => return usage("--outtype needs one of the listed types"),
            },
            "--threads" => match args.next().and_then(|n| n.parse().ok()) {
                Some(n) => threads = Some(n),
                None => return usage("--threads needs a number"),
            },
            "--json" => json = true,
            "--base" => base = args.next().map(PathBuf::from),
            "-h" | "--help" => return usage(""),
            _ if input.is_none() && !a.starts_with('-') => input = Some(PathBuf::from(a)),
            _ => return usage(&format!("unexpected argument `{a}`")),
        }
    }
    let (Some(input), Some(outfile)) = (input, outfile) else {
        return usage("needs <model_dir> and --outfile");
    };
    let start = Instant::now();
    let mut last = 0u64;
    let show = |p: &wick_convert::Progress| {
        let pct = p.bytes_written * 100 / p.bytes_total.max(1);
        if pct != last || p.tensors_done == p.tensors_total {
            last = pct;
            eprint!("\r[{pct:3}%] {}/{} {:<40}", p.tensors_done, p.tensors_total, p.tensor);
        }
    };
    let result = if is_peft_dir(&input) {
        let outtype = outtype.unwrap_or(OutType::F32);
        convert_lora(&LoraOptions { input, outfile, base, outtype, cancel: None }, show)
    } else if base.is_some() {
        return usage("--base is for PEFT adapter directories (with adapter_config.json)");
    } else {
        let outtype = outtype.unwrap_or(OutType::F16);
        convert(&ConvertOptions { input, outfile, outtype, threads, cancel: None }, show)
    };
    eprintln!();
    match result {
        Ok(r) => {
            let secs = start.elapsed().as_secs_f64();
            let mbps = r.bytes_read as f64 / 1e6 / secs;
            let rss = peak_rss().unwrap_or(0);
            if json {
                println!(
                    "{{\"outfile\":{:?},\"architecture\":\"{}\",\"outtype\":\"{}\",\"tensors\":{},\"bytes_read\":{},\"bytes_written\":{},\"seconds\":{:.3},\"mb_per_s\":{:.1},\"peak_rss\":{},\"largest_tensor_bytes\":{}}}",
                    r.outfile.display().to_string(),
                    r.architecture,
                    r.outtype.name(),
                    r.tensors,
                    r.bytes_read,
                    r.bytes_written,
                    secs,
                    mbps,
                    rss,
                    r.largest_tensor_bytes
                );
            } else {
                println!(
                    "wrote {} ({} {}, {} tensors, {:.1} MB) in {:.2}s: {:.0} MB/s read, peak RSS {:.1} MiB",
                    r.outfile.display(),
                    r.architecture,
                    r.outtype.name(),
                    r.tensors,
                    r.bytes_written as f64 / 1e6,
                    secs,
                    mbps,
                    rss as f64 / (1 << 20) as f64
                );
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("wick-convert: {e}");
            ExitCode::FAILURE
        }
    }
}
