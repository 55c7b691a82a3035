//! The key/value cache of one sequence: per layer, the keys and values of every position so far.
//!
//! Storage grows as positions are appended (so a short chat does not pay for the whole context)
//! and never beyond `capacity` positions. The engine decides which caches live and for how long
//! (`engine::kv_cache`); the model reads and appends.

use crate::backend::{store_keys, store_values, AttendSeq, DeviceKv, KvBuf, KvFormat};

/// Bytes of one stored key or value element (f16 or bf16).
const BYTES_PER_VALUE: usize = 2;

/// Positions that every layout stores as one contiguous run (the largest group of any
/// `KvFormat`): ranges of [`KvCache::stored`] start and end on multiples of it.
pub const STORED_GROUP: usize = 32;

/// Keys and values are stored as 16-bit floats (f16 as llama.cpp's default cache type, or bf16
/// where the backend multiplies bf16 pairs; both rounded to nearest even): attention at long
/// contexts is bound by reading them, and half the bytes read take about half the time
/// (docs/performance.md, "Keys and values in f16").
pub struct KvCache {
    /// Per layer, the keys: grouped as attention reads them (`backend::KvFormat::key_at`, whole
    /// groups of 8 positions) in a cache made by [`KvCache::new`], position-major f16 rows in one
    /// made by [`KvCache::position_major`].
    pub k: Vec<KvBuf>,
    /// Per layer, the values (`backend::KvFormat::values_len` of them).
    pub v: Vec<KvBuf>,
    kv_dim: usize,
    len: usize,
    capacity: usize,
    format: KvFormat,
    grouped: bool,
    /// Positions the buffers hold without reallocating ([`KvCache::reserve`]).
    room: usize,
    /// The storage a device backend keeps for this cache instead of `k` and `v`, made by its
    /// first pass.
    device: Option<Box<dyn DeviceKv>>,
}

/// What a cache's storage costs, known without a cache: its shape and layout. The engine's
/// budget counts with it, so that what it promises is what the buffers really take (keys are
/// stored in whole groups of positions and every buffer in whole cache lines).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvFootprint {
    layers: usize,
    kv_dim: usize,
    format: KvFormat,
    grouped: bool,
}

impl KvFootprint {
    /// Key elements a layer stores for positions `0..n`.
    pub fn keys_len(&self, n: usize) -> usize {
        if self.grouped {
            self.format.keys_len(n, self.kv_dim)
        } else {
            n * self.kv_dim
        }
    }

    /// Value elements a layer stores for positions `0..n`.
    pub fn values_len(&self, n: usize) -> usize {
        self.format.values_len(n, self.kv_dim)
    }

    /// Bytes the buffers of a cache take when they hold room for exactly `n` positions.
    pub fn bytes(&self, n: usize) -> usize {
        let per_layer = KvBuf::storage_for(self.keys_len(n)) + KvBuf::storage_for(self.values_len(n));
        self.layers * per_layer * BYTES_PER_VALUE
    }

    /// Bytes one position costs across all layers, keys and values (before rounding to groups).
    pub fn bytes_per_position(&self) -> usize {
        self.layers * 2 * self.kv_dim * BYTES_PER_VALUE
    }

    /// The most positions whose storage fits in `budget` bytes.
    pub fn positions_within(&self, budget: usize) -> usize {
        let mut n = budget / self.bytes_per_position().max(1);
        // Rounding adds at most a group and a line a buffer: a few steps back at most.
        while n > 0 && self.bytes(n) > budget {
            n -= 1;
        }
        n
    }
}

impl KvCache {
    /// A cache for the backend's attention, in the `format` it reads (`Backend::kv_format`).
    pub fn new(n_layers: usize, kv_dim: usize, capacity: usize, format: KvFormat) -> KvCache {
        KvCache {
            k: vec![KvBuf::new(); n_layers],
            v: vec![KvBuf::new(); n_layers],
            kv_dim,
            len: 0,
            capacity,
            format,
            grouped: true,
            room: 0,
            device: None,
        }
    }

    /// A cache whose keys are position-major rows, like its values (a model that reads its
    /// cache itself, such as the engine's toy model).
    pub fn position_major(n_layers: usize, kv_dim: usize, capacity: usize) -> KvCache {
        KvCache { grouped: false, ..KvCache::new(n_layers, kv_dim, capacity, KvFormat::F16) }
    }

    /// Layer `l`'s keys and values of positions `len..len + n` (`n` rows of `kv_dim` each, n
    /// taken from `k`), before [`KvCache::advance`] makes them count; rounded to the format.
    pub fn append(&mut self, l: usize, k: &[f32], v: &[f32]) {
        if self.grouped {
            store_keys(&mut self.k[l], self.len, k, self.kv_dim, self.format);
        } else {
            store_values(&mut self.k[l], self.len, k, self.kv_dim, self.format);
        }
        store_values(&mut self.v[l], self.len, v, self.kv_dim, self.format);
    }

    /// Layer `l`'s share of a pass that appends `rows` positions to it.
    pub fn attend_seq(&mut self, l: usize, rows: usize) -> AttendSeq<'_> {
        debug_assert!(self.grouped, "a position-major cache is read by its own model, not a pass");
        let layers = self.k.len();
        AttendSeq {
            rows,
            start: self.len,
            layer: l,
            keys: &mut self.k[l],
            values: &mut self.v[l],
            format: self.format,
            device: &mut self.device,
            layers,
            capacity: self.capacity,
        }
    }

    /// The shape and layout its storage is counted by.
    pub fn footprint(&self) -> KvFootprint {
        KvFootprint { layers: self.k.len(), kv_dim: self.kv_dim, format: self.format, grouped: self.grouped }
    }

    /// Keys stored for `n` positions.
    fn keys_len(&self, n: usize) -> usize {
        self.footprint().keys_len(n)
    }

    /// Makes room for `positions` in all (whole groups and lines, nothing more), so that
    /// appends up to there never reallocate: a buffer that outgrew its room would double.
    pub fn reserve(&mut self, positions: usize) {
        let f = self.footprint();
        self.k.iter_mut().for_each(|l| l.reserve_total(f.keys_len(positions)));
        self.v.iter_mut().for_each(|l| l.reserve_total(f.values_len(positions)));
        self.room = self.room.max(positions);
    }

    /// Positions it holds without reallocating.
    pub fn room(&self) -> usize {
        self.room
    }

    /// Gives back storage beyond `positions` (or beyond what it holds, if more).
    pub fn shrink_to(&mut self, positions: usize) {
        let (f, n) = (self.footprint(), positions.max(self.len));
        self.k.iter_mut().for_each(|l| l.shrink_to(f.keys_len(n)));
        self.v.iter_mut().for_each(|l| l.shrink_to(f.values_len(n)));
        self.room = self.room.min(n);
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
    /// How the keys and values are encoded and laid out, for attention to read them.
    pub fn format(&self) -> KvFormat {
        self.format
    }

    /// Forgets every position from `len` on (speculative rollback, prefix reuse).
    pub fn truncate(&mut self, len: usize) {
        if len < self.len {
            let was = std::mem::replace(&mut self.len, len);
            let keys = self.keys_len(len);
            self.k.iter_mut().for_each(|l| l.truncate(keys));
            let (format, kvd) = (self.format, self.kv_dim);
            for l in self.v.iter_mut() {
                let kept = format.values_len(len, kvd);
                l.truncate(kept);
                // The forgotten half of a last pair (the rest of a last group of 32 in tiles)
                // goes back to zero, as a new one's is: a kernel multiplies it by a weight of 0,
                // which a stale infinity would make NaN. Only positions that were written: past
                // them the buffer is zero already (a rollback every verify step pays for this).
                for p in len..(kept / kvd.max(1)).min(was) {
                    (0..kvd).for_each(|c| l[format.value_at(p, c, kvd)] = 0);
                }
            }
        }
    }

    /// Marks `n` more positions as written; the model calls this once per forward, after it has
    /// appended them to every layer.
    pub fn advance(&mut self, n: usize) {
        self.len += n;
        debug_assert!(self.len <= self.capacity);
        if self.device.is_none() {
            debug_assert!(self.k.iter().all(|l| l.len() == self.keys_len(self.len)));
            debug_assert!(self.v.iter().all(|l| l.len() == self.format.values_len(self.len, self.kv_dim)));
        }
    }

    /// Layer `l`'s keys and values of positions `from..to`, as stored: whole groups of the
    /// layout, so both ends must be multiples of [`STORED_GROUP`]. `None` where a device holds
    /// the cache, or the range is not held.
    pub fn stored(&self, l: usize, from: usize, to: usize) -> Option<(&[u16], &[u16])> {
        let aligned = from.is_multiple_of(STORED_GROUP) && to.is_multiple_of(STORED_GROUP);
        if self.device.is_some() || !aligned || from > to || to > self.len {
            return None;
        }
        let f = self.footprint();
        let keys = self.k.get(l)?.get(f.keys_len(from)..f.keys_len(to))?;
        let values = self.v.get(l)?.get(f.values_len(from)..f.values_len(to))?;
        Some((keys, values))
    }

    /// Appends `n` positions to every layer as [`KvCache::stored`] gave them (`layer(l)` gives
    /// layer `l`'s keys and values), and counts them. False, with nothing changed, where the
    /// cache's length or the given lengths do not fit the layout, or a device holds the cache.
    pub fn extend_stored<'a>(&mut self, n: usize, layer: &dyn Fn(usize) -> (&'a [u16], &'a [u16])) -> bool {
        let f = self.footprint();
        let (from, to) = (self.len, self.len + n);
        let fits = |l: usize| {
            let (k, v) = layer(l);
            k.len() == f.keys_len(to) - f.keys_len(from) && v.len() == f.values_len(to) - f.values_len(from)
        };
        let aligned = from.is_multiple_of(STORED_GROUP) && n.is_multiple_of(STORED_GROUP);
        if self.device.is_some() || !aligned || to > self.capacity || !(0..self.k.len()).all(fits) {
            return false;
        }
        for l in 0..self.k.len() {
            let (k, v) = layer(l);
            let (kb, vb) = (&mut self.k[l], &mut self.v[l]);
            let (k0, v0) = (kb.len(), vb.len());
            kb.resize(k0 + k.len());
            kb[k0..].copy_from_slice(k);
            vb.resize(v0 + v.len());
            vb[v0..].copy_from_slice(v);
        }
        self.len = to;
        self.room = self.room.max(to);
        true
    }

    /// Bytes of memory the cache holds now (allocated, not just used).
    pub fn bytes(&self) -> usize {
        let device = self.device.as_ref().map_or(0, |d| d.bytes());
        device + self.k.iter().chain(self.v.iter()).map(|l| l.capacity() * BYTES_PER_VALUE).sum::<usize>()
    }

    /// Bytes one position costs across all layers, keys and values.
    pub fn bytes_per_position(&self) -> usize {
        self.footprint().bytes_per_position()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{stored_keys, stored_values};

    /// Appends across groups, a rollback into the middle of a group (and of a pair of values)
    /// and appends after it leave the keys and values the layout of the rows that remain, in
    /// each format; a forgotten value that stays in the buffer (half of a pair, or in a group of
    /// tiles) reads zero until it is written again.
    #[test]
    fn keys_and_values_survive_appends_and_a_rollback_inside_a_group() {
        let kvd = 4;
        let row = |p: usize, salt: f32| -> Vec<f32> { (0..kvd).map(|e| p as f32 * 10.0 + e as f32 + salt).collect() };
        for format in [KvFormat::F16, KvFormat::Bf16Pairs, KvFormat::Bf16Tiles] {
            let mut c = KvCache::new(2, kvd, 64, format);
            let feed = |c: &mut KvCache, from: usize, n: usize, salt: f32| {
                let rows: Vec<f32> = (from..from + n).flat_map(|p| row(p, salt)).collect();
                for l in 0..2 {
                    c.append(l, &rows, &rows);
                }
                c.advance(n);
            };
            feed(&mut c, 0, 5, 0.0);
            feed(&mut c, 5, 7, 0.0);
            c.truncate(9);
            // Positions 9..12 were written before the rollback (in tiles, their group stays).
            let stale = (9..12).flat_map(|p| (0..kvd).map(move |e| format.value_at(p, e, kvd)));
            let stale: Vec<u16> = stale.map(|i| c.v[0].get(i).copied().unwrap_or(0)).collect();
            assert!(stale.iter().all(|&x| x == 0), "{format:?}: a value outlived the rollback: {stale:?}");
            feed(&mut c, 9, 4, 0.5);
            let want: Vec<f32> = (0..13).flat_map(|p| row(p, if p < 9 { 0.0 } else { 0.5 })).collect();
            for l in 0..2 {
                assert_eq!(c.k[l], stored_keys(&want, kvd, format), "{format:?} layer {l}");
                assert_eq!(c.v[l], stored_values(&want, kvd, format), "{format:?} layer {l}");
            }
        }
        let want: Vec<f32> = (0..13).flat_map(|p| row(p, 0.0)).collect();
        let mut p = KvCache::position_major(1, kvd, 64);
        p.append(0, &want, &want);
        p.advance(13);
        assert_eq!(p.k[0], stored_values(&want, kvd, KvFormat::F16));
    }

    /// Positions copied out with `stored` and into a fresh cache with `extend_stored` are the
    /// same bits as the cache they came from, in every format; misaligned ranges are refused.
    #[test]
    fn stored_ranges_move_between_caches_bit_for_bit() {
        let kvd = 6;
        let rows: Vec<f32> = (0..96 * kvd).map(|i| (i as f32 * 0.37).sin()).collect();
        for format in [KvFormat::F16, KvFormat::Bf16Pairs, KvFormat::Bf16Tiles] {
            let mut a = KvCache::new(2, kvd, 128, format);
            for l in 0..2 {
                a.append(l, &rows, &rows);
            }
            a.advance(96);
            let mut b = KvCache::new(2, kvd, 128, format);
            assert!(b.extend_stored(64, &|l| a.stored(l, 0, 64).unwrap()));
            assert!(b.extend_stored(32, &|l| a.stored(l, 64, 96).unwrap()));
            assert_eq!(b.len(), 96);
            for l in 0..2 {
                assert_eq!((&b.k[l][..], &b.v[l][..]), (&a.k[l][..], &a.v[l][..]), "{format:?}");
            }
            assert!(a.stored(0, 8, 40).is_none() && a.stored(0, 64, 128).is_none());
            assert!(!b.extend_stored(16, &|l| a.stored(l, 0, 32).unwrap()), "a length off the groups");
            assert_eq!(b.len(), 96);
        }
    }
}
