//! A weight tensor: a typed, shaped, zero-copy view into a memory-mapped model file.

use crate::backend::DType;
use std::sync::Arc;

/// Bytes a tensor can point into: a memory map of a model file, or owned bytes (tests, and
/// tensors converted at load time).
pub enum Storage {
    Mmap(memmap2::Mmap),
    Owned(Vec<u8>),
}

impl Storage {
    pub fn bytes(&self) -> &[u8] {
        match self {
            Storage::Mmap(m) => m,
            Storage::Owned(v) => v,
        }
    }
}

#[derive(Clone)]
pub struct Tensor {
    pub name: String,
    pub dtype: DType,
    /// Row-major shape, outermost first (`[rows, cols]` for a matrix: `cols` values per row).
    /// Note that GGUF lists dimensions innermost first; the GGUF reader reverses them.
    pub shape: Vec<usize>,
    storage: Arc<Storage>,
    offset: usize,
    len: usize,
}

impl Tensor {
    /// A view of `len` bytes at `offset` of `storage`; the caller has checked the bounds and that
    /// `len` matches `dtype` and `shape`.
    pub fn new(
        name: String,
        dtype: DType,
        shape: Vec<usize>,
        storage: Arc<Storage>,
        offset: usize,
        len: usize,
    ) -> Tensor {
        debug_assert!(offset + len <= storage.bytes().len());
        Tensor { name, dtype, shape, storage, offset, len }
    }

    pub fn bytes(&self) -> &[u8] {
        &self.storage.bytes()[self.offset..self.offset + self.len]
    }

    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// Values per row (the innermost dimension).
    pub fn cols(&self) -> usize {
        *self.shape.last().unwrap_or(&1)
    }

    /// Number of rows (all outer dimensions together).
    pub fn rows(&self) -> usize {
        self.numel() / self.cols().max(1)
    }
}

impl std::fmt::Debug for Tensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tensor({} {} {:?})", self.name, self.dtype, self.shape)
    }
}
