//! The 32-value ggml types with integer-dot kernels: Q4_0, Q4_1 and Q8_0 (ggml-common.h).
//! Per type: its layout, its decoder and encoder (ggml's `dequantize_row_*` and
//! `quantize_row_*_ref`), and its portable block dot with quantized activations.

use super::block::{Block, IntBlock, Offset, Quantize, Weights, QK};
use super::float16::{f16_at, f32_to_f16};
use super::kernel_io::QKind;
use crate::backend::DType;

/// block_q4_0 { d: f16, qs: [u8; 16] }: element j is the low nibble of qs[j], element j + 16
/// the high nibble; x = (q - 8) * d.
pub struct BlockQ4_0;
/// block_q4_1 { d: f16, m: f16, qs: [u8; 16] }: same nibble order as Q4_0; x = q * d + m.
pub struct BlockQ4_1;
/// block_q8_0 { d: f16, qs: [i8; 32] }: x = qs * d.
pub struct BlockQ8_0;

impl Block for BlockQ4_0 {
    const DTYPE: DType = DType::Q4_0;
    const LEN: usize = QK;
    const BYTES: usize = 2 + QK / 2;

    fn dequantize(b: &[u8], out: &mut [f32]) {
        let d = f16_at(b, 0);
        for (j, &q) in b[2..2 + QK / 2].iter().enumerate() {
            out[j] = ((q & 0x0f) as i32 - 8) as f32 * d;
            out[j + QK / 2] = ((q >> 4) as i32 - 8) as f32 * d;
        }
    }
}

impl Quantize for BlockQ4_0 {
    fn quantize(x: &[f32], out: &mut Vec<u8>) {
        // The value of largest magnitude, with its sign, maps to -8.
        let max = x.iter().fold(0f32, |m, &v| if v.abs() > m.abs() { v } else { m });
        let d = max / -8.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        out.extend_from_slice(&f32_to_f16(d).to_le_bytes());
        let q = |v: f32| ((v * id + 8.5) as i8).clamp(0, 15) as u8;
        out.extend((0..QK / 2).map(|j| q(x[j]) | (q(x[j + QK / 2]) << 4)));
    }
}

impl IntBlock for BlockQ4_0 {
    const KIND: QKind = QKind::Q4_0;
    const QS_AT: usize = 2;
    const WEIGHTS: Weights = Weights::Nibbles;
    const OFFSET: Offset = Offset::TimesScale(-8.0);

    #[inline]
    fn block_dot(blk: &[u8], xb: &[i8], xd: f32, xs: f32) -> f32 {
        let dw = f16_at(blk, 0);
        let mut sum = 0i32;
        for (j, &q) in blk[2..18].iter().enumerate() {
            sum += (q & 0x0f) as i32 * xb[j] as i32 + (q >> 4) as i32 * xb[j + 16] as i32;
        }
        dw * xd * sum as f32 - 8.0 * dw * xs
    }
}

impl Block for BlockQ4_1 {
    const DTYPE: DType = DType::Q4_1;
    const LEN: usize = QK;
    const BYTES: usize = 2 + 2 + QK / 2;

    fn dequantize(b: &[u8], out: &mut [f32]) {
        let d = f16_at(b, 0);
        let m = f16_at(b, 2);
        for (j, &q) in b[4..4 + QK / 2].iter().enumerate() {
            out[j] = (q & 0x0f) as f32 * d + m;
            out[j + QK / 2] = (q >> 4) as f32 * d + m;
        }
    }
}

impl Quantize for BlockQ4_1 {
    fn quantize(x: &[f32], out: &mut Vec<u8>) {
        let min = x.iter().fold(f32::INFINITY, |m, &v| m.min(v));
        let max = x.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
        let d = (max - min) / 15.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        out.extend_from_slice(&f32_to_f16(d).to_le_bytes());
        out.extend_from_slice(&f32_to_f16(min).to_le_bytes());
        let q = |v: f32| (((v - min) * id + 0.5) as i8).clamp(0, 15) as u8;
        out.extend((0..QK / 2).map(|j| q(x[j]) | (q(x[j + QK / 2]) << 4)));
    }
}

impl IntBlock for BlockQ4_1 {
    const KIND: QKind = QKind::Q4_1;
    const QS_AT: usize = 4;
    const WEIGHTS: Weights = Weights::Nibbles;
    const OFFSET: Offset = Offset::Min;

    #[inline]
    fn block_dot(blk: &[u8], xb: &[i8], xd: f32, xs: f32) -> f32 {
        let (dw, mw) = (f16_at(blk, 0), f16_at(blk, 2));
        let mut sum = 0i32;
        for (j, &q) in blk[4..20].iter().enumerate() {
            sum += (q & 0x0f) as i32 * xb[j] as i32 + (q >> 4) as i32 * xb[j + 16] as i32;
        }
        dw * xd * sum as f32 + mw * xs
    }
}

impl Block for BlockQ8_0 {
    const DTYPE: DType = DType::Q8_0;
    const LEN: usize = QK;
    const BYTES: usize = 2 + QK;

    fn dequantize(b: &[u8], out: &mut [f32]) {
        let d = f16_at(b, 0);
        for (o, &q) in out.iter_mut().zip(&b[2..2 + QK]) {
            *o = (q as i8) as f32 * d;
        }
    }
}

impl Quantize for BlockQ8_0 {
    fn quantize(x: &[f32], out: &mut Vec<u8>) {
        let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        out.extend_from_slice(&f32_to_f16(d).to_le_bytes());
        out.extend(x.iter().map(|&v| (v * id).round() as i8 as u8));
    }
}

impl IntBlock for BlockQ8_0 {
    const KIND: QKind = QKind::Q8_0;
    const QS_AT: usize = 2;
    const WEIGHTS: Weights = Weights::Int8;
    const OFFSET: Offset = Offset::None;

    #[inline]
    fn block_dot(blk: &[u8], xb: &[i8], xd: f32, _xs: f32) -> f32 {
        let dw = f16_at(blk, 0);
        let sum: i32 = blk[2..34].iter().zip(xb).map(|(&q, &v)| (q as i8) as i32 * v as i32).sum();
        dw * xd * sum as f32
    }
}
