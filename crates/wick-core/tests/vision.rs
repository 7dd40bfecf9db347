//! LFM2-VL: the projector loads, a prompt's image layout is llama.cpp's (token for token),
//! and the embeddings agree with llama.cpp's `mtmd_encode_chunk` on the same pixels.
//! The reference comes from `scripts/mtmd-embd.cpp`, built by scripts/build-mtmd-embd.sh
//! against the llama-server build (`<WICK_LLAMA_BUILD>/bin/wick-mtmd-embd`, or the binary
//! `WICK_MTMD_EMBD` names); without it that comparison is skipped.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, OnceLock};

use common::engine::{chat, run, run_together};
use wick_core::request::{Event, GenerateRequest, PromptImage};
use wick_core::{Engine, EngineOptions};

use wick_core::gguf::GgufFile;
use wick_core::models::vision::{layout, LayoutPart, Rgb8, VisionModel, VisionOptions};
use wick_core::tokenizer::Tokenizer;
use wick_fixtures::pattern;

/// The LFM2-VL fixtures, written once per test binary into a temporary directory.
fn fixtures() -> Option<&'static Path> {
    static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
    DIR.get_or_init(|| {
        let src = common::llama_src("vision fixtures")?;
        let dir = std::env::temp_dir().join(format!("wick-vision-{}", std::process::id()));
        wick_fixtures::write_vision_fixtures(&dir, &src).expect("write vision fixtures");
        Some(dir)
    })
    .as_deref()
}

enum Chunk {
    Text(Vec<u32>),
    Embeds(Vec<f32>),
}

/// llama.cpp's chunks for `<|im_start|>user\n<image>Hi` (see scripts/mtmd-embd.cpp).
fn reference(bin: &str, dir: &Path, proj: &str, img: &Rgb8, max_tokens: Option<usize>) -> Vec<Chunk> {
    let raw = dir.join(format!("img-{}x{}.rgb", img.width, img.height));
    std::fs::write(&raw, &img.data).unwrap();
    let out = dir.join("ref.txt");
    let mut cmd = Command::new(bin);
    cmd.arg(dir.join("tiny-lfm2-vl-q8_0.gguf")).arg(dir.join(proj)).arg(&raw);
    cmd.arg(img.width.to_string()).arg(img.height.to_string()).arg(&out);
    if let Some(n) = max_tokens {
        cmd.arg(n.to_string());
    }
    let st = cmd.output().expect("run the mtmd reference");
    assert!(st.status.success(), "mtmd reference failed: {}", String::from_utf8_lossy(&st.stderr));
    std::fs::read_to_string(&out)
        .unwrap()
        .lines()
        .map(|l| {
            let mut f = l.split(' ');
            match f.next() {
                Some("T") => Chunk::Text(f.skip(1).map(|v| v.parse().unwrap()).collect()),
                _ => Chunk::Embeds(f.skip(2).map(|v| v.parse().unwrap()).collect()),
            }
        })
        .collect()
}

#[test]
fn projector_loads_and_rejects_text_models() {
    let Some(dir) = fixtures() else { return };
    let v = VisionModel::load(&dir.join("mmproj-tiny-lfm2-vl-q8_0.gguf"), VisionOptions::default()).unwrap();
    assert_eq!(v.n_embd(), 64);
    let err = VisionModel::load(&dir.join("tiny-lfm2-vl-q8_0.gguf"), VisionOptions::default()).err().unwrap();
    assert!(err.to_string().contains("clip"), "{err}");
}

#[test]
fn embeddings_and_layout_match_llama_cpp() {
    let Some(dir) = fixtures() else { return };
    let build = std::env::var_os("WICK_LLAMA_BUILD")
        .map(PathBuf::from)
        .unwrap_or_else(|| common::engine::repo().join(".cache/llama-build"));
    let bin =
        std::env::var_os("WICK_MTMD_EMBD").map(PathBuf::from).unwrap_or(build.join("bin/wick-mtmd-embd"));
    if !bin.exists() {
        let why = format!(
            "{} is missing (bash scripts/build-mtmd-embd.sh, after scripts/build-llama-server.sh)",
            bin.display()
        );
        common::skip("embeddings_and_layout_match_llama_cpp", &why);
        return;
    }
    let bin = bin.to_string_lossy().into_owned();
    let text = GgufFile::open(dir.join("tiny-lfm2-vl-q8_0.gguf")).unwrap();
    let tok = Tokenizer::from_gguf(&text.metadata).unwrap();
    let cases = [
        ("mmproj-tiny-lfm2-vl-q8_0.gguf", pattern(200, 150, 1), None),
        ("mmproj-tiny-lfm2-vl-f16.gguf", pattern(333, 97, 5), None),
        ("mmproj-tiny-lfm2-vl-nonorm-q8_0.gguf", pattern(1200, 900, 2), None),
        ("mmproj-tiny-lfm2-vl-q8_0.gguf", pattern(2400, 400, 3), Some(64)),
        ("mmproj-tiny-lfm2-vl-f32.gguf", pattern(200, 150, 1), None),
    ];
    for (proj, img, max_tokens) in cases {
        let opts = VisionOptions { image_max_tokens: max_tokens, ..Default::default() };
        let v = VisionModel::load(&dir.join(proj), opts).unwrap();
        let plan = v.plan(img.width, img.height).unwrap();
        let embeds = v.encode_image(&plan, img.view()).unwrap();
        let want = reference(&bin, dir, proj, &img, max_tokens);
        let mut got = vec![Chunk::Text(tok.encode("<|im_start|>user\n", true, true).unwrap())];
        for part in layout(&plan, &v.cfg, &tok).unwrap() {
            match part {
                LayoutPart::Tokens(t) => got.push(Chunk::Text(t)),
                LayoutPart::Embeds { input, n } => {
                    assert_eq!(embeds[input].len(), n * v.n_embd());
                    got.push(Chunk::Embeds(embeds[input].clone()));
                }
            }
        }
        got.push(Chunk::Text(tok.encode("Hi", false, true).unwrap()));
        // llama.cpp merges adjacent text chunks; so do we, to compare.
        let merge = |v: Vec<Chunk>| {
            let mut out: Vec<Chunk> = vec![];
            for c in v {
                match (out.last_mut(), c) {
                    (Some(Chunk::Text(a)), Chunk::Text(b)) => a.extend(b),
                    (_, c) => out.push(c),
                }
            }
            out
        };
        let (got, want) = (merge(got), merge(want));
        assert_eq!(got.len(), want.len(), "{proj} {}×{}: chunk count", img.width, img.height);
        let mut worst = 0f32;
        for (g, w) in got.iter().zip(&want) {
            match (g, w) {
                (Chunk::Text(a), Chunk::Text(b)) => assert_eq!(a, b, "{proj}: text chunk"),
                (Chunk::Embeds(a), Chunk::Embeds(b)) => {
                    assert_eq!(a.len(), b.len(), "{proj}: embedding count");
                    for (x, y) in a.iter().zip(b) {
                        worst = worst.max((x - y).abs() / (1.0 + y.abs()));
                    }
                }
                _ => panic!("{proj}: chunk kinds differ"),
            }
        }
        eprintln!("{proj} {}×{}: largest relative difference {worst:e}", img.width, img.height);
        assert!(worst < 1e-6, "{proj} {}×{}: embeddings differ by {worst:e}", img.width, img.height);
    }
}

fn image_req(engine: &Engine, before: &str, img: &Rgb8, after: &str, n: usize) -> GenerateRequest {
    let tok = engine.tokenizer();
    let mut prompt = tok.encode(before, true, true).unwrap();
    let at = prompt.len();
    prompt.extend(tok.encode(after, false, true).unwrap());
    let image = PromptImage { at, width: img.width, height: img.height, rgb: Arc::from(&img.data[..]) };
    GenerateRequest { images: vec![image], ignore_eos: true, ..GenerateRequest::greedy(prompt, n) }
}

fn vl_engine(dir: &Path, mmproj: Option<&str>) -> Engine {
    let mut o = EngineOptions::new(dir.join("tiny-lfm2-vl-q8_0.gguf"));
    o.context_size = Some(4096);
    o.mmproj = mmproj.map(|m| dir.join(m));
    Engine::load(o).expect("load the VL fixture")
}

const USER: &str = "<|im_start|>user\n";
const ASK: &str = "What is in the image?<|im_end|>\n<|im_start|>assistant\n";

#[test]
fn images_run_through_the_engine() {
    let Some(dir) = fixtures() else { return };
    let engine = vl_engine(dir, Some("mmproj-tiny-lfm2-vl-q8_0.gguf"));
    assert!(engine.info().vision);
    let a = pattern(200, 150, 1);
    let b = Rgb8 { width: 200, height: 150, data: vec![0; 200 * 150 * 3] };
    let h = engine.submit(image_req(&engine, USER, &a, ASK, 8)).unwrap();
    let (first, usage) = collect_usage(h);
    // BOS, <|im_start|>, "user", "\n", <|image_start|>, 70 embeddings, <|image_end|>, then ASK.
    let ask = engine.tokenizer().encode(ASK, false, true).unwrap().len();
    assert_eq!(usage.prompt_tokens, 4 + 1 + 70 + 1 + ask);
    let m = engine.metrics();
    assert_eq!((m.images_encoded_total, m.image_tiles_encoded_total), (1, 1));
    // The same image again: its prefix comes from the cache, nothing is encoded again.
    let (again, usage) = collect_usage(engine.submit(image_req(&engine, USER, &a, ASK, 8)).unwrap());
    assert_eq!(again, first);
    assert!(usage.cached_tokens >= 64, "cached {}", usage.cached_tokens);
    assert_eq!(engine.metrics().images_encoded_total, 1);
    // Another image changes the model's distribution (the tiny random model's greedy answer
    // is the same, its probabilities are not).
    let first_logprob = |img: &Rgb8| {
        let mut r = image_req(&engine, USER, img, ASK, 1);
        r.top_logprobs = Some(1);
        let mut h = engine.submit(r).unwrap();
        while let Some(ev) = h.events.blocking_recv() {
            if let Event::Token(t) = ev {
                return t.logprobs[0].0.logprob;
            }
        }
        panic!("no token")
    };
    assert_ne!(first_logprob(&a), first_logprob(&b), "the image makes no difference to the model");
    // A tiled image batched with a text-only request: each answers as it does alone.
    let big = pattern(1200, 900, 2);
    let text = GenerateRequest { ignore_eos: true, ..GenerateRequest::greedy(chat(&engine, "Hello"), 8) };
    let alone_text = run(&engine, text.clone()).ids;
    let alone_img = run(&engine, image_req(&engine, USER, &big, ASK, 8)).ids;
    let both = run_together(&engine, vec![image_req(&engine, USER, &big, ASK, 8), text]);
    assert_eq!((both[0].ids.clone(), both[1].ids.clone()), (alone_img, alone_text));
}

#[test]
fn whole_prompt_prefill_with_images_answers_as_chunked() {
    let Some(dir) = fixtures() else { return };
    let img = pattern(1200, 900, 2);
    let answer = |chunk: Option<usize>| {
        let mut o = EngineOptions::new(dir.join("tiny-lfm2-vl-q8_0.gguf"));
        o.context_size = Some(4096);
        o.mmproj = Some(dir.join("mmproj-tiny-lfm2-vl-q8_0.gguf"));
        o.prefill_chunk = chunk;
        o.step_tokens = 8192;
        let engine = Engine::load(o).expect("load");
        run(&engine, image_req(&engine, USER, &img, ASK, 6)).ids
    };
    // Prompt chunks end at the images' edges either way, so the numerics are the same.
    assert_eq!(answer(None), answer(Some(256)));
}

#[test]
fn image_sequences_survive_preemption_and_batch_with_each_other() {
    let Some(dir) = fixtures() else { return };
    let (a, b) = (pattern(1200, 900, 2), pattern(640, 480, 5));
    let engine = vl_engine(dir, Some("mmproj-tiny-lfm2-vl-q8_0.gguf"));
    let alone = [
        run(&engine, image_req(&engine, USER, &a, ASK, 24)).ids,
        run(&engine, image_req(&engine, USER, &b, ASK, 24)).ids,
    ];
    // A KV pool too small for both: the newer is preempted and recomputed (its image embeddings
    // kept), and both still answer as they do alone.
    let mut o = EngineOptions::new(dir.join("tiny-lfm2-vl-q8_0.gguf"));
    o.context_size = Some(4096);
    o.mmproj = Some(dir.join("mmproj-tiny-lfm2-vl-q8_0.gguf"));
    o.kv_tokens = Some(2 * 1024);
    o.prefix_cache = false;
    let tight = Engine::load(o).expect("load");
    let both = run_together(
        &tight,
        vec![image_req(&tight, USER, &a, ASK, 24), image_req(&tight, USER, &b, ASK, 24)],
    );
    assert_eq!([both[0].ids.clone(), both[1].ids.clone()], alone);
    assert!(tight.metrics().preemptions_total > 0, "the pool was meant to force a preemption");
}

#[test]
fn images_need_a_projector_and_a_valid_placement() {
    let Some(dir) = fixtures() else { return };
    let text_only = vl_engine(dir, None);
    let img = pattern(64, 64, 1);
    let err = text_only.submit(image_req(&text_only, USER, &img, ASK, 4)).err().unwrap();
    assert_eq!(err.code(), "INVALID_REQUEST");
    assert!(err.to_string().contains("image input is not supported"), "{err}");
    let engine = vl_engine(dir, Some("mmproj-tiny-lfm2-vl-q8_0.gguf"));
    let mut bad = image_req(&engine, USER, &img, ASK, 4);
    bad.images[0].at = 10_000;
    assert_eq!(engine.submit(bad).err().unwrap().code(), "INVALID_REQUEST");
    let mut short = image_req(&engine, USER, &img, ASK, 4);
    short.images[0].rgb = Arc::from(&img.data[..10]);
    assert_eq!(engine.submit(short).err().unwrap().code(), "INVALID_REQUEST");
    // A projector for another width does not load.
    let mut o = EngineOptions::new(dir.join("tiny-lfm2-vl-q8_0.gguf"));
    o.mmproj = Some(dir.join("tiny-lfm2-vl-q8_0.gguf"));
    assert!(Engine::load(o).is_err());
}

fn collect_usage(mut h: wick_core::engine::SequenceHandle) -> (Vec<u32>, wick_core::request::Usage) {
    let mut ids = vec![];
    while let Some(ev) = h.events.blocking_recv() {
        match ev {
            Event::Token(t) => ids.extend(t.ids),
            Event::Embedding(_) => panic!("an embedding from a generation"),
            Event::Done(d) => return (ids, d.usage),
            Event::Error(e) => panic!("{e}"),
        }
    }
    panic!("no done event")
}
