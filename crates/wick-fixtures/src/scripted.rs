//! Scripted LFM2 fixtures: weights under which greedy decoding is a table lookup, so a model
//! served through the real LFM2 chat template writes a chosen text (tool calls, control
//! tokens mid-text) and then EOS. Every block's output projection (short-conv `out_proj`,
//! `attn_output`, `ffn_down`) is zero, so the residual stream stays the current token's
//! embedding whatever the context; each script token's embedding is its own one-hot
//! direction, and the untied `output.weight` maps that direction to the next token.
//! The chain starts at the last token of the generation prompt `<|im_start|>assistant\n`.

use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};
use wick_core::error::{Result, WickError};

use super::build::{build_fixture, Gaussian};
use super::gguf_write::Meta;
use super::tool_vocab::{ToolVocab, LFM2_CONTROL_TOKENS, LFM2_EOS, LFM2_THINK_TOKENS};
use crate::{tool_spec, FixtureSpec};

/// One scripted fixture: the file, and the pieces (one token each, control tokens by their
/// text) its model generates before EOS (`<|im_end|>`).
#[derive(Debug, Clone, Copy)]
pub struct Script {
    pub file_name: &'static str,
    pub pieces: &'static [&'static str],
    /// A reasoning model: the vocabulary of `ToolVocab::with_thinking` (`<think>` tokens, the
    /// LFM2.5 thinking template) instead of the tool-calling one.
    pub thinking: bool,
}

impl Script {
    /// The generated text, markers included, EOS not.
    pub fn text(&self) -> String {
        self.pieces.concat()
    }
}

/// The scripts of the tool-calling end-to-end tests: Pythonic and JSON tool calls, text before
/// two parallel calls, a plain non-ASCII answer, and control tokens that must not reach
/// clients; and of the reasoning tests: a think block, then the answer after a blank line, as
/// LFM2.5's thinking models write it.
#[rustfmt::skip]
pub const SCRIPTS: &[Script] = &[
    Script {
        file_name: "scripted-lfm2-pythonic-call.gguf",
        pieces: &["<|tool_call_start|>", "[get_weather(", "city=\"Paris\", ", "days=3)]", "<|tool_call_end|>"],
        thinking: false,
    },
    Script {
        file_name: "scripted-lfm2-json-call.gguf",
        pieces: &["<|tool_call_start|>", "[{\"name\": ", "\"get_weather\", ", "\"arguments\": ",
                  "{\"city\": \"Paris\", ", "\"days\": 3}}]", "<|tool_call_end|>"],
        thinking: false,
    },
    Script {
        file_name: "scripted-lfm2-text-two-calls.gguf",
        pieces: &["Let", " me", " check", " both", " cities", ".", "<|tool_call_start|>", "[get_weather(",
                  "city=\"Paris\"), ", "get_weather(", "city=\"Tokyo\")]", "<|tool_call_end|>"],
        thinking: false,
    },
    Script {
        file_name: "scripted-lfm2-plain-answer.gguf",
        pieces: &["It", " is", " sunny", " in", " Paris", ",", " 21", "°C", "."],
        thinking: false,
    },
    Script {
        file_name: "scripted-lfm2-control-leak.gguf",
        pieces: &["Hello", "<|reserved_special_token_237|>", " world", "<|img_thumbnail|>", "!"],
        thinking: false,
    },
    Script {
        file_name: "scripted-lfm2-thinking.gguf",
        pieces: &["<think>", "Let", " me", " check", " the", " weather", "</think>", "\n\n", "It", " is",
                  " sunny", " today", "."],
        thinking: true,
    },
];

/// Where the scripts' texts, pieces and ids are listed for the TypeScript tests.
pub const SCRIPTS_MANIFEST: &str = "scripted-lfm2.json";

/// The token every script follows: the last of the generation prompt.
const SCRIPT_START: &str = "\n";

/// Logit of the scripted next token (all others are 0): the final norm scales a one-hot
/// state to √d, so the margin is `MARGIN·√d` (32 at d=64).
const MARGIN: f32 = 4.0;

/// The normal-text pieces of every script, which the shared vocabulary must hold.
pub fn script_pieces() -> Vec<&'static str> {
    SCRIPTS
        .iter()
        .flat_map(|s| s.pieces.iter().copied())
        .filter(|p| !LFM2_CONTROL_TOKENS.contains(p) && !LFM2_THINK_TOKENS.contains(p))
        .collect()
}

/// The two vocabularies scripts are built on (one per value of `Script::thinking`); only their
/// control tokens and chat templates differ.
pub struct ScriptVocabs {
    pub tools: ToolVocab,
    pub thinking: ToolVocab,
}

impl ScriptVocabs {
    pub fn build(llama_src: &std::path::Path) -> Result<Self> {
        let tools = ToolVocab::build(llama_src, &script_pieces())?;
        let thinking = ToolVocab::build(llama_src, &script_pieces())?.with_thinking(llama_src)?;
        Ok(Self { tools, thinking })
    }

    pub fn of(&self, script: &Script) -> &ToolVocab {
        if script.thinking {
            &self.thinking
        } else {
            &self.tools
        }
    }
}

/// The ids `script` generates, EOS last.
pub fn script_ids(vocab: &ToolVocab, script: &Script) -> Result<Vec<u32>> {
    let mut ids = script
        .pieces
        .iter()
        .map(|p| vocab.id(p).ok_or_else(|| WickError::Internal(format!("script piece {p:?} is not a token"))))
        .collect::<Result<Vec<_>>>()?;
    ids.push(LFM2_EOS);
    Ok(ids)
}

/// Shapes of the scripted models: the tools model's, in F16 so the one-hot embeddings and
/// the margin are stored exactly.
fn scripted_spec(file_name: &str) -> FixtureSpec {
    FixtureSpec { file_name: file_name.into(), dtype: GgmlDType::F16, seed: 70, ..tool_spec() }
}

/// The metadata and tensors of `script`'s model; `meta` is `vocab.metadata()`.
pub fn build_scripted(
    vocab: &ToolVocab,
    meta: &Meta,
    script: &Script,
) -> Result<(Meta, Vec<(String, QTensor)>)> {
    let spec = scripted_spec(script.file_name);
    let start = vocab.id(SCRIPT_START).ok_or_else(|| WickError::Internal("no newline token".into()))?;
    let chain: Vec<u32> = std::iter::once(start).chain(script_ids(vocab, script)?).collect();
    // Token `chain[k]` (k < slots) owns direction k and predicts `chain[k + 1]`.
    let slots = chain.len() - 1;
    let distinct: std::collections::HashSet<_> = chain.iter().collect();
    if distinct.len() != chain.len() || slots > spec.d {
        return Err(WickError::Internal(format!(
            "{}: a script needs distinct tokens, none of them the newline, and at most {} of them",
            script.file_name, spec.d
        )));
    }
    let (d, n_vocab) = (spec.d, vocab.len());
    // Tokens outside the chain get random embeddings, in the directions no script uses, so
    // the blocks never see an all-zero row.
    let mut embd = Gaussian::new(spec.seed).tensor(&[n_vocab, d], 0.0, 1.0)?.to_vec2::<f32>()?;
    for row in embd.iter_mut() {
        row[..slots].fill(0.0);
    }
    let mut head = vec![vec![0f32; d]; n_vocab];
    for (k, pair) in chain.windows(2).enumerate() {
        embd[pair[0] as usize] = (0..d).map(|j| if j == k { 1.0 } else { 0.0 }).collect();
        head[pair[1] as usize][k] = MARGIN;
    }
    let matrix = |rows: Vec<Vec<f32>>| -> Result<QTensor> {
        let t = Tensor::from_vec(rows.concat(), (n_vocab, d), &Device::Cpu)?;
        Ok(QTensor::quantize(&t, spec.dtype)?)
    };

    let (meta, mut tensors) = build_fixture(&spec, meta)?;
    for (name, t) in tensors.iter_mut() {
        let dims = t.shape().dims().to_vec();
        let fill = |v: f32, dtype| -> Result<QTensor> {
            Ok(QTensor::quantize(&Tensor::full(v, dims.as_slice(), &Device::Cpu)?, dtype)?)
        };
        if name == "token_embd.weight" {
            *t = matrix(std::mem::take(&mut embd))?;
        } else if ["shortconv.out_proj.weight", "attn_output.weight", "ffn_down.weight"]
            .iter()
            .any(|s| name.ends_with(s))
        {
            *t = fill(0.0, spec.dtype)?;
        } else if name == spec.final_norm {
            *t = fill(1.0, GgmlDType::F32)?;
        }
    }
    tensors.push(("output.weight".into(), matrix(head)?));
    Ok((meta, tensors))
}

/// `{ "<file>": { "text": …, "pieces": […], "ids": […] } }` for every script (ids end with
/// EOS; text and pieces do not).
pub fn scripts_manifest(vocabs: &ScriptVocabs) -> Result<String> {
    let strings = |v: &[&str]| v.iter().map(|p| json_string(p)).collect::<Vec<_>>().join(", ");
    let mut entries = vec![];
    for s in SCRIPTS {
        let ids = script_ids(vocabs.of(s), s)?.iter().map(u32::to_string).collect::<Vec<_>>().join(", ");
        entries.push(format!(
            "  {}: {{\n    \"text\": {},\n    \"pieces\": [{}],\n    \"ids\": [{ids}]\n  }}",
            json_string(s.file_name),
            json_string(&s.text()),
            strings(s.pieces)
        ));
    }
    Ok(format!("{{\n{}\n}}\n", entries.join(",\n")))
}

fn json_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}
