//! Splitting special tokens out of raw text before tokenization (llama.cpp
//! `tokenizer_st_partition`): each special token in turn, longest first, is cut out of
//! every text fragment still left. User-defined tokens are always cut; control and unknown
//! tokens only when the caller parses special text.

use std::ops::Range;

use super::vocab::{attr, Vocab};

pub(crate) enum Fragment {
    Text(Range<usize>),
    Token(u32),
}

pub(crate) fn partition(vocab: &Vocab, specials: &[u32], text: &str, parse_special: bool) -> Vec<Fragment> {
    let mut frags = Vec::new();
    if text.is_empty() {
        return frags;
    }
    frags.push(Fragment::Text(0..text.len()));
    for &id in specials {
        let a = vocab.attr(id);
        let tok = vocab.texts[id as usize].as_str();
        if (!parse_special && a & (attr::CONTROL | attr::UNKNOWN) != 0) || !text.contains(tok) {
            continue;
        }
        let mut next = Vec::with_capacity(frags.len() + 2);
        for f in frags {
            match f {
                Fragment::Text(r) => cut(text, r, tok, id, a, &mut next),
                token => next.push(token),
            }
        }
        frags = next;
    }
    frags
}

fn cut(text: &str, mut r: Range<usize>, tok: &str, id: u32, a: u16, out: &mut Vec<Fragment>) {
    let bytes = text.as_bytes();
    // C `isspace`: the whitespace llama.cpp strips after an rstrip token (Phi-3's markers).
    // llama.cpp's lstrip counterpart is only set for encoder vocabs Wick does not load.
    let space = |b: u8| matches!(b, b' ' | b'\t' | b'\n' | 0x0B | 0x0C | b'\r');
    while let Some(pos) = text[r.clone()].find(tok) {
        let at = r.start + pos;
        if at > r.start {
            out.push(Fragment::Text(r.start..at));
        }
        out.push(Fragment::Token(id));
        let mut right = at + tok.len();
        if a & attr::RSTRIP != 0 {
            while right < r.end && space(bytes[right]) {
                right += 1;
            }
        }
        r = right..r.end;
    }
    if !r.is_empty() {
        out.push(Fragment::Text(r));
    }
}
