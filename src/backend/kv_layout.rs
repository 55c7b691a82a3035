//! How a sequence's cache lays out its keys and values for attention to read: in the format its
//! backend's kernel multiplies, so that a decode step reads each element without converting it.
//!
//! Keys are grouped by [`KEY_GROUP`] positions for the vector kernels (a kernel loads one element
//! of 8 keys as one vector, where position-major keys had to be transposed for every tile of
//! every decode step). Values are position-major in f16 and in pairs of positions in bf16 pairs.
//! For the AMX tiles it is the other way round: keys position-major, values grouped.

use super::cpu::float16::{f32s_to_bf16_through_f16, f32s_to_f16};
use super::kv_buf::KvBuf;

/// Positions per group of the key layout attention reads (see [`KvFormat::key_at`]).
pub const KEY_GROUP: usize = 8;
/// Positions per group of [`KvFormat::Bf16Tiles`]: a row of the values' tile holds 32 positions'
/// bf16 (64 bytes), and the kernel reads keys and values a group at a time.
pub const TILE_KEY_GROUP: usize = 32;

/// The encoding and arrangement of a cache's keys and values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvFormat {
    /// IEEE half bits (rounded to nearest even), read by the f32 kernels: each group of 8 keys
    /// holds element `e` of its 8 positions side by side, element after element; values are
    /// position-major rows.
    F16,
    /// bf16 bits in the pairs `vdpbf16ps` multiplies, read by the bf16 kernels: each value
    /// rounded to f16 and then to bf16 (both to nearest even), the pairs these kernels converted
    /// from an f16 cache at every read before, so outputs are the same bits as then. A group of
    /// 8 keys holds elements `(2i, 2i + 1)` of each of its 8 positions side by side (the pairs of
    /// the scores' dot products), and values go in pairs of positions, each column's two values
    /// side by side (the pairs of the weighted sum, along the keys). Converting on every read
    /// made a decode step's attention at 512 positions take 1.3-1.4x as long
    /// (docs/performance.md, "A cache in bf16 pairs").
    Bf16Pairs,
    /// The values of [`KvFormat::Bf16Pairs`] in the tiles' arrangement, read by the AMX kernel:
    /// keys position-major (a key's 32 elements are a 64-byte row of the tile the scores take),
    /// values in groups of 32 positions ([`TILE_KEY_GROUP`]) holding column `c` of its 32
    /// positions side by side (a row of the tile the weighted sum takes); both buffers in whole
    /// groups, so that a tile never reads past them. Its own format rather than another layout
    /// of bf16 pairs because tile products round otherwise than `vdpbf16ps`: a cache is read by
    /// one family of kernels, so a row's bits never depend on which of them ran it.
    Bf16Tiles,
}

impl KvFormat {
    /// Where element `e` (of `kv_dim`) of the key of position `p` is in a key buffer.
    #[inline]
    pub fn key_at(self, p: usize, e: usize, kv_dim: usize) -> usize {
        let group = (p / KEY_GROUP) * KEY_GROUP * kv_dim;
        match self {
            KvFormat::F16 => group + e * KEY_GROUP + p % KEY_GROUP,
            KvFormat::Bf16Pairs => group + (e / 2) * 2 * KEY_GROUP + (p % KEY_GROUP) * 2 + e % 2,
            KvFormat::Bf16Tiles => p * kv_dim + e,
        }
    }

    /// Positions per group of keys (and of values in bf16 tiles): buffers hold whole groups.
    #[inline]
    pub fn key_group(self) -> usize {
        match self {
            KvFormat::F16 | KvFormat::Bf16Pairs => KEY_GROUP,
            KvFormat::Bf16Tiles => TILE_KEY_GROUP,
        }
    }

    /// Length of a key buffer holding positions `0..n`: whole groups.
    pub fn keys_len(self, n: usize, kv_dim: usize) -> usize {
        n.div_ceil(self.key_group()) * self.key_group() * kv_dim
    }

    /// Where column `c` (of `kv_dim`) of the value of position `p` is in a value buffer.
    #[inline]
    pub fn value_at(self, p: usize, c: usize, kv_dim: usize) -> usize {
        match self {
            KvFormat::F16 => p * kv_dim + c,
            KvFormat::Bf16Pairs => (p / 2) * 2 * kv_dim + c * 2 + p % 2,
            KvFormat::Bf16Tiles => {
                (p / TILE_KEY_GROUP) * TILE_KEY_GROUP * kv_dim + c * TILE_KEY_GROUP + p % TILE_KEY_GROUP
            }
        }
    }

    /// Length of a value buffer holding positions `0..n` (whole pairs in bf16).
    pub fn values_len(self, n: usize, kv_dim: usize) -> usize {
        match self {
            KvFormat::F16 => n * kv_dim,
            KvFormat::Bf16Pairs => n.div_ceil(2) * 2 * kv_dim,
            KvFormat::Bf16Tiles => self.keys_len(n, kv_dim),
        }
    }

    /// A position-major row of f32 values in this format's encoding (its layout aside).
    fn encode_row(self, row: &[f32], coded: &mut [u16]) {
        match self {
            KvFormat::F16 => f32s_to_f16(row, coded),
            KvFormat::Bf16Pairs | KvFormat::Bf16Tiles => f32s_to_bf16_through_f16(row, coded),
        }
    }
}

/// Where element `e` of the key of position `p` is in an f16 key buffer ([`KvFormat::F16`]).
#[inline]
pub fn key_index(p: usize, e: usize, kv_dim: usize) -> usize {
    KvFormat::F16.key_at(p, e, kv_dim)
}

/// Writes position-major key `rows` (of `kv_dim`) for positions `start..` into the key buffer
/// `keys` in `format`, growing it to whole groups (a group's unwritten positions are zero).
///
/// # Panics
/// In bf16 pairs when `kv_dim` is odd (a pair would straddle two positions).
pub fn store_keys(keys: &mut KvBuf, start: usize, rows: &[f32], kv_dim: usize, format: KvFormat) {
    assert!(format == KvFormat::F16 || kv_dim.is_multiple_of(2), "bf16 pairs of keys of {kv_dim} elements");
    let n = rows.len() / kv_dim.max(1);
    let need = format.keys_len(start + n, kv_dim);
    if keys.len() < need {
        keys.resize(need);
    }
    let mut coded = vec![0u16; kv_dim];
    for (i, row) in rows.chunks_exact(kv_dim).enumerate() {
        format.encode_row(row, &mut coded);
        for (e, &x) in coded.iter().enumerate() {
            keys[format.key_at(start + i, e, kv_dim)] = x;
        }
    }
}

/// Writes position-major value `rows` (of `kv_dim`) for positions `start..` into the value
/// buffer `values` in `format`, growing it to [`KvFormat::values_len`] (the unwritten half of a
/// last pair is zero).
pub fn store_values(values: &mut KvBuf, start: usize, rows: &[f32], kv_dim: usize, format: KvFormat) {
    let n = rows.len() / kv_dim.max(1);
    let need = format.values_len(start + n, kv_dim);
    if values.len() < need {
        values.resize(need);
    }
    if format == KvFormat::F16 {
        // Position-major: the rows are the buffer's, in one conversion.
        return format.encode_row(rows, &mut values[start * kv_dim..(start + n) * kv_dim]);
    }
    let mut coded = vec![0u16; kv_dim];
    for (i, row) in rows.chunks_exact(kv_dim).enumerate() {
        format.encode_row(row, &mut coded);
        for (c, &h) in coded.iter().enumerate() {
            values[format.value_at(start + i, c, kv_dim)] = h;
        }
    }
}

/// Position-major keys of `kv_dim` into a new key buffer in `format` (tests and benchmarks).
pub fn stored_keys(rows: &[f32], kv_dim: usize, format: KvFormat) -> KvBuf {
    let mut keys = KvBuf::new();
    store_keys(&mut keys, 0, rows, kv_dim, format);
    keys
}

/// Position-major values of `kv_dim` into a new value buffer in `format` (tests and benchmarks).
pub fn stored_values(rows: &[f32], kv_dim: usize, format: KvFormat) -> KvBuf {
    let mut values = KvBuf::new();
    store_values(&mut values, 0, rows, kv_dim, format);
    values
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::cpu::float16::{bf16_to_f32, f16_to_f32, f32_to_bf16, f32_to_f16};

    /// Every element of every position lands in its own slot of each format, and reads back as
    /// the format's rounding of what was stored.
    #[test]
    fn each_format_puts_every_element_in_its_own_slot() {
        let (kvd, n) = (6, 13);
        let rows: Vec<f32> = (0..n * kvd).map(|i| 1.0 + i as f32 / 7.0).collect();
        for format in [KvFormat::F16, KvFormat::Bf16Pairs, KvFormat::Bf16Tiles] {
            let decode = |h: u16| if format == KvFormat::F16 { f16_to_f32(h) } else { bf16_to_f32(h) };
            let encode = |x: f32| {
                let h = f32_to_f16(x);
                if format == KvFormat::F16 {
                    h
                } else {
                    f32_to_bf16(f16_to_f32(h))
                }
            };
            let (keys, values) = (stored_keys(&rows, kvd, format), stored_values(&rows, kvd, format));
            assert_eq!(keys.len(), n.div_ceil(format.key_group()) * format.key_group() * kvd);
            assert_eq!(values.len(), format.values_len(n, kvd));
            let mut key_slots: Vec<usize> = Vec::new();
            let mut value_slots: Vec<usize> = Vec::new();
            for p in 0..n {
                for e in 0..kvd {
                    let x = rows[p * kvd + e];
                    assert_eq!(decode(keys[format.key_at(p, e, kvd)]), decode(encode(x)), "{format:?} key {p} {e}");
                    assert_eq!(decode(values[format.value_at(p, e, kvd)]), decode(encode(x)), "{format:?} value");
                    key_slots.push(format.key_at(p, e, kvd));
                    value_slots.push(format.value_at(p, e, kvd));
                }
            }
            for slots in [&mut key_slots, &mut value_slots] {
                slots.sort_unstable();
                slots.dedup();
                assert_eq!(slots.len(), n * kvd, "{format:?}: two elements share a slot");
            }
        }
    }

    /// The bf16 layout is the pairs the kernels load: a key group's pair `i` of 8 positions is 16
    /// consecutive values, a value pair's column `c` 2 consecutive ones.
    #[test]
    fn bf16_pairs_sit_where_the_kernels_load_them() {
        let f = KvFormat::Bf16Pairs;
        let kvd = 192;
        for (p, e) in [(0, 0), (13, 7), (8, 64), (23, 191)] {
            let group = (p / 8) * 8 * kvd;
            assert_eq!(f.key_at(p, e, kvd), group + 16 * (e / 2) + 2 * (p % 8) + e % 2);
        }
        assert_eq!(f.value_at(5, 10, kvd), 4 * kvd + 21);
        assert_eq!(f.values_len(5, kvd), 6 * kvd);
    }

    /// The tiles' layout: keys position-major; a value group's column `c` of 32 positions is 32
    /// consecutive values (one 64-byte tile row); both in whole groups of 32 positions.
    #[test]
    fn bf16_tiles_sit_where_the_tiles_load_them() {
        let f = KvFormat::Bf16Tiles;
        let kvd = 192;
        for (p, e) in [(0, 0), (13, 7), (33, 64), (40, 191)] {
            assert_eq!(f.key_at(p, e, kvd), p * kvd + e);
            assert_eq!(f.value_at(p, e, kvd), (p / 32) * 32 * kvd + 32 * e + p % 32);
        }
        assert_eq!(f.keys_len(33, kvd), 64 * kvd);
        assert_eq!(f.values_len(33, kvd), 64 * kvd);
    }
}
