//! Token → bytes (llama.cpp `token_to_piece` with special=true) and the streaming
//! detokenizer that turns generated ids into text without splitting a UTF-8 character.

use std::collections::HashMap;

use super::bpe::byte_chars;
use super::vocab::{attr, Kind, Vocab};
use super::Tokenizer;

/// Every token's rendering, packed into one buffer.
pub(crate) struct Pieces {
    bytes: Vec<u8>,
    ends: Vec<usize>,
}

impl Pieces {
    pub fn new(vocab: &Vocab) -> Self {
        let unbyte: HashMap<char, u8> = byte_chars().iter().enumerate().map(|(b, &c)| (c, b as u8)).collect();
        let mut bytes = Vec::new();
        let mut ends = Vec::with_capacity(vocab.texts.len());
        for (id, text) in vocab.texts.iter().enumerate() {
            let a = vocab.attrs[id];
            if a & (attr::CONTROL | attr::UNKNOWN | attr::USER_DEFINED) != 0 {
                bytes.extend_from_slice(text.as_bytes());
            } else if a & attr::NORMAL != 0 {
                match vocab.kind {
                    Kind::Spm => bytes.extend_from_slice(text.replace('▁', " ").as_bytes()),
                    Kind::Bpe => render_byte_level(text, &unbyte, &mut bytes),
                }
            } else if a & attr::BYTE != 0 {
                bytes.extend(text.get(3..5).and_then(|h| u8::from_str_radix(h, 16).ok()));
            }
            ends.push(bytes.len());
        }
        Self { bytes, ends }
    }

    pub fn get(&self, id: u32) -> &[u8] {
        let id = id as usize;
        match self.ends.get(id) {
            Some(&end) => &self.bytes[if id == 0 { 0 } else { self.ends[id - 1] }..end],
            None => &[],
        }
    }
}

/// Byte-level text back to raw bytes. A character outside the byte table is rendered the
/// way llama.cpp does, so pieces stay comparable with it.
fn render_byte_level(text: &str, unbyte: &HashMap<char, u8>, out: &mut Vec<u8>) {
    for c in text.chars() {
        match unbyte.get(&c) {
            Some(&b) => out.push(b),
            None => {
                out.extend_from_slice(b"[UNK_BYTE_0x");
                for b in c.encode_utf8(&mut [0; 4]).bytes() {
                    out.extend_from_slice(format!("{b:02x}").as_bytes());
                }
                out.extend_from_slice(text.as_bytes());
                out.push(b']');
            }
        }
    }
}

/// Streams text out of generated ids without ever splitting a UTF-8 character: bytes of
/// an unfinished character wait for the next token; bytes that can never form one come
/// out as U+FFFD.
#[derive(Debug, Default)]
pub struct Detokenizer {
    pending: Vec<u8>,
}

impl Detokenizer {
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends one token; returns the text that is now complete (possibly empty). With
    /// `skip_special`, control and unknown tokens add nothing, as llama.cpp's
    /// `token_to_piece(special = false)` renders them.
    pub fn push(&mut self, tok: &Tokenizer, id: u32, skip_special: bool) -> String {
        if !(skip_special && tok.is_hidden(id)) {
            self.pending.extend_from_slice(tok.piece(id));
        }
        let mut out = String::new();
        let mut rest = &self.pending[..];
        loop {
            match std::str::from_utf8(rest) {
                Ok(s) => {
                    out.push_str(s);
                    rest = &[];
                    break;
                }
                Err(e) => {
                    let (valid, tail) = rest.split_at(e.valid_up_to());
                    out.push_str(std::str::from_utf8(valid).unwrap_or_default());
                    match e.error_len() {
                        // An incomplete character at the end: wait for more bytes.
                        None => {
                            rest = tail;
                            break;
                        }
                        Some(bad) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            rest = &tail[bad..];
                        }
                    }
                }
            }
        }
        self.pending = rest.to_vec();
        out
    }

    /// Ends a generation: the bytes still held back can only be an unfinished character (the
    /// model stopped inside it), which is dropped rather than shown as U+FFFD, so answers never
    /// end in a broken character. (Invalid bytes already came out of `push` as U+FFFD.)
    pub fn finish(&mut self) {
        self.pending.clear();
    }

    /// Ends the stream: whatever is still held back comes out (lossily).
    pub fn flush(&mut self) -> String {
        let out = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        out
    }
}
