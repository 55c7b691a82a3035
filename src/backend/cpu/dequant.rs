//! Scalar, bit-exact dequantization of rows of every supported type, following ggml's block
//! definitions (ggml-common.h) and the operation order of its `dequantize_row_*` functions, so
//! that each value is the same f32 ggml (and the `gguf` Python package) computes.
//!
//! These are the reference for the fast kernels and the path the K-quants take in matmul.

use super::dequant_k;
use super::float16::{bf16_to_f32, f16_to_f32};
use crate::backend::DType;

/// Values per block of the 32-wide ggml types.
pub const QK: usize = 32;

#[inline]
pub(crate) fn f16_at(b: &[u8], i: usize) -> f32 {
    f16_to_f32(u16::from_le_bytes([b[i], b[i + 1]]))
}

/// Dequantizes `out.len()` values from `bytes`, which must hold exactly that many values of
/// `dtype` (a whole number of blocks).
///
/// # Panics
/// When `bytes.len()` does not match `out.len()` values of `dtype`: the callers (matmul and the
/// model loader) check shapes against the file once, so a mismatch here is a bug.
pub fn dequantize_row(dtype: DType, bytes: &[u8], out: &mut [f32]) {
    let expected = dtype.bytes_for(out.len());
    assert_eq!(
        expected,
        Some(bytes.len()),
        "{dtype}: {} bytes for {} values",
        bytes.len(),
        out.len()
    );
    let bb = dtype.block_bytes();
    let bl = dtype.block_len();
    let blocks = bytes.chunks_exact(bb).zip(out.chunks_exact_mut(bl));
    match dtype {
        DType::F32 => {
            for (b, o) in blocks {
                o[0] = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            }
        }
        DType::F16 => {
            for (b, o) in blocks {
                o[0] = f16_to_f32(u16::from_le_bytes([b[0], b[1]]));
            }
        }
        DType::BF16 => {
            for (b, o) in blocks {
                o[0] = bf16_to_f32(u16::from_le_bytes([b[0], b[1]]));
            }
        }
        DType::Q8_0 => blocks.for_each(|(b, o)| block_q8_0(b, o)),
        DType::Q4_0 => blocks.for_each(|(b, o)| block_q4_0(b, o)),
        DType::Q4_1 => blocks.for_each(|(b, o)| block_q4_1(b, o)),
        DType::Q4K => blocks.for_each(|(b, o)| dequant_k::block_q4_k(b, o)),
        DType::Q5K => blocks.for_each(|(b, o)| dequant_k::block_q5_k(b, o)),
        DType::Q6K => blocks.for_each(|(b, o)| dequant_k::block_q6_k(b, o)),
    }
}

/// block_q8_0 { d: f16, qs: [i8; 32] }: x = qs * d.
pub fn block_q8_0(b: &[u8], out: &mut [f32]) {
    let d = f16_at(b, 0);
    for (o, &q) in out.iter_mut().zip(&b[2..2 + QK]) {
        *o = (q as i8) as f32 * d;
    }
}

/// block_q4_0 { d: f16, qs: [u8; 16] }: element j is the low nibble of qs[j], element j + 16
/// the high nibble; x = (q - 8) * d.
pub fn block_q4_0(b: &[u8], out: &mut [f32]) {
    let d = f16_at(b, 0);
    for (j, &q) in b[2..2 + QK / 2].iter().enumerate() {
        out[j] = ((q & 0x0f) as i32 - 8) as f32 * d;
        out[j + QK / 2] = ((q >> 4) as i32 - 8) as f32 * d;
    }
}

/// block_q4_1 { d: f16, m: f16, qs: [u8; 16] }: same nibble order as Q4_0; x = q * d + m.
pub fn block_q4_1(b: &[u8], out: &mut [f32]) {
    let d = f16_at(b, 0);
    let m = f16_at(b, 2);
    for (j, &q) in b[4..4 + QK / 2].iter().enumerate() {
        out[j] = (q & 0x0f) as f32 * d + m;
        out[j + QK / 2] = (q >> 4) as f32 * d + m;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    const ALL: [DType; 9] = DType::ALL;

    /// The raw blocks and the `gguf` package's dequantized values, made by
    /// tests/golden/make_dequant_golden.py.
    fn golden(dtype: DType) -> (Vec<u8>, Vec<u32>) {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/dequant/");
        let raw = std::fs::read(format!("{dir}{}.bin", dtype.name())).expect("golden .bin");
        let json: Value = serde_json::from_slice(
            &std::fs::read(format!("{dir}{}.json", dtype.name())).expect("golden .json"),
        )
        .unwrap();
        let bits = json["bits"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u32)
            .collect();
        (raw, bits)
    }

    #[test]
    fn dequantization_is_bit_exact_against_gguf_golden_vectors() {
        for dtype in ALL {
            let (raw, bits) = golden(dtype);
            let mut out = vec![0f32; bits.len()];
            dequantize_row(dtype, &raw, &mut out);
            for (i, (o, &b)) in out.iter().zip(&bits).enumerate() {
                assert_eq!(
                    o.to_bits(),
                    b,
                    "{dtype} value {i}: ours {o} vs gguf {}",
                    f32::from_bits(b)
                );
            }
        }
    }

    #[test]
    fn golden_files_cover_several_blocks_with_nonzero_values() {
        for dtype in ALL {
            let (raw, bits) = golden(dtype);
            assert!(bits.len() >= 3 * dtype.block_len(), "{dtype}");
            assert_eq!(dtype.bytes_for(bits.len()), Some(raw.len()), "{dtype}");
            assert!(
                bits.iter().filter(|&&b| f32::from_bits(b) != 0.0).count() > bits.len() / 2,
                "{dtype}"
            );
        }
    }

    #[test]
    #[should_panic(expected = "bytes for")]
    fn a_partial_block_is_refused() {
        let mut out = [0f32; 32];
        dequantize_row(DType::Q4_0, &[0u8; 17], &mut out);
    }
}
