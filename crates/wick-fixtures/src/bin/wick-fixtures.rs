//! Writes Wick's test fixtures: tiny random-weight GGUF models (llama, lfm2 in Q8_0, Q4_0,
//! F16, Q4_K) with tokenizers copied from llama.cpp's vocab-only GGUFs, LFM2 tool-calling
//! models (random and scripted, with a built LFM2 vocabulary and chat template), LFM2-VL
//! projectors (`mmproj-*.gguf`) with their text model, embedding / ColBERT / rerank models
//! (`tiny-lfm2-embed`, `tiny-lfm2-colbert`, `tiny-qwen3-rerank`), LoRA adapters for tiny-llama
//! and tiny-lfm2 (`lora-*.gguf`, llama.cpp's GGUF adapter format), plus broken files for
//! load-failure tests.
//!
//! Usage: wick-fixtures <out_dir> [--llama-src <dir>] [--bad] [--quant-sources] [--bench] [--bench-embed] [--bench-lora] [--bench-lfm2] [--bench-real] [--gpu-check] [--hf] [--hf-bench]
//!   --llama-src      llama.cpp source tree holding models/ggml-vocab-*.gguf and
//!                    models/templates/LFM2-8B-A1B.jinja
//!                    (default <repo>/.cache/llama.cpp, see scripts/llama-src.sh)
//!   --bad            also write the broken files (bad-*.gguf, bad-lora-*.gguf)
//!   --quant-sources  instead of the standard set: F32 llama/lfm2 sources for llama-quantize
//!   --bench          instead of the standard set: benchmark-sized LFM2 / lfm2moe models,
//!                    LFM2-VL-450M-shaped projectors and an LFM2.5-Embedding-shaped model
//!   --bench-embed    instead of the standard set: only that embedding model (benches/embeddings.ts)
//!   --bench-lora     instead of the standard set: only the four LFM2-350M-shaped LoRA adapters
//!                    (benches/lora.ts; also written by --bench)
//!   --bench-lfm2     instead of the standard set: the LFM2 benchmark shapes with llama-bpe's
//!                    128k vocabulary and a 32k training context (bench_lfm2_specs)
//!   --bench-real     instead of the standard set: LFM2.5-1.2B and LFM2-8B-A1B at full size
//!                    (bench_real_specs; benches/compare.ts files --real makes the Q4_K_M ones)
//!   --hf             instead of the standard set: synthetic Hugging Face checkpoints (one
//!                    directory each, hf-<arch>[-k]) for `wick convert`, and PEFT LoRA
//!                    adapters for hf-llama and hf-lfm2 (hf-<arch>-lora)
//!   --gpu-check      instead of the standard set: the GPU check's LFM2-1.2B-shaped model in
//!                    Q8_0 and F16 (gpu_check_specs, scripts/gpu-check.sh)
//!   --hf-bench       instead of the standard set: the 0.9 GB checkpoint of the converter
//!                    benchmark (hf-bench-lfm2, benches/convert.sh)

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let (mut out, mut src, mut bad, mut bench) = (None, wick_fixtures::default_llama_src(), false, false);
    let mut specs = wick_fixtures::standard_specs();
    // The LFM2 tool-calling, LFM2-VL and embedding fixtures belong to the standard set.
    let mut tools = true;
    let mut hf = false;
    let mut hf_bench = false;
    let mut bench_embed = false;
    let mut bench_lora = false;
    let mut n_ctx = None;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--llama-src" => match args.next() {
                Some(s) => src = PathBuf::from(s),
                None => return usage("--llama-src needs a directory"),
            },
            "--bad" => bad = true,
            "--quant-sources" => (specs, tools) = (wick_fixtures::quant_source_specs(), false),
            "--bench" => (specs, tools, bench) = (wick_fixtures::bench_specs(), false, true),
            "--bench-embed" => (specs, tools, bench_embed) = (vec![], false, true),
            "--bench-lora" => (specs, tools, bench_lora) = (vec![], false, true),
            "--bench-lfm2" => {
                (specs, tools, n_ctx) =
                    (wick_fixtures::bench_lfm2_specs(), false, Some(wick_fixtures::BENCH_CTX))
            }
            "--bench-real" => {
                (specs, tools, n_ctx) =
                    (wick_fixtures::bench_real_specs(), false, Some(wick_fixtures::BENCH_CTX))
            }
            "--hf" => (specs, tools, hf) = (vec![], false, true),
            "--gpu-check" => (specs, tools) = (wick_fixtures::gpu_check_specs(), false),
            "--hf-bench" => (specs, tools, hf_bench) = (vec![], false, true),
            "-h" | "--help" => return usage(""),
            _ if out.is_none() && !a.starts_with('-') => out = Some(PathBuf::from(a)),
            _ => return usage(&format!("unexpected argument `{a}`")),
        }
    }
    let Some(out) = out else { return usage("missing <out_dir>") };
    let run = || -> wick_core::Result<()> {
        if hf_bench {
            println!(
                "{}",
                wick_fixtures::write_hf_checkpoint(&wick_fixtures::hf_bench_spec(), &out, &src)?.display()
            );
        }
        if hf {
            for spec in wick_fixtures::hf_specs() {
                println!("{}", wick_fixtures::write_hf_checkpoint(&spec, &out, &src)?.display());
            }
            for spec in wick_fixtures::hf_lora_specs() {
                println!("{}", wick_fixtures::write_hf_lora(&spec, &out)?.display());
            }
        }
        for p in wick_fixtures::write_specs_ctx(&specs, &out, &src, n_ctx)? {
            println!("{}", p.display());
        }
        if tools {
            for p in wick_fixtures::write_tool_fixtures(&out, &src)? {
                println!("{}", p.display());
            }
            for p in wick_fixtures::write_vision_fixtures(&out, &src)? {
                println!("{}", p.display());
            }
            for p in wick_fixtures::write_embedding_fixtures(&out, &src)? {
                println!("{}", p.display());
            }
            for p in wick_fixtures::write_lora_fixtures(&out, &src)? {
                println!("{}", p.display());
            }
        }
        if bench {
            for p in wick_fixtures::write_vision_specs(&wick_fixtures::bench_vision_specs(), &out)? {
                println!("{}", p.display());
            }
        }
        if bench || bench_embed {
            println!("{}", wick_fixtures::write_bench_embedding(&out, &src)?.display());
        }
        if bench || bench_lora {
            for p in wick_fixtures::write_bench_loras(&out, 4)? {
                println!("{}", p.display());
            }
        }
        if bad {
            for b in wick_fixtures::write_bad_files(&out)? {
                println!("{}", b.path.display());
            }
            for b in wick_fixtures::write_bad_lora_files(&out)? {
                println!("{}", b.path.display());
            }
        }
        Ok(())
    };
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("wick-fixtures: {e}");
            ExitCode::FAILURE
        }
    }
}

fn usage(err: &str) -> ExitCode {
    if !err.is_empty() {
        eprintln!("wick-fixtures: {err}");
    }
    eprintln!(
        "usage: wick-fixtures <out_dir> [--llama-src <dir>] [--bad] [--quant-sources] [--bench] [--bench-embed] [--bench-lora] [--bench-lfm2] [--bench-real] [--gpu-check] [--hf] [--hf-bench]"
    );
    if err.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(2)
    }
}
