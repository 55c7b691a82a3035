//! The table's decoders and encoders against golden data from the `gguf` Python package.

use super::*;
use serde_json::Value;

const ALL: [DType; 10] = DType::ALL;

/// The raw blocks and the `gguf` package's dequantized values, made by
/// tests/golden/make_dequant_golden.py.
fn golden(dtype: DType) -> (Vec<u8>, Vec<u32>) {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/dequant/");
    let raw = std::fs::read(format!("{dir}{}.bin", dtype.name())).expect("golden .bin");
    let json: Value =
        serde_json::from_slice(&std::fs::read(format!("{dir}{}.json", dtype.name())).expect("golden .json")).unwrap();
    let bits = json["bits"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
    (raw, bits)
}

#[test]
fn dequantization_is_bit_exact_against_gguf_golden_vectors() {
    for dtype in ALL {
        let (raw, bits) = golden(dtype);
        let mut out = vec![0f32; bits.len()];
        dequantize_row(dtype, &raw, &mut out);
        for (i, (o, &b)) in out.iter().zip(&bits).enumerate() {
            assert_eq!(o.to_bits(), b, "{dtype} value {i}: ours {o} vs gguf {}", f32::from_bits(b));
        }
    }
}

#[test]
fn golden_files_cover_several_blocks_with_nonzero_values() {
    for dtype in ALL {
        let (raw, bits) = golden(dtype);
        assert!(bits.len() >= 3 * dtype.block_len(), "{dtype}");
        assert_eq!(dtype.bytes_for(bits.len()), Some(raw.len()), "{dtype}");
        assert!(bits.iter().filter(|&&b| f32::from_bits(b) != 0.0).count() > bits.len() / 2, "{dtype}");
    }
}

#[test]
#[should_panic(expected = "bytes for")]
fn a_partial_block_is_refused() {
    let mut out = [0f32; 32];
    dequantize_row(DType::Q4_0, &[0u8; 17], &mut out);
}

#[test]
fn quantized_rows_match_the_gguf_golden_bytes() {
    // The golden .bin files were quantized by the gguf package from a known input; our
    // quantizer, fed the gguf package's own dequantized values, must reproduce the bytes
    // for the types whose quantization is a fixed point of dequantize∘quantize.
    for dtype in [DType::F32, DType::F16, DType::BF16, DType::Q8_0] {
        let raw =
            std::fs::read(format!("{}/tests/data/dequant/{}.bin", env!("CARGO_MANIFEST_DIR"), dtype.name())).unwrap();
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
    let x: Vec<f32> = (0..256).map(|i| ((i * 29 % 97) as f32 - 48.0) * 0.021).collect();
    for (dtype, steps) in [(DType::Q4_0, 8.0), (DType::Q4_1, 8.0), (DType::Q5_0, 16.0)] {
        let q = quantize_row(dtype, &x).unwrap();
        let mut y = vec![0f32; x.len()];
        dequantize_row(dtype, &q, &mut y);
        for (b, (xb, yb)) in x.chunks(32).zip(y.chunks(32)).enumerate() {
            // Q4_0's step is amax/8 (Q5_0's amax/16) and only the far end can be clamped a whole
            // step away.
            let bound = xb.iter().fold(0f32, |m, v| m.max(v.abs())) / steps * 1.01 + 1e-3;
            for (a, c) in xb.iter().zip(yb) {
                assert!((a - c).abs() <= bound, "{dtype} block {b}: {a} vs {c}");
            }
        }
    }
    assert_eq!(quantize_row(DType::Q4K, &x), None);
}

#[test]
fn every_type_has_its_own_entry_and_the_integer_kernels_cover_the_32_value_types_q4k_and_q6k() {
    for dtype in ALL {
        let t = type_traits(dtype);
        assert_eq!(t.dtype, dtype);
        let int = matches!(dtype, DType::Q4_0 | DType::Q4_1 | DType::Q8_0);
        assert_eq!(t.int_dot.is_some(), int, "{dtype}");
        let k = t.k_dot.map(|k| k.kind);
        let want = match dtype {
            DType::Q4K => Some(KKind::Q4K),
            DType::Q6K => Some(KKind::Q6K),
            _ => None,
        };
        assert_eq!(k, want, "{dtype}");
        let k_quant = matches!(dtype, DType::Q4K | DType::Q5K | DType::Q6K);
        assert_eq!(t.quantize.is_none(), k_quant, "{dtype}");
    }
}
