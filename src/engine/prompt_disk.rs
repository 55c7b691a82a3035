//! The prompt cache's disk tier: whole blocks of finished sequences' keys and values, written
//! off the decode thread into a directory that outlives the server, and loaded on admission
//! instead of prefilled. Eviction is least recently used, by size. A block that fails its
//! checks (`prompt_block.rs`) is deleted with a log line and never used; a directory that
//! cannot be written (disk full, read-only) turns the tier off with one log line, and serving
//! goes on.

use super::prompt_block::{self, Key, Shape, BLOCK_TOKENS};
use crate::model::sha256::{hex, Sha256};
use crate::model::KvCache;
use std::collections::{HashMap, HashSet};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Sequences shorter than this are not written: their prefill is fast anyway.
pub const MIN_STORED_TOKENS: usize = 512;
/// Bytes written per hour at most, so that a busy server does not wear a disk out.
pub const WRITE_BUDGET_PER_HOUR: u64 = 32 << 30;
/// The tier's size when `--prompt-cache-size` is not given.
pub const DEFAULT_MAX_BYTES: u64 = 4 << 30;
/// Blocks waiting for the writer at most; more are not written (the decode thread never waits).
const WRITE_QUEUE: usize = 64;
/// Bytes of a model file hashed into its identity: its head (the header, with every tensor's
/// name, type and shape) and evenly spread samples of the rest.
const IDENTITY_HEAD: u64 = 16 << 20;
const IDENTITY_SAMPLES: u64 = 64;
const IDENTITY_SAMPLE: u64 = 64 << 10;
const SUFFIX: &str = ".kvb";
/// Evicted block keys remembered, so that a miss on one is explained as an eviction.
const EVICTED_REMEMBERED: usize = 4096;
/// Misses kept for `GET /v1/mtplx/cache`.
const RECENT_MISSES: usize = 16;

/// What a lookup on admission found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lookup {
    /// Blocks were loaded.
    Hit,
    /// An idle cache in memory already held every block the prompt has.
    Held,
    /// The prompt has no whole block before its last token.
    TooShort,
    /// The tier holds no block that the prompt starts with (after what memory held).
    NoEntry,
    /// The block needed was evicted to make room.
    Evicted,
    /// The block needed failed its checks, and was deleted.
    Corrupt,
}

impl Lookup {
    pub fn label(self) -> &'static str {
        match self {
            Lookup::Hit => "hit",
            Lookup::Held => "held_in_memory",
            Lookup::TooShort => "too_short",
            Lookup::NoEntry => "no_entry",
            Lookup::Evicted => "evicted",
            Lookup::Corrupt => "corrupt",
        }
    }
}

/// A lookup that loaded nothing, for `GET /v1/mtplx/cache`.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Miss {
    pub reason: &'static str,
    pub prompt_tokens: usize,
    /// Seconds since the Unix epoch.
    pub at: u64,
}

/// The tier's state, as `GET /v1/mtplx/cache` shows it.
#[derive(Clone, Debug, serde::Serialize)]
pub struct DiskStatus {
    pub dir: String,
    pub blocks: usize,
    pub bytes: u64,
    pub max_bytes: u64,
    pub block_tokens: usize,
    pub min_stored_tokens: usize,
    /// False once a write failed (disk full, read-only): nothing more is written until restart.
    pub writing: bool,
    pub loaded_blocks: u64,
    pub stored_blocks: u64,
    pub dropped_blocks: u64,
    pub bad_blocks: u64,
    pub recent_misses: Vec<Miss>,
}

/// Where the tier lives and what it may hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiskConfig {
    pub dir: PathBuf,
    pub max_bytes: u64,
    /// What the cached values depend on: the model's files, the cache format, this build.
    pub identity: Key,
}

/// The identity of the model at `path` (a file, or a directory's files) for a cache `format`:
/// its size, its first 16 MiB and 64 samples of 64 KiB across it, hashed with the cache format
/// and the server's version. Sampled, not the whole file: a 7B file would take seconds to hash
/// at every start.
pub fn identity(path: &Path, format: &str) -> std::io::Result<Key> {
    let mut h = Sha256::default();
    h.update(format.as_bytes());
    h.update(env!("CARGO_PKG_VERSION").as_bytes());
    let mut files = vec![path.to_path_buf()];
    if path.is_dir() {
        files = std::fs::read_dir(path)?.flatten().map(|e| e.path()).filter(|p| p.is_file()).collect();
        files.sort();
    }
    for f in files {
        h.update(f.file_name().map(|n| n.as_encoded_bytes()).unwrap_or_default());
        let mut file = std::fs::File::open(&f)?;
        let len = file.metadata()?.len();
        h.update(&len.to_le_bytes());
        let mut buf = vec![0u8; IDENTITY_HEAD.min(len) as usize];
        file.read_exact(&mut buf)?;
        h.update(&buf);
        buf.truncate(IDENTITY_SAMPLE.min(len) as usize);
        for i in 0..IDENTITY_SAMPLES {
            file.seek(std::io::SeekFrom::Start((len - buf.len() as u64) * i / IDENTITY_SAMPLES))?;
            file.read_exact(&mut buf)?;
            h.update(&buf);
        }
    }
    Ok(h.finish())
}

/// Counters of the tier, read by the metrics.
#[derive(Default, Debug)]
pub struct DiskStats {
    pub loaded_blocks: AtomicU64,
    pub stored_blocks: AtomicU64,
    pub dropped_blocks: AtomicU64,
    pub bad_blocks: AtomicU64,
}

struct Entry {
    bytes: u64,
    used: u64,
}

#[derive(Default)]
struct Index {
    entries: HashMap<Key, Entry>,
    /// Keys sent to the writer and not written yet.
    pending: HashSet<Key>,
    total: u64,
    tick: u64,
    /// The most recently evicted keys, oldest first.
    evicted: std::collections::VecDeque<Key>,
}

impl Index {
    fn touch(&mut self, key: &Key) -> bool {
        self.tick += 1;
        let tick = self.tick;
        self.entries.get_mut(key).map(|e| e.used = tick).is_some()
    }

    fn evict(&mut self, key: Key) {
        self.remove(&key);
        if self.evicted.len() == EVICTED_REMEMBERED {
            self.evicted.pop_front();
        }
        self.evicted.push_back(key);
    }

    fn remove(&mut self, key: &Key) {
        if let Some(e) = self.entries.remove(key) {
            self.total -= e.bytes;
        }
    }
}

pub struct DiskTier {
    dir: PathBuf,
    max_bytes: u64,
    misses: Mutex<std::collections::VecDeque<Miss>>,
    identity: Key,
    index: Arc<Mutex<Index>>,
    writes: crossbeam_channel::Sender<(Key, Vec<u8>)>,
    off: Arc<AtomicBool>,
    pub stats: Arc<DiskStats>,
}

fn log(line: &str) {
    eprintln!("mtplx-lite: prompt cache: {line}");
}

fn file_of(dir: &Path, key: &Key) -> PathBuf {
    dir.join(format!("{}{SUFFIX}", hex(key)))
}

impl DiskTier {
    /// Opens (making it, private to this user) the directory, indexes the blocks there, and
    /// starts the writer thread.
    pub fn open(cfg: DiskConfig) -> std::io::Result<DiskTier> {
        std::fs::create_dir_all(&cfg.dir)?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&cfg.dir, std::fs::Permissions::from_mode(0o700))?;
        }
        let mut found: Vec<(std::time::SystemTime, Key, u64)> = Vec::new();
        for e in std::fs::read_dir(&cfg.dir)?.flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            let meta = e.metadata()?;
            if name.starts_with(".tmp-") {
                // A write a crash cut short: never renamed, so never indexed.
                let _ = std::fs::remove_file(e.path());
            } else if let Some(key) = name.strip_suffix(SUFFIX).and_then(parse_key) {
                found.push((meta.modified().unwrap_or(std::time::UNIX_EPOCH), key, meta.len()));
            }
        }
        found.sort();
        let mut index = Index::default();
        for (_, key, bytes) in found {
            index.tick += 1;
            index.total += bytes;
            index.entries.insert(key, Entry { bytes, used: index.tick });
        }
        log(&format!("{} blocks ({:.1} MB) in {}", index.entries.len(), index.total as f64 / 1e6, cfg.dir.display()));
        let index = Arc::new(Mutex::new(index));
        let (writes, rx) = crossbeam_channel::bounded(WRITE_QUEUE);
        let off = Arc::new(AtomicBool::new(false));
        let stats = Arc::new(DiskStats::default());
        let writer = Writer {
            dir: cfg.dir.clone(),
            max_bytes: cfg.max_bytes,
            index: index.clone(),
            off: off.clone(),
            stats: stats.clone(),
        };
        std::thread::Builder::new().name("mtplx-kv-writer".into()).spawn(move || writer.run(rx))?;
        let misses = Mutex::default();
        Ok(DiskTier {
            dir: cfg.dir,
            max_bytes: cfg.max_bytes,
            misses,
            identity: cfg.identity,
            index,
            writes,
            off,
            stats,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Index> {
        self.index.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Loads into `cache`, which holds the first `have` positions of `prompt`, the blocks of
    /// `prompt` the tier holds beyond them (the prompt's last token is always left to compute).
    /// Gives the cache's new length: `have` where nothing was loaded, else more, the positions
    /// from the block `have` falls in rewritten with the same values.
    pub fn load(&self, prompt: &[u32], have: usize, cache: &mut KvCache) -> (usize, Lookup) {
        let (len, lookup) = self.lookup(prompt, have, cache);
        if !matches!(lookup, Lookup::Hit | Lookup::Held) {
            let at = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
            let mut misses = self.misses.lock().unwrap_or_else(|e| e.into_inner());
            if misses.len() == RECENT_MISSES {
                misses.pop_front();
            }
            misses.push_back(Miss { reason: lookup.label(), prompt_tokens: prompt.len(), at });
        }
        (len, lookup)
    }

    fn lookup(&self, prompt: &[u32], have: usize, cache: &mut KvCache) -> (usize, Lookup) {
        let usable = prompt.len().saturating_sub(1) / BLOCK_TOKENS;
        let first = have / BLOCK_TOKENS;
        if usable == 0 {
            return (have, Lookup::TooShort);
        }
        if usable <= first {
            return (have, Lookup::Held);
        }
        let keys = prompt_block::chain(&self.identity, &prompt[..usable * BLOCK_TOKENS]);
        let present = {
            let mut index = self.lock();
            keys[first..].iter().take_while(|k| index.touch(k)).count()
        };
        let present = present.min((cache.capacity() / BLOCK_TOKENS).saturating_sub(first));
        if present == 0 {
            let evicted = self.lock().evicted.contains(&keys[first]);
            return (have, if evicted { Lookup::Evicted } else { Lookup::NoEntry });
        }
        let shape = shape_of(cache);
        let (mut len, mut lookup) = (have, Lookup::Corrupt);
        for (b, key) in keys.iter().enumerate().skip(first).take(present) {
            let path = file_of(&self.dir, key);
            let block = match std::fs::read(&path)
                .map_err(|e| e.to_string())
                .and_then(|bytes| prompt_block::decode(&bytes, &self.identity, key, shape).map_err(|e| e.to_string()))
            {
                Ok(block) => block,
                Err(why) => {
                    self.drop_block(key, &path, &why);
                    break;
                }
            };
            let tokens = &prompt[b * BLOCK_TOKENS..(b + 1) * BLOCK_TOKENS];
            if block.tokens != tokens {
                self.drop_block(key, &path, "its tokens are not the prompt's (a hash collision)");
                break;
            }
            if b == first {
                cache.truncate(b * BLOCK_TOKENS);
            }
            if !cache.extend_stored(BLOCK_TOKENS, &|l| (&block.layers[l].0, &block.layers[l].1)) {
                break;
            }
            (len, lookup) = (cache.len(), Lookup::Hit);
            self.stats.loaded_blocks.fetch_add(1, Ordering::Relaxed);
        }
        (len, lookup)
    }

    fn drop_block(&self, key: &Key, path: &Path, why: &str) {
        log(&format!("{}: {why}; deleted, not used", path.display()));
        self.stats.bad_blocks.fetch_add(1, Ordering::Relaxed);
        let _ = std::fs::remove_file(path);
        self.lock().remove(key);
    }

    /// Queues the whole blocks of a finished sequence that the tier lacks for writing. Copies
    /// them; the writing is the writer thread's.
    pub fn store(&self, tokens: &[u32], cache: &KvCache) {
        let n = tokens.len().min(cache.len());
        if n < MIN_STORED_TOKENS || self.off.load(Ordering::Relaxed) {
            return;
        }
        let shape = shape_of(cache);
        let keys = prompt_block::chain(&self.identity, &tokens[..n]);
        for (b, key) in keys.iter().enumerate() {
            {
                let mut index = self.lock();
                if index.entries.contains_key(key) || !index.pending.insert(*key) {
                    continue;
                }
            }
            let (from, to) = (b * BLOCK_TOKENS, (b + 1) * BLOCK_TOKENS);
            let Some(layers) = (0..shape.layers).map(|l| cache.stored(l, from, to)).collect::<Option<Vec<_>>>() else {
                self.lock().pending.remove(key);
                return; // a device holds the cache
            };
            let bytes = prompt_block::encode(&self.identity, key, &tokens[from..to], shape, &|l| layers[l]);
            if self.writes.try_send((*key, bytes)).is_err() {
                self.lock().pending.remove(key);
                self.stats.dropped_blocks.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    pub fn status(&self) -> DiskStatus {
        let (blocks, bytes) = {
            let index = self.lock();
            (index.entries.len(), index.total)
        };
        let n = |c: &AtomicU64| c.load(Ordering::Relaxed);
        DiskStatus {
            dir: self.dir.display().to_string(),
            blocks,
            bytes,
            max_bytes: self.max_bytes,
            block_tokens: BLOCK_TOKENS,
            min_stored_tokens: MIN_STORED_TOKENS,
            writing: !self.off.load(Ordering::Relaxed),
            loaded_blocks: n(&self.stats.loaded_blocks),
            stored_blocks: n(&self.stats.stored_blocks),
            dropped_blocks: n(&self.stats.dropped_blocks),
            bad_blocks: n(&self.stats.bad_blocks),
            recent_misses: self.misses.lock().unwrap_or_else(|e| e.into_inner()).iter().cloned().collect(),
        }
    }

    /// Deletes every block the tier holds (`DELETE /v1/mtplx/cache`); gives the blocks and
    /// bytes deleted. A block being written meanwhile lands afterwards.
    pub fn clear(&self) -> (usize, u64) {
        let mut index = self.lock();
        let (blocks, bytes) = (index.entries.len(), index.total);
        for key in index.entries.keys() {
            let _ = std::fs::remove_file(file_of(&self.dir, key));
        }
        index.entries.clear();
        index.total = 0;
        self.misses.lock().unwrap_or_else(|e| e.into_inner()).clear();
        (blocks, bytes)
    }
}

fn shape_of(cache: &KvCache) -> Shape {
    let f = cache.footprint();
    Shape { layers: cache.k.len(), keys: f.keys_len(BLOCK_TOKENS), values: f.values_len(BLOCK_TOKENS) }
}

fn parse_key(s: &str) -> Option<Key> {
    let mut key = [0u8; 32];
    if s.len() != 64 {
        return None;
    }
    for (i, b) in key.iter_mut().enumerate() {
        *b = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(key)
}

struct Writer {
    dir: PathBuf,
    max_bytes: u64,
    index: Arc<Mutex<Index>>,
    off: Arc<AtomicBool>,
    stats: Arc<DiskStats>,
}

impl Writer {
    fn run(self, rx: crossbeam_channel::Receiver<(Key, Vec<u8>)>) {
        let (mut window, mut written, mut seq) = (Instant::now(), 0u64, 0u64);
        for (key, mut bytes) in rx {
            // The checksum is the writer's: hashing megabytes has no place on the decode thread.
            prompt_block::seal(&mut bytes);
            let done = |w: &Writer| w.index.lock().unwrap_or_else(|e| e.into_inner()).pending.remove(&key);
            if window.elapsed() >= Duration::from_secs(3600) {
                (window, written) = (Instant::now(), 0);
            }
            let len = bytes.len() as u64;
            if self.off.load(Ordering::Relaxed) || written + len > WRITE_BUDGET_PER_HOUR || len > self.max_bytes {
                self.stats.dropped_blocks.fetch_add(1, Ordering::Relaxed);
                done(&self);
                continue;
            }
            self.evict_for(len);
            seq += 1;
            let tmp = self.dir.join(format!(".tmp-{}-{seq}", std::process::id()));
            let result = (|| {
                let mut f = std::fs::File::create(&tmp)?;
                f.write_all(&bytes)?;
                f.sync_data()?;
                std::fs::rename(&tmp, file_of(&self.dir, &key))
            })();
            match result {
                Ok(()) => {
                    written += len;
                    let mut index = self.index.lock().unwrap_or_else(|e| e.into_inner());
                    index.tick += 1;
                    let used = index.tick;
                    index.remove(&key);
                    index.entries.insert(key, Entry { bytes: len, used });
                    index.total += len;
                    index.pending.remove(&key);
                    self.stats.stored_blocks.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => {
                    let _ = std::fs::remove_file(&tmp);
                    log(&format!(
                        "writing to {}: {e}; the disk tier is off until restart, serving goes on",
                        self.dir.display()
                    ));
                    self.off.store(true, Ordering::Relaxed);
                    done(&self);
                }
            }
        }
    }

    /// Deletes least recently used blocks until `len` more bytes fit.
    fn evict_for(&self, len: u64) {
        let mut index = self.index.lock().unwrap_or_else(|e| e.into_inner());
        while index.total + len > self.max_bytes {
            let Some(victim) = index.entries.iter().min_by_key(|(_, e)| e.used).map(|(k, _)| *k) else { break };
            let _ = std::fs::remove_file(file_of(&self.dir, &victim));
            index.evict(victim);
        }
    }
}

#[cfg(test)]
#[path = "prompt_disk_tests.rs"]
mod tests;
