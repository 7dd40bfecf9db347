//! A streaming GGUF (v3) writer: the header (metadata and tensor infos) first, whose sizes
//! are known before any weight is read, then each tensor's bytes as it is produced, padded
//! to the 32-byte alignment. Nothing of a tensor stays in memory after it is written.

use std::io::Write;

use crate::quant::GgmlType;

pub const ALIGNMENT: usize = 32;

/// A metadata value, with the GGUF value type gguf-py gives it.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    Str(String),
    I32s(Vec<i32>),
    F32s(Vec<f32>),
    Strs(Vec<String>),
}

/// One tensor's entry in the header.
#[derive(Clone, Debug)]
pub struct TensorEntry {
    pub name: String,
    /// ggml order: ne0 (the row length) first.
    pub ne: Vec<usize>,
    pub ty: GgmlType,
}

impl TensorEntry {
    pub fn n_elements(&self) -> usize {
        self.ne.iter().product()
    }

    pub fn n_bytes(&self) -> usize {
        self.ty.row_bytes(self.ne[0]) * self.ne[1..].iter().product::<usize>()
    }
}

fn pad(n: usize) -> usize {
    n.div_ceil(ALIGNMENT) * ALIGNMENT
}

struct Buf(Vec<u8>);

impl Buf {
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn str(&mut self, s: &str) {
        self.u64(s.len() as u64);
        self.0.extend_from_slice(s.as_bytes());
    }
    fn value(&mut self, v: &Value) {
        match v {
            Value::U32(x) => {
                self.u32(4);
                self.u32(*x);
            }
            Value::I32(x) => {
                self.u32(5);
                self.0.extend_from_slice(&x.to_le_bytes());
            }
            Value::F32(x) => {
                self.u32(6);
                self.0.extend_from_slice(&x.to_le_bytes());
            }
            Value::Bool(x) => {
                self.u32(7);
                self.0.push(*x as u8);
            }
            Value::Str(s) => {
                self.u32(8);
                self.str(s);
            }
            Value::I32s(a) => {
                self.array_head(5, a.len());
                a.iter().for_each(|x| self.0.extend_from_slice(&x.to_le_bytes()));
            }
            Value::F32s(a) => {
                self.array_head(6, a.len());
                a.iter().for_each(|x| self.0.extend_from_slice(&x.to_le_bytes()));
            }
            Value::Strs(a) => {
                self.array_head(8, a.len());
                a.iter().for_each(|s| self.str(s));
            }
        }
    }
    fn array_head(&mut self, elem: u32, n: usize) {
        self.u32(9);
        self.u32(elem);
        self.u64(n as u64);
    }
}

/// The header bytes (padded to the alignment) for `kvs` and `tensors`, tensor data laid out
/// in the order given.
pub fn header(kvs: &[(String, Value)], tensors: &[TensorEntry]) -> Vec<u8> {
    let mut b = Buf(Vec::with_capacity(1 << 20));
    b.0.extend_from_slice(b"GGUF");
    b.u32(3);
    b.u64(tensors.len() as u64);
    b.u64(kvs.len() as u64);
    for (k, v) in kvs {
        b.str(k);
        b.value(v);
    }
    let mut offset = 0usize;
    for t in tensors {
        b.str(&t.name);
        b.u32(t.ne.len() as u32);
        for &n in &t.ne {
            b.u64(n as u64);
        }
        b.u32(t.ty.id());
        b.u64(offset as u64);
        offset += pad(t.n_bytes());
    }
    let len = pad(b.0.len());
    b.0.resize(len, 0);
    b.0
}

/// Total file size for a header of `header_len` bytes and these tensors.
pub fn file_size(header_len: usize, tensors: &[TensorEntry]) -> u64 {
    (header_len + tensors.iter().map(|t| pad(t.n_bytes())).sum::<usize>()) as u64
}

/// Writes the zero padding after a tensor of `n` bytes.
pub fn write_padding(w: &mut impl Write, n: usize) -> std::io::Result<()> {
    const ZEROS: [u8; ALIGNMENT] = [0; ALIGNMENT];
    w.write_all(&ZEROS[..pad(n) - n])
}
