//! What a JSON-schema grammar costs decoding, through the whole engine (scheduler, helper
//! threads, sampler): `cargo bench -p wick-core --bench grammar -- [MODEL.gguf] [--gen 128]
//! [--rounds 5]` (default model: SmolLM2-135M-Instruct in `.cache/models`). Threads:
//! `WICK_THREADS` (default: all cores).
//!
//! The constrained requests ask for an array of at least 50 city objects (nested objects,
//! arrays, enums, number bounds, required fields), so they never complete and every request,
//! constrained or not, decodes exactly `--gen` tokens: runs differ only by the grammar.
//! Prints one table: grammar compile time, then greedy and at temperature 0.7: decode tokens/s
//! of one sequence without and with the schema, and batch throughput at concurrency 8 with
//! none or half of the sequences constrained, plus the helper threads' mask time and how long
//! sampling waited for it. (At temperature > 0 the sampler sorts every candidate, so a mask,
//! which leaves few, makes sampling cheaper: greedy isolates the grammar's own cost.)

use std::path::PathBuf;
use std::time::Instant;

use wick_core::request::{Event, GenerateRequest};
use wick_core::sampling::grammar::{GrammarCompiler, GrammarKind, GrammarSpec};
use wick_core::sampling::SamplingParams;
use wick_core::tokenizer::Tokenizer;
use wick_core::{Engine, EngineOptions};

const SCHEMA: &str = r#"{
  "type": "array",
  "minItems": 50,
  "items": {
    "type": "object",
    "properties": {
      "name": {"type": "string", "maxLength": 24},
      "population": {"type": "integer", "minimum": 0, "maximum": 40000000},
      "area_km2": {"type": "number", "minimum": 0.5, "maximum": 20000},
      "climate": {"enum": ["arid", "temperate", "tropical", "polar"]},
      "location": {
        "type": "object",
        "properties": {
          "country": {"type": "string", "maxLength": 24},
          "lat": {"type": "number", "minimum": -90, "maximum": 90},
          "lon": {"type": "number", "minimum": -180, "maximum": 180}
        },
        "required": ["country", "lat", "lon"],
        "additionalProperties": false
      },
      "districts": {"type": "array", "items": {"type": "string", "maxLength": 16}, "minItems": 1, "maxItems": 4}
    },
    "required": ["name", "population", "climate", "location", "districts"],
    "additionalProperties": false
  }
}"#;

fn arg(args: &[String], name: &str, default: usize) -> usize {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn row(what: &str, case: &str, value: String) {
    println!("| {what:<34} | {case:<30} | {value:>22} |");
}

fn request(prompt: &[u32], gen: usize, temperature: f32, seed: u64, constrained: bool) -> GenerateRequest {
    GenerateRequest {
        sampling: SamplingParams { temperature, seed: Some(seed), ..SamplingParams::default() },
        ignore_eos: true,
        grammar: constrained.then(|| GrammarSpec {
            kind: GrammarKind::JsonSchema,
            source: SCHEMA.into(),
            trigger_token: None,
        }),
        ..GenerateRequest::greedy(prompt.to_vec(), gen)
    }
}

/// Runs `reqs` in one schedule; returns (wall seconds, tokens generated, decode ms of each).
fn run(engine: &Engine, reqs: Vec<GenerateRequest>) -> (f64, usize, Vec<f64>) {
    engine.pause().expect("pause");
    let handles: Vec<_> = reqs.into_iter().map(|r| engine.submit(r).expect("submit")).collect();
    let t = Instant::now();
    engine.resume().expect("resume");
    let (mut tokens, mut decode) = (0, vec![]);
    for mut h in handles {
        while let Some(ev) = h.events.blocking_recv() {
            match ev {
                Event::Token(_) | Event::Embedding(_) => {}
                Event::Done(d) => {
                    tokens += d.usage.completion_tokens;
                    decode.push(d.timings.decode_ms / (d.usage.completion_tokens.max(2) - 1) as f64);
                    break;
                }
                Event::Error(e) => panic!("generation failed: {e}"),
            }
        }
    }
    (t.elapsed().as_secs_f64(), tokens, decode)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let path = args
        .iter()
        .find(|a| a.ends_with(".gguf"))
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join(".cache/models/SmolLM2-135M-Instruct.Q4_1.gguf"));
    if !path.exists() {
        eprintln!("{} is missing (python3 scripts/fetch_models.py)", path.display());
        return;
    }
    let (gen, reps) = (arg(&args, "--gen", 128), arg(&args, "--rounds", 5));

    // Compile times, on a compiler of its own (the first one builds the token trie).
    let gguf = wick_core::gguf::GgufFile::open(&path).expect("open");
    let tok = std::sync::Arc::new(Tokenizer::from_gguf(&gguf.metadata).expect("tokenizer"));
    drop(gguf);
    let compiler = GrammarCompiler::new(tok);
    let spec = GrammarSpec { kind: GrammarKind::JsonSchema, source: SCHEMA.into(), trigger_token: None };
    let t = Instant::now();
    compiler.compile(&spec).expect("compile");
    let first = t.elapsed().as_secs_f64() * 1e3;
    let t = Instant::now();
    for _ in 0..10 {
        compiler.compile(&spec).expect("compile");
    }
    let again = t.elapsed().as_secs_f64() * 1e2;

    let mut o = EngineOptions::new(&path);
    o.max_sequences = 8;
    o.context_size = Some(1024);
    let engine = Engine::load(o).expect("load");
    let text = "<|im_start|>user\nList fifty cities as JSON.<|im_end|>\n<|im_start|>assistant\n";
    let prompt = engine.tokenizer().encode(text, false, true).expect("encode");
    // Warm-up: kernels, the prefix cache of the prompt, the engine's token trie.
    run(&engine, vec![request(&prompt, 8, 0.0, 0, true), request(&prompt, 8, 0.0, 0, false)]);

    println!("| {:<34} | {:<30} | {:>22} |", "what", "case", "value");
    println!("|{:-<36}|{:-<32}|{:->24}|", "", "", "");
    row("compile the schema", "first (builds the token trie)", format!("{first:.1} ms"));
    row("compile the schema", "again", format!("{again:.2} ms"));

    for temperature in [0.0f32, 0.7] {
        let t = if temperature == 0.0 { "greedy".to_string() } else { format!("t={temperature}") };
        // Rounds alternate the cases (a shared machine's load drifts); each case's median,
        // and the median of the per-round ratios.
        let (mut single, mut batch) = ([vec![], vec![]], [vec![], vec![]]);
        let (mut compute, mut wait, mut masks) = (0usize, 0usize, 0usize);
        for r in 0..reps {
            for (i, constrained) in [false, true].into_iter().enumerate() {
                let req = request(&prompt, gen, temperature, r as u64 + 1, constrained);
                single[i].push(1e3 / run(&engine, vec![req]).2[0]);
            }
            for (i, half) in [false, true].into_iter().enumerate() {
                let m0 = engine.metrics();
                let seed = |k: usize| (r * 8 + k) as u64 + 1;
                let reqs =
                    (0..8).map(|k| request(&prompt, gen, temperature, seed(k), half && k % 2 == 0)).collect();
                let (wall, tokens, _) = run(&engine, reqs);
                batch[i].push(tokens as f64 / wall);
                let m = engine.metrics();
                masks += m.grammar_masks_total - m0.grammar_masks_total;
                compute += m.grammar_mask_compute_us_total - m0.grammar_mask_compute_us_total;
                wait += m.grammar_mask_wait_us_total - m0.grammar_mask_wait_us_total;
            }
        }
        let ratio = |v: &[Vec<f64>; 2]| {
            let mut r: Vec<f64> = v[1].iter().zip(&v[0]).map(|(c, u)| c / u).collect();
            100.0 * median(&mut r)
        };
        let (single_ratio, batch_ratio) = (ratio(&single), ratio(&batch));
        for (i, case) in ["unconstrained", "JSON schema"].into_iter().enumerate() {
            let rate = median(&mut single[i]);
            row(&format!("decode, 1 sequence, tg{gen}, {t}"), case, format!("{rate:.1} tok/s"));
        }
        row("  constrained / unconstrained", "median of paired rounds", format!("{single_ratio:.1} %"));
        for (i, case) in ["none constrained", "4 of 8 with the JSON schema"].into_iter().enumerate() {
            let rate = median(&mut batch[i]);
            row(&format!("batch of 8, tg{gen}, {t}"), case, format!("{rate:.1} tok/s"));
        }
        row("  half constrained / none", "median of paired rounds", format!("{batch_ratio:.1} %"));
        let per_mask = |us: usize| us as f64 / masks.max(1) as f64;
        row(
            "  mask per constrained token",
            "computed on a helper thread",
            format!("{:.0} µs", per_mask(compute)),
        );
        row("  mask per constrained token", "sampling waited for it", format!("{:.0} µs", per_mask(wait)));
    }
    println!("threads={}, {}", wick_core::runtime::pool::global().threads(), path.display());
}
