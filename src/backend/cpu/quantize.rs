//! Quantizers for weights, following ggml's reference `quantize_row_*_ref` (the same rounding as
//! the `gguf` Python package): used to make test and benchmark matrices, and to convert small
//! tensors at load time. The K-quants need ggml's iterative search and are not written here.

use super::dequant::QK;
use super::float16::{f32_to_bf16, f32_to_f16};
use crate::backend::DType;

/// Encodes `x` (a whole number of blocks) as `dtype`; `None` for the K-quants.
pub fn quantize_row(dtype: DType, x: &[f32]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(dtype.bytes_for(x.len())?);
    match dtype {
        DType::F32 => x
            .iter()
            .for_each(|v| out.extend_from_slice(&v.to_le_bytes())),
        DType::F16 => x
            .iter()
            .for_each(|&v| out.extend_from_slice(&f32_to_f16(v).to_le_bytes())),
        DType::BF16 => x
            .iter()
            .for_each(|&v| out.extend_from_slice(&f32_to_bf16(v).to_le_bytes())),
        DType::Q8_0 => x.chunks_exact(QK).for_each(|b| q8_0(b, &mut out)),
        DType::Q4_0 => x.chunks_exact(QK).for_each(|b| q4_0(b, &mut out)),
        DType::Q4_1 => x.chunks_exact(QK).for_each(|b| q4_1(b, &mut out)),
        DType::Q4K | DType::Q5K | DType::Q6K => return None,
    }
    Some(out)
}

fn q8_0(x: &[f32], out: &mut Vec<u8>) {
    let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    out.extend_from_slice(&f32_to_f16(d).to_le_bytes());
    out.extend(x.iter().map(|&v| (v * id).round() as i8 as u8));
}

fn q4_0(x: &[f32], out: &mut Vec<u8>) {
    // The value of largest magnitude, with its sign, maps to -8.
    let max = x
        .iter()
        .fold(0f32, |m, &v| if v.abs() > m.abs() { v } else { m });
    let d = max / -8.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    out.extend_from_slice(&f32_to_f16(d).to_le_bytes());
    let q = |v: f32| ((v * id + 8.5) as i8).clamp(0, 15) as u8;
    out.extend((0..QK / 2).map(|j| q(x[j]) | (q(x[j + QK / 2]) << 4)));
}

fn q4_1(x: &[f32], out: &mut Vec<u8>) {
    let min = x.iter().fold(f32::INFINITY, |m, &v| m.min(v));
    let max = x.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
    let d = (max - min) / 15.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    out.extend_from_slice(&f32_to_f16(d).to_le_bytes());
    out.extend_from_slice(&f32_to_f16(min).to_le_bytes());
    let q = |v: f32| (((v - min) * id + 0.5) as i8).clamp(0, 15) as u8;
    out.extend((0..QK / 2).map(|j| q(x[j]) | (q(x[j + QK / 2]) << 4)));
}

#[cfg(test)]
mod tests {
    use super::super::dequant::dequantize_row;
    use super::*;

    #[test]
    fn quantized_rows_match_the_gguf_golden_bytes() {
        // The golden .bin files were quantized by the gguf package from a known input; our
        // quantizer, fed the gguf package's own dequantized values, must reproduce the bytes
        // for the types whose quantization is a fixed point of dequantize∘quantize.
        for dtype in [DType::F32, DType::F16, DType::BF16, DType::Q8_0] {
            let raw = std::fs::read(format!(
                "{}/tests/data/dequant/{}.bin",
                env!("CARGO_MANIFEST_DIR"),
                dtype.name()
            ))
            .unwrap();
            let n = raw.len() / dtype.block_bytes() * dtype.block_len();
            let mut vals = vec![0f32; n];
            dequantize_row(dtype, &raw, &mut vals);
            if matches!(dtype, DType::F16 | DType::BF16) {
                vals[..8].fill(1.0); // the special values (NaN payloads) are not a fixed point
            }
            let back = quantize_row(dtype, &vals).unwrap();
            let mut again = vec![0f32; n];
            dequantize_row(dtype, &back, &mut again);
            assert_eq!(again, vals, "{dtype}");
        }
    }

    #[test]
    fn four_bit_round_trip_error_is_within_a_step() {
        let x: Vec<f32> = (0..256)
            .map(|i| ((i * 29 % 97) as f32 - 48.0) * 0.021)
            .collect();
        for dtype in [DType::Q4_0, DType::Q4_1] {
            let q = quantize_row(dtype, &x).unwrap();
            let mut y = vec![0f32; x.len()];
            dequantize_row(dtype, &q, &mut y);
            for (b, (xb, yb)) in x.chunks(32).zip(y.chunks(32)).enumerate() {
                // Q4_0's step is amax/8 and only the far end can be clamped a whole step away.
                let bound = xb.iter().fold(0f32, |m, v| m.max(v.abs())) / 8.0 * 1.01 + 1e-3;
                for (a, c) in xb.iter().zip(yb) {
                    assert!((a - c).abs() <= bound, "{dtype} block {b}: {a} vs {c}");
                }
            }
        }
        assert_eq!(quantize_row(DType::Q4K, &x), None);
    }
}
