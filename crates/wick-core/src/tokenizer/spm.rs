//! SentencePiece (llama `tokenizer.ggml.model = llama`) as llama.cpp runs it: start from
//! single characters and repeatedly merge the adjacent pair whose concatenation is the
//! highest-scoring vocab entry (leftmost on ties); characters left unmerged and absent
//! from the vocab fall back to `<0xNN>` byte tokens. Any vocab entry may form, including
//! control tokens, exactly as llama.cpp allows.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use super::vocab::Vocab;

pub(crate) struct Spm {
    /// Token for each byte value: `<0xNN>`, else the byte itself as a one-char token.
    byte_tokens: [Option<u32>; 256],
}

#[derive(Clone, Copy)]
struct Symbol {
    start: usize,
    len: usize,
    prev: Option<usize>,
    next: Option<usize>,
}

struct Candidate {
    score: f32,
    left: usize,
    right: usize,
    len: usize,
}

impl Ord for Candidate {
    fn cmp(&self, other: &Self) -> Ordering {
        self.score
            .partial_cmp(&other.score)
            .unwrap_or(Ordering::Equal)
            .then_with(|| other.left.cmp(&self.left))
    }
}
impl PartialOrd for Candidate {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl PartialEq for Candidate {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Candidate {}

impl Spm {
    pub fn new(vocab: &Vocab) -> Self {
        let mut byte_tokens = [None; 256];
        for (b, slot) in byte_tokens.iter_mut().enumerate() {
            *slot = vocab.lookup(&format!("<0x{b:02X}>")).or_else(|| {
                let c = char::from_u32(b as u32).filter(|c| c.is_ascii())?;
                vocab.lookup(c.encode_utf8(&mut [0; 4]))
            });
        }
        Self { byte_tokens }
    }

    /// Tokenizes `text`, whose spaces the caller has already turned into `▁`.
    pub fn encode(&self, vocab: &Vocab, text: &str, out: &mut Vec<u32>) {
        let n = text.chars().count();
        let mut symbols: Vec<Symbol> = text
            .char_indices()
            .enumerate()
            .map(|(i, (start, c))| Symbol {
                start,
                len: c.len_utf8(),
                prev: i.checked_sub(1),
                next: (i + 1 < n).then_some(i + 1),
            })
            .collect();
        let mut queue = BinaryHeap::new();
        let push = |queue: &mut BinaryHeap<Candidate>, symbols: &[Symbol], left: usize, right: usize| {
            let (l, r) = (symbols[left], symbols[right]);
            let merged = &text[l.start..r.start + r.len];
            if let Some(id) = vocab.lookup(merged) {
                queue.push(Candidate { score: vocab.scores[id as usize], left, right, len: merged.len() });
            }
        };
        for i in 1..symbols.len() {
            push(&mut queue, &symbols, i - 1, i);
        }
        while let Some(c) = queue.pop() {
            let (l, r) = (symbols[c.left], symbols[c.right]);
            // Stale: one side was merged away or grew since this pair was queued.
            if l.len == 0 || r.len == 0 || l.len + r.len != c.len {
                continue;
            }
            symbols[c.left].len += r.len;
            symbols[c.left].next = r.next;
            symbols[c.right].len = 0;
            if let Some(next) = r.next {
                symbols[next].prev = Some(c.left);
            }
            if let Some(prev) = l.prev {
                push(&mut queue, &symbols, prev, c.left);
            }
            if let Some(next) = r.next {
                push(&mut queue, &symbols, c.left, next);
            }
        }
        let mut cur = (!symbols.is_empty()).then_some(0);
        while let Some(i) = cur {
            let s = symbols[i];
            let piece = &text[s.start..s.start + s.len];
            match vocab.lookup(piece) {
                Some(id) => out.push(id),
                None => out.extend(piece.bytes().filter_map(|b| self.byte_tokens[b as usize].or(vocab.unk))),
            }
            cur = s.next;
        }
    }
}
