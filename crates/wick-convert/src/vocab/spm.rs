//! The SentencePiece vocabulary (`TextModel._create_vocab_sentencepiece`): pieces, scores and
//! types read from `tokenizer.model` (a protobuf `ModelProto`, parsed here without a
//! protobuf library), then added_tokens.json and tokenizer_config.json's added tokens on top.

use std::path::Path;

use serde_json::Value;

use super::bpe::looks_special;
use super::{TokenType, VocabOut};
use crate::config::read_json_opt;
use crate::error::{ConvertError, Result};

/// One `SentencePiece` message: piece, score, type (sentencepiece_model.proto numbering).
struct Piece {
    piece: String,
    score: f32,
    kind: u64,
}

fn varint(buf: &[u8], pos: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *buf.get(*pos)?;
        *pos += 1;
        v |= ((b & 0x7f) as u64) << shift;
        if b & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

/// Calls `f(field, wire_type, payload)` for each field of a message; varints and fixed
/// values come as their little-endian bytes.
fn fields(buf: &[u8], mut f: impl FnMut(u64, &[u8]) -> Option<()>) -> Option<()> {
    let mut pos = 0;
    while pos < buf.len() {
        let key = varint(buf, &mut pos)?;
        let (field, wire) = (key >> 3, key & 7);
        match wire {
            0 => {
                let v = varint(buf, &mut pos)?;
                f(field, &v.to_le_bytes())?;
            }
            1 => {
                let b = buf.get(pos..pos + 8)?;
                pos += 8;
                f(field, b)?;
            }
            2 => {
                let n = varint(buf, &mut pos)? as usize;
                let b = buf.get(pos..pos.checked_add(n)?)?;
                pos += n;
                f(field, b)?;
            }
            5 => {
                let b = buf.get(pos..pos + 4)?;
                pos += 4;
                f(field, b)?;
            }
            _ => return None,
        }
    }
    Some(())
}

fn parse_model(buf: &[u8]) -> Option<Vec<Piece>> {
    let mut pieces = vec![];
    fields(buf, |field, payload| {
        if field == 1 {
            let mut p = Piece { piece: String::new(), score: 0.0, kind: 1 };
            fields(payload, |f, b| {
                match f {
                    1 => p.piece = String::from_utf8(b.to_vec()).ok()?,
                    2 => p.score = f32::from_le_bytes(b.get(..4)?.try_into().ok()?),
                    3 => p.kind = u64::from_le_bytes(b.get(..8)?.try_into().ok()?),
                    _ => {}
                }
                Some(())
            })?;
            pieces.push(p);
        }
        Some(())
    })?;
    Some(pieces)
}

/// The tokens, scores and types of `dir`'s tokenizer.model, `vocab_size` long.
pub fn vocab(dir: &Path, vocab_size: Option<usize>) -> Result<VocabOut> {
    let path = dir.join("tokenizer.model");
    let bytes = std::fs::read(&path).map_err(|e| ConvertError::io(&path, e))?;
    let pieces = parse_model(&bytes)
        .filter(|p| !p.is_empty())
        .ok_or_else(|| ConvertError::tokenizer(format!("{}: not a SentencePiece model", path.display())))?;
    let n = vocab_size.unwrap_or(pieces.len());
    let mut tokens: Vec<String> = (0..n).map(|i| format!("[PAD{i}]")).collect();
    let mut scores = vec![-10000.0f32; n];
    let mut types = vec![TokenType::Unused; n];
    for (id, p) in pieces.iter().enumerate().take(n) {
        // sentencepiece types: 1 normal, 2 unknown, 3 control, 4 user defined, 5 unused, 6 byte;
        // the converter keeps unknown/control/unused/byte and calls the rest normal.
        types[id] = match p.kind {
            2 => TokenType::Unknown,
            3 => TokenType::Control,
            5 => TokenType::Unused,
            6 => TokenType::Byte,
            _ => TokenType::Normal,
        };
        tokens[id] = p.piece.clone();
        scores[id] = p.score;
    }
    if let Some(Value::Object(added)) = read_json_opt(&dir.join("added_tokens.json"))? {
        for (key, id) in added {
            let Some(id) = id.as_u64().map(|i| i as usize).filter(|&i| i < n) else { continue };
            tokens[id] = key;
            scores[id] = -1000.0;
            types[id] = TokenType::UserDefined;
        }
    }
    if let Some(cfg) = read_json_opt(&dir.join("tokenizer_config.json"))? {
        if let Some(Value::Object(dec)) = cfg.get("added_tokens_decoder") {
            for (id, data) in dec {
                let Some(id) = id.parse::<usize>().ok().filter(|&i| i < n) else { continue };
                let Some(mut token) = data.get("content").and_then(|c| c.as_str()).map(String::from) else {
                    continue;
                };
                let special = data.get("special").and_then(|s| s.as_bool()).unwrap_or(false);
                if special || looks_special(&token) {
                    types[id] = TokenType::Control;
                } else {
                    token = token.replace('\u{2581}', " ");
                    types[id] = TokenType::UserDefined;
                }
                scores[id] = -1000.0;
                tokens[id] = token;
            }
        }
    }
    Ok(VocabOut { model: "llama", pre: "default".into(), tokens, types, scores: Some(scores) })
}
