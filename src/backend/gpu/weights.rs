//! Weights on the device: each block repacked into whole u32 words, so that a kernel reads it
//! with aligned loads (`shaders/blocks.wgsl` reads each type's words). Float types, Q4_1, Q4_K
//! and Q5_K keep the file's bytes; Q8_0, Q4_0 and Q5_0, whose 2-byte scale comes first and
//! leaves the quants unaligned, get the scale moved to the block's end and two bytes of padding
//! (6-11% more); Q6_K (210 bytes) gets two bytes of padding at its end.
//!
//! A matrix larger than the adapter's largest storage binding is split by rows into parts of
//! whole rows, each in its own buffer; every kernel that reads it runs once per part.

use super::context::Gpu;
use crate::backend::{DType, WeightRef};

/// One part of a matrix: rows `row0..row0 + rows`, in a buffer of its own.
pub struct Part {
    pub buffer: wgpu::Buffer,
    pub row0: usize,
    pub rows: usize,
}

/// A matrix (or a vector, as one row) on the device.
pub struct DeviceWeight {
    pub parts: Vec<Part>,
    pub dtype: DType,
    pub rows: usize,
    pub cols: usize,
}

impl DeviceWeight {
    /// The buffer of a matrix that fits one binding (a vector, a norm's weights).
    pub fn whole(&self) -> &wgpu::Buffer {
        debug_assert_eq!(self.parts.len(), 1, "a vector is never split");
        &self.parts[0].buffer
    }
}

/// Bytes of one of the file's blocks on the device, for the types the device kernels read.
pub fn device_block_bytes(dtype: DType) -> usize {
    match dtype {
        DType::Q8_0 => 36,
        DType::Q4_0 => 20,
        DType::Q5_0 => 24,
        DType::Q6K => 212,
        DType::F32 | DType::F16 | DType::BF16 | DType::Q4_1 | DType::Q4K | DType::Q5K => dtype.block_bytes(),
    }
}

/// Bytes one row of `cols` values takes on the device.
pub fn row_bytes(dtype: DType, cols: usize) -> u64 {
    (cols / dtype.block_len() * device_block_bytes(dtype)) as u64
}

/// Why the device cannot hold a tensor: rows the kernels cannot read in whole 32-value chunks,
/// or a single row over the adapter's largest binding.
pub fn check(dtype: DType, cols: usize, max_binding: u64) -> Result<(), String> {
    if !cols.is_multiple_of(32) {
        return Err(format!("rows of {cols} values are not whole 32-value blocks on the GPU"));
    }
    let row = row_bytes(dtype, cols);
    if row > max_binding {
        return Err(format!(
            "one row takes {row} bytes on the device, more than the adapter's largest storage binding ({max_binding} bytes)"
        ));
    }
    Ok(())
}

/// Rows a part holds: as many as fit one binding.
pub fn rows_per_part(dtype: DType, cols: usize, max_binding: u64) -> usize {
    (max_binding / row_bytes(dtype, cols)).max(1) as usize
}

/// The file's blocks of `dtype` as the device reads them.
pub fn repack(dtype: DType, bytes: &[u8]) -> Vec<u8> {
    let (file, dev) = (dtype.block_bytes(), device_block_bytes(dtype));
    if file == dev {
        return bytes.to_vec();
    }
    let mut out = Vec::with_capacity(bytes.len() / file * dev);
    for b in bytes.chunks_exact(file) {
        if dtype == DType::Q6K {
            out.extend_from_slice(b);
        } else {
            // The scale first in the file, last on the device.
            out.extend_from_slice(&b[2..]);
            out.extend_from_slice(&b[..2]);
        }
        out.extend_from_slice(&[0, 0]);
    }
    out
}

/// `w` on the device, in parts of at most `max_binding` bytes, each repacked as it goes (the
/// host holds one part's copy at a time, not the whole matrix's).
pub fn upload(gpu: &Gpu, w: WeightRef<'_>, max_binding: u64) -> DeviceWeight {
    let per = rows_per_part(w.dtype, w.cols, max_binding);
    let file_row = w.bytes.len() / w.rows.max(1);
    let parts = (0..w.rows)
        .step_by(per)
        .map(|row0| {
            let rows = per.min(w.rows - row0);
            let bytes = repack(w.dtype, &w.bytes[row0 * file_row..(row0 + rows) * file_row]);
            Part { buffer: gpu.storage_init(&bytes, "weight"), row0, rows }
        })
        .collect();
    DeviceWeight { parts, dtype: w.dtype, rows: w.rows, cols: w.cols }
}
