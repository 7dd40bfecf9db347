//! Per-sequence cache state: attention KV and short-conv state.

/// Placeholder until the models land.
#[derive(Default)]
pub struct SeqCache {
    pub len: usize,
}

impl SeqCache {
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}
