//! The storage of one layer's keys or values (and the AMX kernel's scratch): 16-bit elements in
//! whole, aligned cache lines.
//!
//! The AMX kernel loads tiles of 64-byte rows straight from the cache, and a row that straddles
//! two cache lines took 4.5x as long to load (a tile pair of loads and products, 9.5 against 43 ns
//! from L2). A `Vec<u16>` is only as aligned as the allocator makes it (16 bytes for glibc's large
//! blocks), so the elements live in 64-byte lines instead.

use std::ops::{Deref, DerefMut};

/// Elements of a line.
const PER_LINE: usize = 32;

/// One cache line of elements.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u16; PER_LINE]);

const ZERO: Line = Line([0; PER_LINE]);

/// A growable buffer of `u16`s that starts on a cache line, read as a slice. Elements past its
/// length in its last line are kept zero.
#[derive(Clone, Default)]
pub struct KvBuf {
    lines: Vec<Line>,
    len: usize,
}

impl KvBuf {
    pub fn new() -> KvBuf {
        KvBuf::default()
    }

    /// Grows to `n` elements (new ones zero) or truncates to `n`.
    pub fn resize(&mut self, n: usize) {
        if n < self.len {
            return self.truncate(n);
        }
        self.lines.resize(n.div_ceil(PER_LINE), ZERO);
        self.len = n;
    }

    /// Keeps the first `n` elements (the rest of their last line goes back to zero).
    pub fn truncate(&mut self, n: usize) {
        if n >= self.len {
            return;
        }
        self.lines.truncate(n.div_ceil(PER_LINE));
        if let Some(last) = self.lines.last_mut().filter(|_| !n.is_multiple_of(PER_LINE)) {
            last.0[n % PER_LINE..].fill(0);
        }
        self.len = n;
    }

    /// Elements that storage for `n` elements holds: whole lines.
    pub fn storage_for(n: usize) -> usize {
        n.div_ceil(PER_LINE) * PER_LINE
    }

    /// Elements it can hold without reallocating.
    pub fn capacity(&self) -> usize {
        self.lines.capacity() * PER_LINE
    }

    /// Room for `n` elements in all, and no more than their lines (nothing if it has room).
    pub fn reserve_total(&mut self, n: usize) {
        let lines = n.div_ceil(PER_LINE);
        self.lines.reserve_exact(lines.saturating_sub(self.lines.len()));
    }

    /// Gives back memory beyond `min` elements (or its length, if more).
    pub fn shrink_to(&mut self, min: usize) {
        self.lines.shrink_to(min.div_ceil(PER_LINE));
    }
}

impl Deref for KvBuf {
    type Target = [u16];
    fn deref(&self) -> &[u16] {
        // SAFETY: `Line` is `repr(C)` around `[u16; 32]` with no padding (64 bytes at an alignment
        // of 64), so the lines are `32 * lines.len() >= len` contiguous initialised `u16`s.
        unsafe { std::slice::from_raw_parts(self.lines.as_ptr() as *const u16, self.len) }
    }
}

impl DerefMut for KvBuf {
    fn deref_mut(&mut self) -> &mut [u16] {
        // SAFETY: as in `deref`, borrowed mutably through `self`.
        unsafe { std::slice::from_raw_parts_mut(self.lines.as_mut_ptr() as *mut u16, self.len) }
    }
}

impl PartialEq for KvBuf {
    fn eq(&self, other: &KvBuf) -> bool {
        **self == **other
    }
}

impl std::fmt::Debug for KvBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The buffer starts on a cache line whatever its length, reads back what was written, and
    /// a truncated tail reads zero when it grows again.
    #[test]
    fn a_buffer_is_aligned_and_its_truncated_tail_comes_back_zero() {
        let mut b = KvBuf::new();
        for n in [1, 31, 32, 33, 1000] {
            b.resize(n);
            assert_eq!(b.as_ptr() as usize % 64, 0, "{n} elements");
            assert_eq!(b.len(), n);
        }
        b.iter_mut().enumerate().for_each(|(i, x)| *x = i as u16 + 1);
        b.truncate(40);
        assert_eq!(b[39], 40);
        b.resize(70);
        assert!(b[40..].iter().all(|&x| x == 0), "{:?}", &b[40..]);
        b.reserve_total(10_070);
        assert_eq!(b.capacity(), KvBuf::storage_for(10_070));
        b.shrink_to(0);
        assert_eq!(b.len(), 70);
    }
}
