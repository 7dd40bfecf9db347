//! BPE pre-tokenization: `tokenizer.ggml.pre` names a list of regexes (llama.cpp's
//! `llm_tokenizer_bpe` table). Each regex in turn splits every piece left by the previous
//! one into its matches and the gaps between them; nothing is ever dropped.

use std::borrow::Cow;
use std::ops::Range;

use fancy_regex::{Regex, RegexBuilder};

use crate::error::{Result, WickError};

const GPT2: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)";
const LLAMA3: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const QWEN2: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const QWEN35: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const CJK: &str = "[一-龥ࠀ-一가-\u{D7FF}]+";

const DEFAULT: &[&str] = &[r"[\p{P}\$\+<=>\^~\|]+", GPT2, r"\p{N}+", "[0-9][0-9][0-9]"];
const FALCON: &[&str] = &[r"[\p{P}\$\+<=>\^~\|`]+", GPT2, "[0-9][0-9][0-9]"];
const STARCODER: &[&str] = &[r"\p{N}", GPT2];
const DEEPSEEK_CODER: &[&str] = &[r"[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", CJK, r"\p{N}"];
const DEEPSEEK_LLM: &[&str] =
    &[r"[\r\n]", DEEPSEEK_LLM_LETTERS, r"\s?[!-/:-~！-／：-～‘-‟　-。]+", r"\s+$", CJK, r"\p{N}+"];
/// deepseek-llm's explicit letter ranges (cased scripts only; CJK has its own rule).
const DEEPSEEK_LLM_LETTERS: &str = r"\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+";

/// How one `tokenizer.ggml.pre` value tokenizes, per llama.cpp.
pub(crate) struct PreSpec {
    pub regexes: &'static [&'static str],
    /// A word that is itself a token is emitted whole, skipping merges (llama3 family).
    pub ignore_merges: bool,
    /// Default for `tokenizer.ggml.add_bos_token` when the key is absent.
    pub add_bos: bool,
}

pub(crate) fn spec(pre: &str) -> Option<PreSpec> {
    let plain = |regexes| Some(PreSpec { regexes, ignore_merges: false, add_bos: false });
    match pre {
        "default" => plain(DEFAULT),
        "llama3" | "llama-v3" | "llama-bpe" | "lfm2" | "falcon3" | "falcon-h1" | "pixtral" | "midm-2.0" => {
            Some(PreSpec { regexes: &[LLAMA3], ignore_merges: true, add_bos: true })
        }
        "dbrx" | "smaug-bpe" => plain(&[LLAMA3]),
        "qwen2" | "deepseek-r1-qwen" | "megrez" | "stablelm2" | "hunyuan" | "solar-open" => plain(&[QWEN2]),
        "qwen35" => plain(&[QWEN35]),
        "gpt-2" | "phi-2" | "mpt" | "olmo" | "jais" | "exaone4" => plain(&[GPT2]),
        "starcoder" | "refact" | "command-r" | "smollm" | "codeshell" | "exaone" | "minerva-7b" => {
            plain(STARCODER)
        }
        "falcon" => plain(FALCON),
        "deepseek-llm" => plain(DEEPSEEK_LLM),
        "deepseek-coder" => plain(DEEPSEEK_CODER),
        _ => None,
    }
}

pub(crate) struct PreTokenizer {
    regexes: Vec<Regex>,
}

impl PreTokenizer {
    pub fn new(spec: &PreSpec) -> Result<Self> {
        let regexes = spec
            .regexes
            .iter()
            .map(|re| {
                RegexBuilder::new(re)
                    // These patterns backtrack at most linearly; the default limit could
                    // refuse a long whitespace run.
                    .backtrack_limit(usize::MAX)
                    .build()
                    .map_err(|e| WickError::Internal(format!("pre-tokenizer regex `{re}`: {e}")))
            })
            .collect::<Result<_>>()?;
        Ok(Self { regexes })
    }

    /// Splits `text` into the words BPE merges within.
    pub fn split<'t>(&self, text: &'t str) -> Vec<&'t str> {
        // llama.cpp runs its regexes with every non-ASCII whitespace character replaced by
        // U+000B, so explicit ranges such as `　-。` never see U+3000 itself.
        let subst = substitute_whitespace(text);
        let whole: Range<usize> = 0..subst.len();
        let mut pieces = vec![whole];
        for re in &self.regexes {
            let mut next = Vec::with_capacity(pieces.len() * 2);
            for piece in pieces {
                split_piece(re, &subst, piece, &mut next);
            }
            pieces = next;
        }
        match &subst {
            Cow::Borrowed(_) => pieces.into_iter().map(|r| &text[r]).collect(),
            Cow::Owned(s) => {
                let map = offset_map(text, s);
                pieces.into_iter().map(|r| &text[map[r.start]..map[r.end]]).collect()
            }
        }
    }
}

fn split_piece(re: &Regex, text: &str, piece: Range<usize>, out: &mut Vec<Range<usize>>) {
    let base = piece.start;
    let mut last = 0;
    for m in re.find_iter(&text[piece.clone()]) {
        // A regex that gives up leaves the rest of the piece whole rather than failing.
        let Ok(m) = m else { break };
        if m.start() == m.end() {
            continue;
        }
        if m.start() > last {
            out.push(base + last..base + m.start());
        }
        out.push(base + m.start()..base + m.end());
        last = m.end();
    }
    if base + last < piece.end {
        out.push(base + last..piece.end);
    }
}

fn substitute_whitespace(text: &str) -> Cow<'_, str> {
    let odd = |c: char| !c.is_ascii() && c.is_whitespace();
    if !text.chars().any(odd) {
        return Cow::Borrowed(text);
    }
    Cow::Owned(text.chars().map(|c| if odd(c) { '\u{0B}' } else { c }).collect())
}

/// Byte offset in `subst` (at char boundaries) → byte offset in `text`.
fn offset_map(text: &str, subst: &str) -> Vec<usize> {
    let mut map = vec![0; subst.len() + 1];
    for ((o, _), (s, _)) in text.char_indices().zip(subst.char_indices()) {
        map[s] = o;
    }
    map[subst.len()] = text.len();
    map
}
