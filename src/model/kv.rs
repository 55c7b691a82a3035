//! The key/value cache of one sequence: per layer, the keys and values of every position so far.
//!
//! Storage grows as positions are appended (so a short chat does not pay for the whole context)
//! and never beyond `capacity` positions. The engine decides which caches live and for how long
//! (`engine::kv_cache`); the model reads and appends.

use crate::backend::{grouped_keys_len, store_keys, store_values};

/// Bytes of one stored key or value element (f16).
const BYTES_PER_VALUE: usize = 2;

/// Keys and values are stored as IEEE half floats (f16 bits, rounded to nearest even), as
/// llama.cpp's default cache type: attention at long contexts is bound by reading them, and
/// half the bytes read take about half the time (docs/performance.md, "Keys and values in f16").
pub struct KvCache {
    /// Per layer, the keys (f16 bits): grouped as attention reads them (`backend::key_index`,
    /// whole groups of 8 positions) in a cache made by [`KvCache::new`], position-major in one
    /// made by [`KvCache::position_major`].
    pub k: Vec<Vec<u16>>,
    /// Per layer, `len * kv_dim` values (f16 bits), position-major.
    pub v: Vec<Vec<u16>>,
    kv_dim: usize,
    len: usize,
    capacity: usize,
    grouped: bool,
}

impl KvCache {
    /// A cache for the backend's attention: keys grouped.
    pub fn new(n_layers: usize, kv_dim: usize, capacity: usize) -> KvCache {
        KvCache {
            k: vec![Vec::new(); n_layers],
            v: vec![Vec::new(); n_layers],
            kv_dim,
            len: 0,
            capacity,
            grouped: true,
        }
    }

    /// A cache whose keys are position-major rows, like its values (a model that reads its
    /// cache itself, such as the engine's toy model).
    pub fn position_major(n_layers: usize, kv_dim: usize, capacity: usize) -> KvCache {
        KvCache { grouped: false, ..KvCache::new(n_layers, kv_dim, capacity) }
    }

    /// Layer `l`'s keys and values of positions `len..len + n` (`n` rows of `kv_dim` each, n
    /// taken from `k`), before [`KvCache::advance`] makes them count; rounded to f16.
    pub fn append(&mut self, l: usize, k: &[f32], v: &[f32]) {
        if self.grouped {
            store_keys(&mut self.k[l], self.len, k, self.kv_dim);
        } else {
            store_values(&mut self.k[l], k);
        }
        store_values(&mut self.v[l], v);
    }

    /// Keys stored for `n` positions.
    fn keys_len(&self, n: usize) -> usize {
        if self.grouped {
            grouped_keys_len(n, self.kv_dim)
        } else {
            n * self.kv_dim
        }
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
            let keys = self.keys_len(len);
            self.k.iter_mut().for_each(|l| l.truncate(keys));
            self.v.iter_mut().for_each(|l| l.truncate(len * self.kv_dim));
        }
    }

    /// Marks `n` more positions as written; the model calls this once per forward, after it has
    /// appended them to every layer.
    pub fn advance(&mut self, n: usize) {
        self.len += n;
        debug_assert!(self.len <= self.capacity);
        debug_assert!(self.k.iter().all(|l| l.len() == self.keys_len(self.len)));
        debug_assert!(self.v.iter().all(|l| l.len() == self.len * self.kv_dim));
    }

    /// Bytes of memory the cache holds now (allocated, not just used).
    pub fn bytes(&self) -> usize {
        self.k.iter().chain(self.v.iter()).map(|l| l.capacity() * BYTES_PER_VALUE).sum()
    }

    /// Bytes one position costs across all layers, keys and values.
    pub fn bytes_per_position(&self) -> usize {
        self.k.len() * 2 * self.kv_dim * BYTES_PER_VALUE
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{f16_values, grouped_keys};

    /// Appends across groups, a rollback into the middle of a group and appends after it leave
    /// the keys the grouped layout of the rows that remain, and the values position-major.
    #[test]
    fn grouped_keys_survive_appends_and_a_rollback_inside_a_group() {
        let kvd = 3;
        let row = |p: usize, salt: f32| -> Vec<f32> { (0..kvd).map(|e| p as f32 * 10.0 + e as f32 + salt).collect() };
        let mut c = KvCache::new(2, kvd, 64);
        let feed = |c: &mut KvCache, from: usize, n: usize, salt: f32| {
            let rows: Vec<f32> = (from..from + n).flat_map(|p| row(p, salt)).collect();
            for l in 0..2 {
                c.append(l, &rows, &rows);
            }
            c.advance(n);
        };
        feed(&mut c, 0, 5, 0.0);
        feed(&mut c, 5, 7, 0.0);
        c.truncate(10);
        feed(&mut c, 10, 3, 0.5);
        let want: Vec<f32> = (0..13).flat_map(|p| row(p, if p < 10 { 0.0 } else { 0.5 })).collect();
        for l in 0..2 {
            assert_eq!(c.k[l], grouped_keys(&want, kvd), "layer {l}");
            assert_eq!(c.v[l], f16_values(&want), "layer {l}");
        }
        let mut p = KvCache::position_major(1, kvd, 64);
        p.append(0, &want, &want);
        p.advance(13);
        assert_eq!(p.k[0], f16_values(&want));
    }
}
