//! Weights on the device: each block repacked into whole u32 words, so that a kernel reads it
//! with aligned loads (`shaders/blocks.wgsl` reads each type's words). Float types and Q4_1 keep
//! the file's bytes; Q8_0, Q4_0 and Q5_0, whose 2-byte scale comes first and leaves the quants
//! unaligned, get the scale moved to the block's end and two bytes of padding (6-11% more).

use crate::backend::DType;

/// A matrix (or a vector, as one row) on the device.
pub struct DeviceWeight {
    pub buffer: wgpu::Buffer,
    pub dtype: DType,
    pub rows: usize,
    pub cols: usize,
}

/// Bytes of one block on the device, for the types the device kernels read.
pub fn device_block_bytes(dtype: DType) -> Option<usize> {
    match dtype {
        DType::F32 => Some(128),
        DType::F16 | DType::BF16 => Some(64),
        DType::Q8_0 => Some(36),
        DType::Q4_0 | DType::Q4_1 => Some(20),
        DType::Q5_0 => Some(24),
        DType::Q4K | DType::Q5K | DType::Q6K => None,
    }
}

/// Why the device cannot hold a tensor.
pub fn check(dtype: DType, rows: usize, cols: usize, max_binding: u64) -> Result<(), String> {
    let Some(bb) = device_block_bytes(dtype) else {
        return Err(format!(
            "the GPU backend does not read {} yet (it reads F32, F16, BF16, Q8_0, Q4_0, Q4_1 and Q5_0); use --backend cpu",
            dtype.name()
        ));
    };
    if !cols.is_multiple_of(32) {
        return Err(format!("rows of {cols} values are not whole 32-value blocks on the GPU"));
    }
    let bytes = (rows * cols / 32 * bb) as u64;
    if bytes > max_binding {
        return Err(format!(
            "{bytes} bytes on the device, more than the adapter's largest storage binding ({max_binding} bytes); \
             splitting a tensor across bindings is not done yet, use --backend cpu"
        ));
    }
    Ok(())
}

/// The file's blocks of `dtype` (rows of whole 32-value blocks; float types counted in 32s) as
/// the device reads them.
pub fn repack(dtype: DType, bytes: &[u8]) -> Vec<u8> {
    let (file, dev) = match dtype {
        DType::Q8_0 => (34, 36),
        DType::Q4_0 => (18, 20),
        DType::Q5_0 => (22, 24),
        _ => return bytes.to_vec(),
    };
    let mut out = Vec::with_capacity(bytes.len() / file * dev);
    for b in bytes.chunks_exact(file) {
        // The scale first in the file, last on the device.
        out.extend_from_slice(&b[2..]);
        out.extend_from_slice(&b[..2]);
        out.extend_from_slice(&[0, 0]);
    }
    out
}
