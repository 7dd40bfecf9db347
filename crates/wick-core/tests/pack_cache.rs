//! The pack cache changes nothing but load time: on every fixture architecture and quant type
//! the tokens of a load that packs and saves its weights, and of the next load that maps them
//! from the file, equal those of a load without a cache; a file that is damaged, or belongs to
//! another version of the model file, is never read.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use wick_core::request::GenerateRequest;
use wick_core::runtime::weight_cache::WeightCacheUse as PackCacheUse;
use wick_core::sampling::SamplingParams;
use wick_core::{Engine, EngineOptions};

mod common;
use common::engine::{run, sampled};

fn fixture_dir() -> &'static Path {
    common::engine::standard_fixtures("wick-pack-cache")
}

/// A fresh cache directory for one test.
fn cache_dir(test: &str) -> PathBuf {
    let dir =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("pack-cache-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn load(path: &Path, cache: Option<&Path>) -> Engine {
    let mut o = EngineOptions::new(path);
    o.context_size = Some(512);
    o.pack_cache = cache.map(Path::to_path_buf);
    Engine::load(o).expect("load")
}

/// Greedy and sampled tokens of two prompts.
fn tokens(engine: &Engine) -> Vec<Vec<u32>> {
    let mut out = vec![];
    for (seed, prompt) in [vec![1u32, 15, 27, 99, 4], vec![1, 200, 3, 3, 58, 111, 7]].into_iter().enumerate()
    {
        for sampling in [SamplingParams::greedy(), sampled(3 + seed as u64)] {
            out.push(
                run(engine, GenerateRequest { sampling, ..GenerateRequest::greedy(prompt.clone(), 24) }).ids,
            );
        }
    }
    out
}

fn pack_use(engine: &Engine) -> PackCacheUse {
    engine.info().pack_cache.clone().expect("a load with a cache directory reports its use")
}

/// Waits for the writer thread's file to get its name.
fn wait_for(path: &Path) {
    let until = Instant::now() + Duration::from_secs(60);
    while !path.exists() {
        assert!(Instant::now() < until, "{} was not written in 60 s", path.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The file a writing load saves to; None when the model has no packed weight (F16).
fn written(engine: &Engine) -> Option<PathBuf> {
    match pack_use(engine) {
        PackCacheUse::Writing { path } => Some(path),
        PackCacheUse::Unused { why } => {
            assert!(why.contains("no weight"), "unused for another reason: {why}");
            None
        }
        other => panic!("a first load read a cache: {other:?}"),
    }
}

#[test]
fn a_second_load_maps_the_saved_weights_and_generates_the_same_tokens_on_every_fixture() {
    let cache = cache_dir("every-fixture");
    let mut read = vec![];
    for spec in wick_fixtures::standard_specs() {
        let path = fixture_dir().join(&spec.file_name);
        let expected = tokens(&load(&path, None));
        let first = load(&path, Some(&cache));
        assert_eq!(tokens(&first), expected, "{}: the load that packs and saves", spec.file_name);
        let Some(file) = written(&first) else { continue };
        drop(first);
        wait_for(&file);
        let second = load(&path, Some(&cache));
        match pack_use(&second) {
            PackCacheUse::Read { path: p, weights } => {
                assert_eq!(p, file);
                assert!(weights > 0, "{}: nothing mapped", spec.file_name);
                read.push(format!("{} ({weights} weights)", spec.file_name));
            }
            other => panic!("{}: the second load did not read the cache: {other:?}", spec.file_name),
        }
        assert_eq!(tokens(&second), expected, "{}: the load that maps the saved weights", spec.file_name);
    }
    // Every quantized fixture packs (Q8_0, Q4_0, Q4_K, MoE experts, tied heads).
    assert!(read.len() >= 10, "read back: {read:?}");
    eprintln!("pack cache read back: {}", read.join(", "));
}

#[test]
fn a_damaged_cache_file_is_never_read_and_is_written_again() {
    let cache = cache_dir("damaged");
    let path = fixture_dir().join("tiny-lfm2-q8_0.gguf");
    let expected = tokens(&load(&path, None));
    let file = written(&load(&path, Some(&cache))).expect("lfm2 q8_0 packs");
    wait_for(&file);
    let whole = std::fs::read(&file).unwrap();
    let mut index_garbled = whole.clone();
    let n = index_garbled.len();
    index_garbled[n - 40..].fill(0xff);
    let mut key_changed = whole.clone();
    key_changed[9] ^= 1;
    let damages: [(&str, Vec<u8>); 5] = [
        ("truncated", whole[..whole.len() / 2].to_vec()),
        ("empty", vec![]),
        ("the index garbled", index_garbled),
        ("another key", key_changed),
        ("not a cache file", vec![7u8; whole.len()]),
    ];
    for (what, bytes) in damages {
        std::fs::write(&file, &bytes).unwrap();
        let engine = load(&path, Some(&cache));
        assert!(matches!(pack_use(&engine), PackCacheUse::Writing { .. }), "{what}: {:?}", pack_use(&engine));
        assert_eq!(tokens(&engine), expected, "{what}");
        drop(engine);
        // The writer replaces the damaged file with a whole one.
        let until = Instant::now() + Duration::from_secs(60);
        while std::fs::read(&file).map(|b| b != whole).unwrap_or(true) {
            assert!(Instant::now() < until, "{what}: the file was not written again");
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(
            matches!(pack_use(&load(&path, Some(&cache))), PackCacheUse::Read { .. }),
            "{what}: rewritten"
        );
    }
}

#[test]
fn a_changed_model_file_does_not_read_the_old_files_weights() {
    let cache = cache_dir("changed");
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("pack-cache-model-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("model.gguf");
    let vocab = wick_fixtures::byte_vocab();
    let mut spec =
        wick_fixtures::standard_specs().into_iter().find(|s| s.file_name == "tiny-llama-q8_0.gguf").unwrap();
    wick_fixtures::write_fixture(&spec, &vocab, &path).unwrap();
    let old = written(&load(&path, Some(&cache))).expect("llama q8_0 packs");
    wait_for(&old);
    // Other weights under the same name, shapes and metadata.
    spec.seed += 1;
    wick_fixtures::write_fixture(&spec, &vocab, &path).unwrap();
    let expected = tokens(&load(&path, None));
    let engine = load(&path, Some(&cache));
    match pack_use(&engine) {
        PackCacheUse::Writing { path: p } => assert_ne!(p, old, "the same key for another file"),
        other => panic!("the changed file read a cache: {other:?}"),
    }
    assert_eq!(tokens(&engine), expected);
}

/// A split model (`-ngl`, the first blocks on the exact path) packs only its host blocks: it
/// writes a file of its own, which its next load maps, and a load of the whole model on the CPU
/// then writes and maps a whole one instead of reading the split's part forever after.
#[test]
fn a_split_models_cache_is_its_own() {
    use wick_core::runtime::device::DeviceChoice;
    let cache = cache_dir("split");
    let path = fixture_dir().join("tiny-lfm2-q8_0.gguf");
    let split = |o: &mut EngineOptions| {
        o.device = DeviceChoice::CpuCandle;
        o.gpu_layers = Some(2);
    };
    let load_as = |f: &dyn Fn(&mut EngineOptions)| {
        let mut o = EngineOptions::new(&path);
        o.context_size = Some(512);
        o.pack_cache = Some(cache.clone());
        f(&mut o);
        Engine::load(o).expect("load")
    };
    let first = load_as(&split);
    assert!(first.info().device_layers.is_some(), "-ngl 2 splits the fixture");
    let expected = tokens(&first);
    let part = written(&first).expect("the split's host blocks pack");
    drop(first);
    wait_for(&part);
    let again = load_as(&split);
    let PackCacheUse::Read { path: p, weights: part_weights } = pack_use(&again) else {
        panic!("the split's second load did not read its file")
    };
    assert_eq!(p, part);
    assert_eq!(tokens(&again), expected);
    drop(again);
    let whole = load_as(&|_| {});
    let file = written(&whole).expect("the whole model writes its own file, not the split's");
    assert_ne!(file, part);
    drop(whole);
    wait_for(&file);
    let PackCacheUse::Read { weights, .. } = pack_use(&load_as(&|_| {})) else { panic!("not read") };
    assert!(weights > part_weights, "the whole model's file holds more ({weights} vs {part_weights})");
}
