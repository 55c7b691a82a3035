//! The 32-value ggml types: Q4_0, Q4_1 and Q8_0, with integer-dot kernels, and Q5_0, which the
//! backend uploads as Q8_0 ([`widen_q5_0`]: exact, since a Q5_0 value is a small integer times
//! the block's scale) (ggml-common.h).
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
/// block_q5_0 { d: f16, qh: [u8; 4], qs: [u8; 16] }: the low four bits as Q4_0's nibbles, bit
/// `j` of the little-endian `qh` the fifth bit of element `j`; x = (q - 16) * d.
pub struct BlockQ5_0;
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

impl BlockQ5_0 {
    /// The block's 32 integers `q - 16`, in element order.
    pub fn ints(b: &[u8]) -> [i8; QK] {
        let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
        let mut q = [0i8; QK];
        for (j, &byte) in b[6..6 + QK / 2].iter().enumerate() {
            let hi0 = ((qh >> j) << 4) as u8 & 0x10;
            let hi1 = (qh >> (j + 12)) as u8 & 0x10;
            q[j] = ((byte & 0x0f) | hi0) as i8 - 16;
            q[j + QK / 2] = ((byte >> 4) | hi1) as i8 - 16;
        }
        q
    }
}

/// The Q8_0 encoding of whole Q5_0 blocks: the same f16 scale, the same integers. Exact: every
/// dot the Q8_0 kernels compute from it is the one ggml's Q5_0 kernels compute.
pub fn widen_q5_0(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len() / BlockQ5_0::BYTES * BlockQ8_0::BYTES);
    for b in bytes.chunks_exact(BlockQ5_0::BYTES) {
        out.extend_from_slice(&b[..2]);
        out.extend(BlockQ5_0::ints(b).map(|q| q as u8));
    }
    out
}

impl Block for BlockQ5_0 {
    const DTYPE: DType = DType::Q5_0;
    const LEN: usize = QK;
    const BYTES: usize = 2 + 4 + QK / 2;

    fn dequantize(b: &[u8], out: &mut [f32]) {
        let d = f16_at(b, 0);
        for (o, q) in out.iter_mut().zip(Self::ints(b)) {
            *o = q as f32 * d;
        }
    }
}

impl Quantize for BlockQ5_0 {
    fn quantize(x: &[f32], out: &mut Vec<u8>) {
        // As Q4_0: the value of largest magnitude, with its sign, maps to -16.
        let max = x.iter().fold(0f32, |m, &v| if v.abs() > m.abs() { v } else { m });
        let d = max / -16.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let q = |v: f32| ((v * id + 16.5) as i8).min(31) as u8;
        let mut qh = 0u32;
        let mut qs = [0u8; QK / 2];
        for j in 0..QK / 2 {
            let (q0, q1) = (q(x[j]), q(x[j + QK / 2]));
            qs[j] = (q0 & 0x0f) | ((q1 & 0x0f) << 4);
            qh |= u32::from(q0 >> 4) << j | u32::from(q1 >> 4) << (j + QK / 2);
        }
        out.extend_from_slice(&f32_to_f16(d).to_le_bytes());
        out.extend_from_slice(&qh.to_le_bytes());
        out.extend_from_slice(&qs);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::cpu::{dequantize_row, quantize_row};

    #[test]
    fn q5_0_widens_to_the_same_values_in_q8_0() {
        let x: Vec<f32> = (0..96).map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.013).collect();
        let q5 = quantize_row(DType::Q5_0, &x).unwrap();
        let q8 = widen_q5_0(&q5);
        assert_eq!(q8.len(), 3 * BlockQ8_0::BYTES);
        let (mut a, mut b) = (vec![0f32; 96], vec![0f32; 96]);
        dequantize_row(DType::Q5_0, &q5, &mut a);
        dequantize_row(DType::Q8_0, &q8, &mut b);
        assert_eq!(a, b);
        assert!(a.iter().any(|v| *v > 0.0) && a.iter().any(|v| *v < 0.0));
    }

    #[test]
    fn the_backend_uploads_q5_0_as_the_q8_0_it_widens_to_at_every_level() {
        use crate::backend::cpu::test_inputs::{isas_under_test, weight};
        use crate::backend::cpu::{CpuBackend, Isa};
        use crate::backend::{Backend, Layout, WeightRef};
        let (rows, cols) = (16, 64);
        let q5 = weight(DType::Q5_0, rows, cols, 7);
        let q8 = widen_q5_0(&q5);
        for isa in isas_under_test() {
            let be = CpuBackend::with_isa(1, isa);
            let up = be.upload(WeightRef::new(DType::Q5_0, &q5, rows, cols).unwrap()).expect("Q5_0 is widened");
            assert_eq!(up.dtype, DType::Q8_0);
            assert_eq!(up.layout, if isa == Isa::Scalar { Layout::Rows } else { Layout::Rows8 });
            // Exactly what a Q8_0 file of the widened blocks uploads as.
            let up8 = be.upload(WeightRef::new(DType::Q8_0, &q8, rows, cols).unwrap()).map_or(q8.clone(), |u| u.bytes);
            assert_eq!(up.bytes, up8, "{}", isa.name());
        }
    }
}
