//! Deterministic inputs for the kernel tests: noise vectors and weight matrices.

use super::float16::f32_to_f16;
use super::type_traits::quantize_row;
use crate::backend::DType;

/// Deterministic pseudo-random values in [-1, 1) (an LCG: tests must not depend on a crate).
pub fn noise(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// A `rows x cols` weight of `dtype`: quantized from noise, or random K-quant blocks with
/// small finite scales.
pub fn weight(dtype: DType, rows: usize, cols: usize, seed: u64) -> Vec<u8> {
    let vals = noise(rows * cols, seed);
    if let Some(b) = quantize_row(dtype, &vals) {
        return b;
    }
    let bytes: Vec<u8> = noise(dtype.bytes_for(rows * cols).unwrap(), seed ^ 0xabc)
        .iter()
        .map(|v| ((v + 1.0) * 127.9) as u8)
        .collect();
    let mut bytes = bytes;
    let (bb, scale_offsets): (usize, &[usize]) = match dtype {
        DType::Q6K => (210, &[208]),
        _ => (dtype.block_bytes(), &[0, 2]),
    };
    for blk in bytes.chunks_exact_mut(bb) {
        for &o in scale_offsets {
            blk[o..o + 2].copy_from_slice(&f32_to_f16(0.003).to_le_bytes());
        }
    }
    bytes
}
