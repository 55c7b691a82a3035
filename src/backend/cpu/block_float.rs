//! The plain float weight types, as one-value blocks: F32, F16 and BF16 (little-endian).

use super::block::{Block, Quantize};
use super::float16::{bf16_to_f32, f16_to_f32, f32_to_bf16, f32_to_f16};
use crate::backend::DType;

pub struct BlockF32;
pub struct BlockF16;
pub struct BlockBF16;

impl Block for BlockF32 {
    const DTYPE: DType = DType::F32;
    const LEN: usize = 1;
    const BYTES: usize = 4;

    #[inline]
    fn dequantize(b: &[u8], out: &mut [f32]) {
        out[0] = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    }
}

impl Quantize for BlockF32 {
    fn quantize(x: &[f32], out: &mut Vec<u8>) {
        out.extend_from_slice(&x[0].to_le_bytes());
    }
}

impl Block for BlockF16 {
    const DTYPE: DType = DType::F16;
    const LEN: usize = 1;
    const BYTES: usize = 2;

    #[inline]
    fn dequantize(b: &[u8], out: &mut [f32]) {
        out[0] = f16_to_f32(u16::from_le_bytes([b[0], b[1]]));
    }
}

impl Quantize for BlockF16 {
    fn quantize(x: &[f32], out: &mut Vec<u8>) {
        out.extend_from_slice(&f32_to_f16(x[0]).to_le_bytes());
    }
}

impl Block for BlockBF16 {
    const DTYPE: DType = DType::BF16;
    const LEN: usize = 1;
    const BYTES: usize = 2;

    #[inline]
    fn dequantize(b: &[u8], out: &mut [f32]) {
        out[0] = bf16_to_f32(u16::from_le_bytes([b[0], b[1]]));
    }
}

impl Quantize for BlockBF16 {
    fn quantize(x: &[f32], out: &mut Vec<u8>) {
        out.extend_from_slice(&f32_to_bf16(x[0]).to_le_bytes());
    }
}
