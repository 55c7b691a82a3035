//! What the matmul driver hands the per-level kernels: which integer-dot block type to run
//! ([`QKind`], [`KKind`]) and where to write the results ([`OutRows`]).

use std::marker::PhantomData;

/// The weight types with integer-dot kernels (each has an `IntBlock` marker in `block_q.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QKind {
    Q4_0,
    Q4_1,
    Q8_0,
}

/// The K-quants with integer-dot kernels (dotted with `QuantRowsK`'s 256-value blocks).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KKind {
    Q4K,
    Q6K,
}

/// Where the workers write results: `out[i * stride + r]`, each entry by exactly one worker.
pub struct OutRows<'a> {
    ptr: *mut f32,
    stride: usize,
    len: usize,
    _out: PhantomData<&'a mut [f32]>,
}

// SAFETY: workers write disjoint entries (disjoint weight-row ranges) of a buffer that outlives
// the pool job (the borrow `'a`); no entry is read during the job.
unsafe impl Sync for OutRows<'_> {}

impl<'a> OutRows<'a> {
    /// `out` as `n` rows of `out.len() / n` entries.
    pub fn new(out: &'a mut [f32], n: usize) -> OutRows<'a> {
        OutRows { ptr: out.as_mut_ptr(), stride: out.len() / n, len: out.len(), _out: PhantomData }
    }

    /// # Safety
    /// No other thread may access entry `(i, r)` during the job.
    #[inline]
    pub unsafe fn write(&self, i: usize, r: usize, v: f32) {
        let k = i * self.stride + r;
        assert!(k < self.len, "matmul output index {k} outside {}", self.len);
        // SAFETY: in bounds (checked above) and exclusively ours (the caller's contract).
        unsafe { *self.ptr.add(k) = v };
    }
}
