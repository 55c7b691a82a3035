//! The key/value cache of one sequence: per layer, the keys and values of every position so far.
//!
//! Storage grows as positions are appended (so a short chat does not pay for the whole context)
//! and never beyond `capacity` positions. The engine decides which caches live and for how long
//! (`engine::kv_cache`); the model reads and appends.

pub struct KvCache {
    /// Per layer, `len * kv_dim` keys, position-major.
    pub k: Vec<Vec<f32>>,
    /// Per layer, `len * kv_dim` values, position-major.
    pub v: Vec<Vec<f32>>,
    kv_dim: usize,
    len: usize,
    capacity: usize,
}

impl KvCache {
    pub fn new(n_layers: usize, kv_dim: usize, capacity: usize) -> KvCache {
        KvCache { k: vec![Vec::new(); n_layers], v: vec![Vec::new(); n_layers], kv_dim, len: 0, capacity }
    }

    /// Positions cached.
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// The most positions this cache may hold (the context length it was made for).
    pub fn capacity(&self) -> usize {
        self.capacity
    }
    pub fn kv_dim(&self) -> usize {
        self.kv_dim
    }

    /// Forgets every position from `len` on (speculative rollback, prefix reuse).
    pub fn truncate(&mut self, len: usize) {
        if len < self.len {
            self.len = len;
            for l in self.k.iter_mut().chain(self.v.iter_mut()) {
                l.truncate(len * self.kv_dim);
            }
        }
    }

    /// Marks `n` more positions as written; the model calls this once per forward, after it has
    /// pushed `n * kv_dim` values onto every layer's `k` and `v`.
    pub fn advance(&mut self, n: usize) {
        self.len += n;
        debug_assert!(self.len <= self.capacity);
        debug_assert!(self.k.iter().all(|l| l.len() == self.len * self.kv_dim));
    }

    /// Bytes of memory the cache holds now (allocated, not just used).
    pub fn bytes(&self) -> usize {
        self.k.iter().chain(self.v.iter()).map(|l| l.capacity() * 4).sum()
    }

    /// Bytes one position costs across all layers, keys and values.
    pub fn bytes_per_position(&self) -> usize {
        self.k.len() * 2 * self.kv_dim * 4
    }
}
