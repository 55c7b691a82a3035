//! A weight tensor: a typed, shaped, zero-copy view into a memory-mapped model file, or the
//! backend's uploaded copy of one.

use crate::backend::cpu::dequantize_row;
use crate::backend::{Backend, DType, DeviceHandle, Layout, Upload, WeightRef};
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

    /// Lets the kernel drop the resident pages of bytes `offset..offset + len` of a mapped
    /// file, so that a tensor that now lives in a repacked copy does not stay in memory twice.
    /// The pages at both ends may hold a neighbour's bytes too: those are read from the file
    /// again when next touched. Owned bytes are left alone.
    pub fn release(&self, offset: usize, len: usize) {
        if let Storage::Mmap(m) = self {
            // SAFETY: the map is read-only and shared with the file, so MADV_DONTNEED only drops
            // page-table entries: a later read faults the very same bytes back in from the file
            // (or the page cache). No reference into the map sees different contents. A failure
            // only leaves the pages resident, which costs memory, not correctness.
            let _ = unsafe { m.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, offset, len) };
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
    /// The order of the blocks in the bytes: the file's, unless the backend repacked them.
    pub layout: Layout,
    /// The device's copy, where the backend keeps one ([`Backend::upload_device`]).
    device: Option<DeviceHandle>,
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
        Tensor { name, dtype, shape, layout: Layout::Rows, device: None, storage, offset, len }
    }

    /// This matrix as `backend` holds it ([`Backend::upload`]), or this very view when the
    /// backend reads the file's bytes. An uploaded copy releases the file's pages: resident
    /// memory holds the copy instead of the file's bytes, not beside them. Other handles on the
    /// same file bytes (a tied embedding) still read them, paging in only what they touch.
    pub fn uploaded(&self, backend: &dyn Backend) -> Tensor {
        // The device reads its copy; the host's pages come back only if something reads them.
        self.host_uploaded(backend).on_device(backend)
    }

    /// This view with the device's copy beside it, where `backend` keeps one; the host's
    /// layout stays the file's (an embedding's rows are read as they are).
    pub fn on_device(&self, backend: &dyn Backend) -> Tensor {
        let mut t = self.clone();
        t.device = backend.upload_device(t.weight());
        if t.device.is_some() {
            t.storage.release(t.offset, t.len);
        }
        t
    }

    /// This view with `other`'s device copy: a tied embedding, the head's matrix read as rows.
    pub fn with_device_of(&self, other: &Tensor) -> Tensor {
        Tensor { device: other.device.clone(), ..self.clone() }
    }

    fn host_uploaded(&self, backend: &dyn Backend) -> Tensor {
        let Some(Upload { dtype, layout, bytes }) = backend.upload(self.weight()) else { return self.clone() };
        let values = self.numel() / dtype.block_len() * dtype.block_bytes();
        assert_eq!(bytes.len(), values, "{}: an uploaded copy must hold every value", self.name);
        self.storage.release(self.offset, self.len);
        let len = bytes.len();
        Tensor { dtype, layout, storage: Arc::new(Storage::Owned(bytes)), offset: 0, len, ..self.clone() }
    }

    /// This matrix as the kernels take it. Shapes and byte lengths were checked when the
    /// tensor was read.
    pub fn weight(&self) -> WeightRef<'_> {
        WeightRef {
            dtype: self.dtype,
            bytes: self.bytes(),
            rows: self.rows(),
            cols: self.cols(),
            layout: self.layout,
            device: self.device.as_ref(),
        }
    }

    /// Every value as f32 (a file-layout tensor: norms, biases, small matrices).
    pub fn to_f32(&self) -> Vec<f32> {
        let mut out = vec![0.0; self.numel()];
        dequantize_row(self.dtype, self.bytes(), &mut out);
        out
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
