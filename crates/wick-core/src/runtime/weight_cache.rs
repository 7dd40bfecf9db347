//! The pack cache: a model's repacked weights saved in one file, keyed by the GGUF's
//! fingerprint and the packing code's (`kernels::PackedWeight::layout_fingerprint`), so the
//! next start maps them instead of packing again. Packing a 1 GB model reads and writes every
//! byte into fresh memory, most of its load; mapping the cache file reads nothing until a
//! weight is used, and its pages are the page cache's, shared between processes.
//!
//! This module stores named byte ranges with a few numbers each (what the kernels need to
//! rebuild a weight around them, and check); it knows nothing of their layout.
//!
//! A file is written once, to a temporary name renamed into place, and never changed after:
//! a process that maps it is safe from a writer, and deleting it (or the whole directory) is
//! always safe — the next load packs again and writes a new one. A file that does not read
//! back whole (another key, a short or foreign file) is ignored and replaced.
//!
//! Layout: a 4 KiB header (magic, key, where the index lies), each weight's bytes at a 4
//! KiB-aligned offset, then the index (per weight: its name, numbers and byte range). The file
//! is written by a thread of its own once the load ends, from the model's own buffers.

use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::ops::{Deref, Range};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use sha2::{Digest, Sha256};

use super::alloc::StreamedBytes;

const MAGIC: &[u8; 8] = b"WICKPACK";
/// Bumped when the file's own layout changes (the weights' layout is in the key already).
const FORMAT: u32 = 2;
const ALIGN: u64 = 4096;
/// Cache files kept in a directory, newest first, while their total stays under this
/// (`WICK_PACK_CACHE_MAX_BYTES` overrides); the file just written is always kept.
const DEFAULT_MAX_BYTES: u64 = 32 << 30;

/// One model's weight cache for one load: reading a file that was there, or writing one.
pub struct WeightCache {
    path: PathBuf,
    state: Mutex<State>,
}

/// A weight's bytes in a mapped cache file.
pub struct MappedBytes {
    map: Arc<memmap2::Mmap>,
    range: Range<usize>,
}

impl Deref for MappedBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.map[self.range.clone()]
    }
}

enum State {
    Reading {
        map: Arc<memmap2::Mmap>,
        index: HashMap<String, Entry>,
        hits: usize,
    },
    /// The weights to write when the load ends, in load order; their bytes are shared with
    /// the model, so the file is written once the model is whole without a copy.
    Writing {
        key: [u8; 32],
        pending: Vec<(String, Vec<u64>, Arc<StreamedBytes>)>,
    },
    /// Nothing to do (the file was finished).
    Off {
        why: String,
    },
}

#[derive(Clone, Debug, PartialEq)]
struct Entry {
    /// What the kernels rebuild the weight from (its type, shape, parts).
    meta: Vec<u64>,
    offset: u64,
    len: u64,
}

/// What a load did with its cache, for the load's log line.
#[derive(Clone, Debug, PartialEq)]
pub enum WeightCacheUse {
    /// `weights` weights were mapped from `path`.
    Read { path: PathBuf, weights: usize },
    /// The weights are being written to `path` for the next load, off the load's thread
    /// (the file appears under that name once it is whole).
    Writing { path: PathBuf },
    /// Neither, and why (a write that failed; the load itself went on).
    Unused { why: String },
}

impl std::fmt::Debug for WeightCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WeightCache").field("path", &self.path).finish_non_exhaustive()
    }
}

impl WeightCache {
    /// The cache of the model named `stem` in `dir` whose file and code have the fingerprints
    /// `parts`: read when a whole file for this key is there, else written by this load.
    /// Never an error: a directory that cannot be written leaves the cache unused.
    pub fn open(dir: &Path, stem: &str, parts: &[[u8; 32]]) -> Self {
        let mut h = Sha256::new();
        h.update(MAGIC);
        h.update(FORMAT.to_le_bytes());
        parts.iter().for_each(|p| h.update(p));
        let key: [u8; 32] = h.finalize().into();
        let hex: String = key[..8].iter().map(|b| format!("{b:02x}")).collect();
        let stem: String = stem
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() || "-_.".contains(c) { c } else { '_' })
            .collect();
        let path = dir.join(format!("{stem}-{hex}.wpack"));
        let state = match read(&path, &key) {
            Some((map, index)) => {
                // The newest use keeps a file from being pruned first.
                let _ = File::options()
                    .append(true)
                    .open(&path)
                    .and_then(|f| f.set_modified(std::time::SystemTime::now()));
                let map = Arc::new(map);
                populate(map.clone());
                State::Reading { map, index, hits: 0 }
            }
            None => State::Writing { key, pending: vec![] },
        };
        Self { path, state: Mutex::new(state) }
    }

    /// The numbers and bytes saved as `name`, mapped from the file, when this load reads one.
    pub fn get(&self, name: &str) -> Option<(Vec<u64>, MappedBytes)> {
        let mut state = self.state.lock().ok()?;
        let State::Reading { map, index, hits } = &mut *state else { return None };
        let e = index.get(name)?;
        *hits += 1;
        let range = e.offset as usize..(e.offset + e.len) as usize;
        Some((e.meta.clone(), MappedBytes { map: map.clone(), range }))
    }

    /// Saves `bytes` with `meta` as `name`, when this load writes the file.
    pub fn put(&self, name: &str, meta: Vec<u64>, bytes: Arc<StreamedBytes>) {
        let Ok(mut state) = self.state.lock() else { return };
        let State::Writing { pending, .. } = &mut *state else { return };
        pending.push((name.to_string(), meta, bytes));
    }

    /// Ends the load's use of the cache: when this load packed the weights, a thread writes
    /// them to the file (a temporary name renamed into place) and prunes the directory.
    pub fn finish(&self) -> WeightCacheUse {
        let Ok(mut state) = self.state.lock() else {
            return WeightCacheUse::Unused { why: "the weight cache's lock was poisoned".into() };
        };
        let done = State::Off { why: "the weight cache was finished".into() };
        match std::mem::replace(&mut *state, done) {
            State::Reading { hits, .. } => WeightCacheUse::Read { path: self.path.clone(), weights: hits },
            State::Off { why } => WeightCacheUse::Unused { why },
            State::Writing { pending, .. } if pending.is_empty() => {
                WeightCacheUse::Unused { why: "no weight of this model is repacked".into() }
            }
            State::Writing { key, pending } => {
                let path = self.path.clone();
                let spawned = std::thread::Builder::new().name("wick-pack-cache".into()).spawn(move || {
                    // Nobody waits for it: a file that cannot be written is only a slower next load.
                    if write(&path, &key, &pending).is_ok() {
                        let max =
                            std::env::var("WICK_PACK_CACHE_MAX_BYTES").ok().and_then(|v| v.parse().ok());
                        prune(&path, max.unwrap_or(DEFAULT_MAX_BYTES));
                    }
                });
                match spawned {
                    Ok(_) => WeightCacheUse::Writing { path: self.path.clone() },
                    Err(e) => WeightCacheUse::Unused { why: format!("cannot start the cache's writer: {e}") },
                }
            }
        }
    }
}

/// The file at `path` mapped and its index, when its key is `key` and it reads back whole.
fn read(path: &Path, key: &[u8; 32]) -> Option<(memmap2::Mmap, HashMap<String, Entry>)> {
    let file = File::open(path).ok()?;
    // SAFETY: cache files are never written after they get their name (see the module docs).
    let map = unsafe { memmap2::MmapOptions::new().map(&file) }.ok()?;
    // Weights are streamed end to end every step: 2 MiB pages where the file system gives
    // large folios (ext4 and xfs on recent kernels map the page cache so; a hint elsewhere).
    #[cfg(target_os = "linux")]
    let _ = map.advise(memmap2::Advice::HugePage);
    let (header, len) = (map.get(..56)?, map.len() as u64);
    if &header[..8] != MAGIC || header[8..40] != key[..] {
        return None;
    }
    let (start, size) = (u64_at(header, 40)?, u64_at(header, 48)?);
    let end = start.checked_add(size).filter(|&e| e <= len)?;
    let index = parse_index(map.get(start as usize..end as usize)?)?;
    let whole = index.values().all(|e| e.offset.checked_add(e.len).is_some_and(|x| x <= start));
    whole.then_some((map, index))
}

/// Maps the file's pages into the process on a thread of its own (the page cache holds them
/// after the first start), so the first request does not fault them in one by one. A hint:
/// pages it has not reached yet are faulted in by whoever reads them first.
fn populate(map: Arc<memmap2::Mmap>) {
    #[cfg(target_os = "linux")]
    let _ = std::thread::Builder::new().name("wick-pack-populate".into()).spawn(move || {
        let _ = map.advise(memmap2::Advice::PopulateRead);
    });
    #[cfg(not(target_os = "linux"))]
    drop(map);
}

/// Writes `pending` to a temporary file beside `path` and renames it `path`; its length.
fn write(
    path: &Path,
    key: &[u8; 32],
    pending: &[(String, Vec<u64>, Arc<StreamedBytes>)],
) -> std::io::Result<u64> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    // One name per writer: two loads of one model in one process may both be writing.
    static WRITERS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = WRITERS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = path.with_extension(format!("tmp-{}-{n}", std::process::id()));
    let written = write_to(&tmp, key, pending).and_then(|len| std::fs::rename(&tmp, path).map(|_| len));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

fn write_to(
    tmp: &Path,
    key: &[u8; 32],
    pending: &[(String, Vec<u64>, Arc<StreamedBytes>)],
) -> std::io::Result<u64> {
    // The layout first, so that the file is written front to back in whole blocks.
    let mut at = ALIGN;
    let mut starts = Vec::with_capacity(pending.len());
    let mut index = Vec::new();
    index.extend((pending.len() as u64).to_le_bytes());
    for (name, meta, bytes) in pending {
        let start = at.div_ceil(ALIGN) * ALIGN;
        starts.push(start);
        at = start + bytes.len() as u64;
        index.extend((name.len() as u64).to_le_bytes());
        index.extend(name.as_bytes());
        let fields = [start, bytes.len() as u64, meta.len() as u64];
        for v in fields.into_iter().chain(meta.iter().copied()) {
            index.extend(v.to_le_bytes());
        }
    }
    let mut header = [0u8; ALIGN as usize];
    header[..8].copy_from_slice(MAGIC);
    header[8..40].copy_from_slice(key);
    header[40..48].copy_from_slice(&at.to_le_bytes());
    header[48..56].copy_from_slice(&(index.len() as u64).to_le_bytes());
    let mut out = BlockWriter::new(File::create(tmp)?);
    out.write_all(&header)?;
    let mut end = ALIGN;
    for ((_, _, bytes), &start) in pending.iter().zip(&starts) {
        out.write_all(&[0u8; ALIGN as usize][..(start - end) as usize])?;
        out.write_all(bytes)?;
        end = start + bytes.len() as u64;
    }
    out.write_all(&index)?;
    out.into_inner()?.sync_all()?;
    Ok(at + index.len() as u64)
}

/// Passes writes on in whole 2 MiB blocks (one or several at a time) at 2 MiB offsets, the last
/// one short. ext4 and xfs keep such writes in 2 MiB page-cache folios, which the next start
/// maps as huge pages. A file written in smaller or unaligned pieces stays in small folios,
/// mapped 4 KiB at a time, until its pages are evicted: half of a 0.7 GB cache file so, decode
/// was ~3 % slower.
struct BlockWriter<W: Write> {
    inner: W,
    block: Vec<u8>,
}

const BLOCK: usize = 2 << 20;

impl<W: Write> BlockWriter<W> {
    fn new(inner: W) -> Self {
        Self { inner, block: Vec::with_capacity(BLOCK) }
    }

    /// The writer beneath, once the last (short) block is written to it.
    fn into_inner(mut self) -> std::io::Result<W> {
        self.inner.write_all(&self.block)?;
        self.inner.flush()?;
        Ok(self.inner)
    }
}

impl<W: Write> Write for BlockWriter<W> {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        // At a boundary, whole blocks go straight through: no copy of a model's bytes.
        if self.block.is_empty() && b.len() >= BLOCK {
            let n = b.len() / BLOCK * BLOCK;
            self.inner.write_all(&b[..n])?;
            return Ok(n);
        }
        let n = b.len().min(BLOCK - self.block.len());
        self.block.extend_from_slice(&b[..n]);
        if self.block.len() == BLOCK {
            self.inner.write_all(&self.block)?;
            self.block.clear();
        }
        Ok(n)
    }

    /// Only the writer beneath: a short block written midway would put every later one off
    /// its boundary.
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

fn parse_index(b: &[u8]) -> Option<HashMap<String, Entry>> {
    let mut r = Reader(b);
    let count = r.u64()?;
    let mut index = HashMap::new();
    for _ in 0..count {
        let name_len = usize::try_from(r.u64()?).ok()?;
        let name = std::str::from_utf8(r.bytes(name_len)?).ok()?.to_string();
        let (offset, len, n_meta) = (r.u64()?, r.u64()?, r.u64()?);
        let meta = (0..n_meta.min(1 << 16)).map(|_| r.u64()).collect::<Option<Vec<_>>>()?;
        let entry = Entry { meta, offset, len };
        if index.insert(name, entry).is_some() {
            return None;
        }
    }
    Some(index)
}

/// The index's fields in order.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        let (head, rest) = (self.0.get(..n)?, &self.0[n..]);
        self.0 = rest;
        Some(head)
    }
    fn u64(&mut self) -> Option<u64> {
        u64_at(self.bytes(8)?, 0)
    }
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// Deletes the oldest cache files of `kept`'s directory past `max` bytes in all (never
/// `kept`), and temporary files of writers that died.
fn prune(kept: &Path, max: u64) {
    let Some(dir) = kept.parent() else { return };
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let mut files: Vec<(std::time::SystemTime, u64, PathBuf)> = entries
        .filter_map(|e| {
            let e = e.ok()?;
            let p = e.path();
            let m = e.metadata().ok()?;
            let modified = m.modified().ok()?;
            let ext = p.extension()?.to_string_lossy();
            // A writer that died midway left its temporary file; a live one is minutes old at most.
            let stale = modified.elapsed().is_ok_and(|age| age.as_secs() > 3600);
            if ext.starts_with("tmp-") && stale {
                let _ = std::fs::remove_file(&p);
            }
            (ext == "wpack").then_some((modified, m.len(), p))
        })
        .collect();
    files.sort_by_key(|f| std::cmp::Reverse(f.0));
    let mut total = files.iter().find(|f| f.2 == kept).map_or(0, |f| f.1);
    for (_, len, p) in files.into_iter().filter(|f| f.2 != kept) {
        total += len;
        if total > max {
            let _ = std::fs::remove_file(p);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use super::{prune, BlockWriter, BLOCK};

    /// The newest files stay while they fit the budget, the one just written always; a dead
    /// writer's temporary file goes, a live one's stays.
    #[test]
    fn prune_keeps_the_newest_files_within_the_budget() {
        let dir = std::env::temp_dir().join(format!("wick-prune-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let now = SystemTime::now();
        let file = |name: &str, len: usize, age_s: u64| {
            let p = dir.join(name);
            std::fs::write(&p, vec![0u8; len]).unwrap();
            let f = std::fs::File::options().append(true).open(&p).unwrap();
            f.set_modified(now - Duration::from_secs(age_s)).unwrap();
            p
        };
        let kept = file("old-but-just-written.wpack", 500, 9000);
        let newest = file("a.wpack", 300, 10);
        let middle = file("b.wpack", 300, 20);
        let oldest = file("c.wpack", 300, 30);
        let dead = file("d.tmp-1-0", 100, 7200);
        let live = file("e.tmp-2-0", 100, 5);
        let other = file("notes.txt", 10_000, 9000);
        prune(&kept, 1200);
        let exists = |p: &std::path::PathBuf| p.exists();
        assert!(exists(&kept) && exists(&newest) && exists(&middle) && exists(&live) && exists(&other));
        assert!(!exists(&oldest), "over the budget");
        assert!(!exists(&dead), "a dead writer's file");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Whatever the sizes of the writes, the writer beneath gets whole blocks (one or several
    /// at a time) and then the rest, and the bytes in order.
    #[test]
    fn block_writer_writes_whole_blocks() {
        use std::io::Write;
        struct Calls(Vec<Vec<u8>>);
        impl Write for Calls {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.push(b.to_vec());
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let data: Vec<u8> = (0..5 * BLOCK + 12_345).map(|i| (i * 131 % 251) as u8).collect();
        let mut w = BlockWriter::new(Calls(vec![]));
        let mut at = 0;
        for len in [1, 4095, 3 * BLOCK + 7, 0, 100_000].into_iter().cycle() {
            let len = len.min(data.len() - at);
            w.write_all(&data[at..at + len]).unwrap();
            w.flush().unwrap();
            at += len;
            if at == data.len() {
                break;
            }
        }
        let calls = w.into_inner().unwrap().0;
        let (last, whole) = calls.split_last().unwrap();
        assert!(
            whole.iter().all(|c| !c.is_empty() && c.len().is_multiple_of(BLOCK)),
            "{:?}",
            calls.iter().map(Vec::len).collect::<Vec<_>>()
        );
        assert!(last.len() < BLOCK);
        assert!(whole.iter().any(|c| c.len() > BLOCK), "several blocks at once");
        assert_eq!(calls.concat(), data);
    }
}
