//! LoRA adapters in the engine: a batch mixing adapters (and none) gives each sequence the
//! tokens it gets alone, scale 0 is the base model, the prefix cache never shares KV across
//! adapters, and adapters that do not fit are refused. Parity with llama.cpp
//! (`llama-server --lora`) is in `test/lora-parity.test.ts`.

use std::path::PathBuf;

use wick_core::engine::LoraSpec;
use wick_core::request::GenerateRequest;
use wick_core::{Engine, WickError};

mod common;
use common::engine::{cached_fixture, run, run_together};

fn fixture_path(name: &str) -> PathBuf {
    std::env::var_os("WICK_FIXTURES")
        .map(PathBuf::from)
        .unwrap_or_else(|| common::engine::repo().join(".cache/fixtures"))
        .join(name)
}

/// The base model with its three fixture adapters loaded (ids 0, 1, 2), default scale 0 so a
/// request that names none runs the base; `opts` as the test needs.
fn with_adapters(test: &str, base: &str, opts: impl FnOnce(&mut wick_core::EngineOptions)) -> Option<Engine> {
    let stem = base.trim_end_matches(".gguf");
    let specs: Vec<LoraSpec> = ["attn-f16", "ffn-f32", "all-q8_0"]
        .iter()
        .map(|kind| LoraSpec {
            path: fixture_path(&format!("lora-{stem}-{kind}.gguf")),
            name: None,
            scale: 0.0,
        })
        .collect();
    if let Some(missing) = specs.iter().find(|s| !s.path.exists()) {
        common::skip(test, &format!("{} is missing (npm run fixtures)", missing.path.display()));
        return None;
    }
    cached_fixture(test, base, |o| {
        o.lora = specs;
        o.max_sequences = 8;
        opts(o);
    })
}

fn req(prompt: &[u32], lora: Option<Vec<(usize, f32)>>) -> GenerateRequest {
    GenerateRequest { lora, ..GenerateRequest::greedy(prompt.to_vec(), 12) }
}

const BASES: [&str; 2] = ["tiny-llama-q8_0.gguf", "tiny-lfm2-q8_0.gguf"];

#[test]
fn a_batch_mixing_adapters_gives_each_sequence_its_tokens_alone() {
    for base in BASES {
        let Some(engine) = with_adapters("LoRA batching", base, |_| {}) else { return };
        let prompts: [&[u32]; 5] =
            [&[1, 20, 30, 40], &[1, 50, 60], &[1, 70, 80, 90, 100, 110], &[1, 5], &[1, 200, 201]];
        let mixes: [Option<Vec<(usize, f32)>>; 5] = [
            Some(vec![(0, 1.0)]),
            Some(vec![(1, 0.5)]),
            Some(vec![(2, 1.0)]),
            None,
            Some(vec![(2, 0.7), (0, 1.0)]),
        ];
        let alone: Vec<Vec<u32>> =
            prompts.iter().zip(&mixes).map(|(p, m)| run(&engine, req(p, m.clone())).ids).collect();
        let together =
            run_together(&engine, prompts.iter().zip(&mixes).map(|(p, m)| req(p, m.clone())).collect());
        for (i, (a, t)) in alone.iter().zip(&together).enumerate() {
            assert_eq!(a, &t.ids, "{base}: sequence {i} batched with other adapters differs from alone");
        }
        // The adapters change the answer (else this test could not fail).
        let plain: Vec<Vec<u32>> = prompts.iter().map(|p| run(&engine, req(p, Some(vec![]))).ids).collect();
        assert_eq!(plain[3], alone[3], "{base}: no adapter named is the base here (default scales 0)");
        for i in [0, 1, 2, 4] {
            assert_ne!(plain[i], alone[i], "{base}: adapter mix {:?} left the output unchanged", mixes[i]);
        }
    }
}

#[test]
fn scale_zero_is_the_base_model_and_defaults_apply_when_none_is_named() {
    for base in BASES {
        let Some(engine) = with_adapters("LoRA scales", base, |_| {}) else { return };
        let Some(plain) = cached_fixture("LoRA scales", base, |_| {}) else { return };
        let p = [1u32, 33, 44, 55];
        let base_ids = run(&plain, req(&p, None)).ids;
        assert_eq!(run(&engine, req(&p, Some(vec![(0, 0.0), (2, 0.0)]))).ids, base_ids, "{base}: scale 0");
        assert_eq!(run(&engine, req(&p, None)).ids, base_ids, "{base}: default scales are 0");
        let with_attn = run(&engine, req(&p, Some(vec![(0, 1.0)]))).ids;
        engine.set_adapter_scales(&[(0, 1.0)]).expect("scales");
        assert_eq!(run(&engine, req(&p, None)).ids, with_attn, "{base}: the default scale applies");
        assert_eq!(engine.adapters().iter().map(|a| a.scale).collect::<Vec<_>>(), vec![1.0, 0.0, 0.0]);
    }
}

#[test]
fn the_prefix_cache_never_shares_kv_across_adapters() {
    let base = BASES[0];
    let Some(engine) = with_adapters("LoRA prefix cache", base, |_| {}) else { return };
    let p: Vec<u32> = (0..150).map(|i| 1 + (i * 37) % 250).collect();
    let first = run(&engine, req(&p, Some(vec![(0, 1.0)])));
    // Same tokens, other adapter: nothing cached for it; its own run again: cached, same tokens.
    let other = run(&engine, req(&p, Some(vec![(1, 1.0)])));
    assert_eq!(other.cached_tokens, 0);
    let again = run(&engine, req(&p, Some(vec![(0, 1.0)])));
    assert!(again.cached_tokens >= 128, "cached {}", again.cached_tokens);
    assert_eq!(again.ids, first.ids);
    let scaled = run(&engine, req(&p, Some(vec![(0, 0.5)])));
    assert_eq!(scaled.cached_tokens, 0, "another scale is another KV");
}

#[test]
fn adapters_that_do_not_fit_are_refused() {
    let Some(engine) = cached_fixture("LoRA refusals", "tiny-llama-q8_0.gguf", |_| {}) else { return };
    let load = |file: &str| {
        engine.load_adapter(&LoraSpec { path: fixture_path(file), name: Some(file.into()), scale: 1.0 })
    };
    for (file, want) in [
        ("bad-lora-wrong-base.gguf", "another base model"),
        ("lora-tiny-lfm2-q8_0-attn-f16.gguf", "made for a `lfm2` model"),
        ("tiny-llama-q8_0.gguf", "not a LoRA adapter"),
        ("no-such-adapter.gguf", "no-such-adapter"),
    ] {
        if !fixture_path(file).exists() && file.starts_with("bad") {
            common::skip("LoRA refusals", &format!("{file} is missing (npm run fixtures -- --bad)"));
            continue;
        }
        match load(file) {
            Err(e) => assert!(e.to_string().contains(want), "{file}: {e}"),
            Ok(_) => panic!("{file} loaded"),
        }
    }
    assert!(engine.adapters().is_empty());
    let id = load("lora-tiny-llama-q8_0-attn-f16.gguf").expect("a fitting adapter loads");
    assert!(
        matches!(load("lora-tiny-llama-q8_0-attn-f16.gguf"), Err(WickError::InvalidRequest(_))),
        "same name twice"
    );
    let bad_id = engine.submit(req(&[1, 2], Some(vec![(id + 5, 1.0)])));
    assert!(matches!(bad_id, Err(WickError::InvalidRequest(_))));
    let nan = engine.submit(req(&[1, 2], Some(vec![(id, f32::NAN)])));
    assert!(matches!(nan, Err(WickError::InvalidRequest(_))));
    engine.unload_adapter("lora-tiny-llama-q8_0-attn-f16.gguf").expect("unload");
    assert!(matches!(engine.submit(req(&[1, 2], Some(vec![(id, 1.0)]))), Err(WickError::InvalidRequest(_))));
}

/// The device path (candle's ops: what CUDA and Metal run) applies adapters as the exact path
/// does: the same greedy tokens on the fixtures, for the first 8 (the random fixtures reach
/// near-ties later, where summation order decides, as `device_path.rs` allows) — also with
/// the blocks split between the two paths (`-ngl 1`: each adapter weight beside its block's).
#[test]
fn the_device_path_applies_adapters_as_the_exact_path_does() {
    for base in BASES {
        let Some(exact) = with_adapters("LoRA on the device path", base, |_| {}) else { return };
        for gpu_layers in [None, Some(1)] {
            let Some(dev) = with_adapters("LoRA on the device path", base, |o| {
                o.device = wick_core::runtime::device::DeviceChoice::CpuCandle;
                o.gpu_layers = gpu_layers;
            }) else {
                return;
            };
            assert_eq!(dev.info().device_layers, gpu_layers, "{base}");
            for mix in [vec![(0, 1.0)], vec![(1, 0.5)], vec![(2, 1.0)]] {
                let p = [1u32, 21, 31, 41];
                let (a, b) =
                    (run(&exact, req(&p, Some(mix.clone()))).ids, run(&dev, req(&p, Some(mix.clone()))).ids);
                assert_eq!(a[..8], b[..8], "{base} -ngl {gpu_layers:?} {mix:?}");
            }
        }
    }
}
