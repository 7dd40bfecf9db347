//! The KV block pool: fixed-size token blocks shared by all sequences, reference counted,
//! with a prefix cache. A full block is registered under a hash of the whole token prefix it
//! ends (so equal hashes mean equal KV), and when its last user leaves it stays cached until
//! the pool needs the space (least recently used first).

use std::collections::{BTreeMap, HashMap, VecDeque};

pub type BlockId = u32;

/// Hash of a token prefix ending at a block boundary, chained block by block.
pub fn chain_hash(parent: u64, tokens: &[u32]) -> u64 {
    // FNV-1a over the parent hash and the block's tokens: cheap, deterministic across runs.
    let mut h = 0xcbf2_9ce4_8422_2325u64 ^ parent.rotate_left(17);
    for &t in tokens {
        for b in t.to_le_bytes() {
            h ^= b as u64;
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

pub struct BlockPool {
    block_size: usize,
    refs: Vec<u32>,
    /// Never-cached or dropped blocks, ready for use.
    free: VecDeque<BlockId>,
    hash_of: Vec<Option<u64>>,
    by_hash: HashMap<u64, BlockId>,
    /// Cached blocks nobody uses, oldest release first: evicted when `free` runs dry.
    idle: BTreeMap<u64, BlockId>,
    idle_tick: Vec<u64>,
    tick: u64,
}

impl BlockPool {
    pub fn new(n_blocks: usize, block_size: usize) -> Self {
        Self {
            block_size,
            refs: vec![0; n_blocks],
            free: (0..n_blocks as BlockId).collect(),
            hash_of: vec![None; n_blocks],
            by_hash: HashMap::new(),
            idle: BTreeMap::new(),
            idle_tick: vec![0; n_blocks],
            tick: 0,
        }
    }

    pub fn block_size(&self) -> usize {
        self.block_size
    }
    pub fn n_blocks(&self) -> usize {
        self.refs.len()
    }
    /// Blocks that an allocation could get (free or idle cached).
    pub fn n_available(&self) -> usize {
        self.free.len() + self.idle.len()
    }
    /// Blocks held by running sequences.
    pub fn n_used(&self) -> usize {
        self.n_blocks() - self.n_available()
    }
    pub fn n_cached(&self) -> usize {
        self.by_hash.len()
    }

    /// A block for new tokens, evicting the least recently used idle cached block if needed.
    pub fn allocate(&mut self) -> Option<BlockId> {
        let b = match self.free.pop_front() {
            Some(b) => b,
            None => {
                let (_, b) = self.idle.pop_first()?;
                if let Some(h) = self.hash_of[b as usize].take() {
                    self.by_hash.remove(&h);
                }
                b
            }
        };
        self.refs[b as usize] = 1;
        Some(b)
    }

    /// Drops one reference to each block; unreferenced cached blocks go idle, others free.
    pub fn release(&mut self, blocks: &[BlockId]) {
        for &b in blocks {
            let r = &mut self.refs[b as usize];
            debug_assert!(*r > 0, "block {b} released more often than taken");
            *r = r.saturating_sub(1);
            if *r == 0 {
                if self.hash_of[b as usize].is_some() {
                    self.tick += 1;
                    self.idle_tick[b as usize] = self.tick;
                    self.idle.insert(self.tick, b);
                } else {
                    self.free.push_back(b);
                }
            }
        }
    }

    /// The cached blocks holding the longest prefix of `tokens` made of whole blocks, each
    /// with a new reference taken, and the hash chain up to their end. The chain starts at
    /// `salt` (what else the KV depends on: the LoRA adapters; 0 for none).
    pub fn lookup(&mut self, tokens: &[u32], salt: u64) -> (Vec<BlockId>, u64) {
        let mut found = Vec::new();
        let mut h = salt;
        for chunk in tokens.chunks_exact(self.block_size) {
            let next = chain_hash(h, chunk);
            let Some(&b) = self.by_hash.get(&next) else { break };
            self.take(b);
            found.push(b);
            h = next;
        }
        (found, h)
    }

    /// Registers a full block under its prefix hash. If an equal block is already cached the
    /// new one stays private (the copies hold the same KV).
    pub fn register(&mut self, b: BlockId, hash: u64) {
        if self.hash_of[b as usize].is_none() && !self.by_hash.contains_key(&hash) {
            self.hash_of[b as usize] = Some(hash);
            self.by_hash.insert(hash, b);
        }
    }

    pub fn is_cached(&self, hash: u64) -> bool {
        self.by_hash.contains_key(&hash)
    }

    fn take(&mut self, b: BlockId) {
        let r = &mut self.refs[b as usize];
        if *r == 0 {
            self.idle.remove(&self.idle_tick[b as usize]);
        }
        *r += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hashes(tokens: &[u32], bs: usize) -> Vec<u64> {
        let mut h = 0;
        tokens
            .chunks_exact(bs)
            .map(|c| {
                h = chain_hash(h, c);
                h
            })
            .collect()
    }

    #[test]
    fn allocate_release_roundtrip() {
        let mut p = BlockPool::new(3, 4);
        let a: Vec<_> = (0..3).map(|_| p.allocate().unwrap()).collect();
        assert_eq!(p.allocate(), None);
        assert_eq!(p.n_used(), 3);
        p.release(&a);
        assert_eq!(p.n_available(), 3);
    }

    #[test]
    fn prefix_lookup_finds_whole_blocks_only() {
        let mut p = BlockPool::new(8, 4);
        let toks: Vec<u32> = (0..10).collect();
        let blocks: Vec<_> = (0..3).map(|_| p.allocate().unwrap()).collect();
        for (b, h) in blocks.iter().zip(hashes(&toks, 4)) {
            p.register(*b, h);
        }
        p.release(&blocks);
        let (found, _) = p.lookup(&toks, 0);
        assert_eq!(found, blocks[..2].to_vec(), "10 tokens = 2 whole blocks");
        let mut other = toks.clone();
        other[5] = 99;
        p.release(&found);
        assert_eq!(p.lookup(&other, 0).0, blocks[..1].to_vec(), "diverges in block 2");
    }

    #[test]
    fn idle_cached_blocks_are_evicted_lru_when_space_runs_out() {
        let mut p = BlockPool::new(2, 2);
        let (a, b) = (p.allocate().unwrap(), p.allocate().unwrap());
        p.register(a, 1);
        p.register(b, 2);
        p.release(&[b]);
        p.release(&[a]);
        assert_eq!(p.n_cached(), 2);
        assert_eq!(p.allocate(), Some(b), "b went idle first");
        assert!(!p.is_cached(2) && p.is_cached(1));
    }

    #[test]
    fn a_used_cached_block_is_never_evicted() {
        let mut p = BlockPool::new(1, 2);
        let a = p.allocate().unwrap();
        p.register(a, 7);
        assert_eq!(p.allocate(), None);
        p.release(&[a]);
        let (found, _) = p.lookup(&[0, 0], 0);
        assert!(found.is_empty(), "hash of [0,0] is not 7");
    }
}
