use super::*;
use crate::model::gguf_write::GgufWriter;
use crate::model::test_models::demo_model_path;

fn demo() -> GgufFile {
    let path = demo_model_path();
    GgufFile::open(&path).unwrap_or_else(|e| panic!("demo model {} must load: {e}", path.display()))
}

fn golden() -> serde_json::Value {
    let text = include_str!("../../tests/golden/gguf_demo.json");
    serde_json::from_str(text).expect("golden json")
}

/// A small file using every metadata type, nested arrays and three tensors.
fn sample() -> GgufWriter {
    let mut w = GgufWriter::new();
    w.meta("general.architecture", MetaValue::String("llama".into()))
        .meta("u8", MetaValue::U8(200))
        .meta("i8", MetaValue::I8(-5))
        .meta("u16", MetaValue::U16(60000))
        .meta("i16", MetaValue::I16(-30000))
        .meta("u32", MetaValue::U32(4_000_000_000))
        .meta("i32", MetaValue::I32(-2_000_000_000))
        .meta("u64", MetaValue::U64(u64::MAX))
        .meta("i64", MetaValue::I64(i64::MIN))
        .meta("f32", MetaValue::F32(1.5))
        .meta("f64", MetaValue::F64(-2.25))
        .meta("bool", MetaValue::Bool(true))
        .meta("str", MetaValue::String("héllo".into()))
        .meta("strs", MetaValue::Array(vec![MetaValue::String("a".into()), MetaValue::String("".into())]))
        .meta(
            "nested",
            MetaValue::Array(vec![
                MetaValue::Array(vec![MetaValue::I32(1), MetaValue::I32(2)]),
                MetaValue::Array(vec![MetaValue::I32(3)]),
            ]),
        );
    w.tensor_f32("a", &[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    w.tensor("q", DType::Q8_0, &[2, 32], vec![7u8; 2 * 34]);
    w.tensor_f32("b", &[5], &[0.5; 5]);
    w
}

#[test]
fn demo_model_header_matches_python_gguf() {
    let f = demo();
    let g = golden();
    assert_eq!(f.version as u64, g["version"].as_u64().unwrap());
    assert_eq!(f.alignment as u64, g["alignment"].as_u64().unwrap());
    assert_eq!(f.data_offset as u64, g["data_offset"].as_u64().unwrap());
    assert_eq!(f.metadata.entries.len() as u64, g["kv_count"].as_u64().unwrap());

    for (key, want) in g["scalars"].as_object().unwrap() {
        let got = f.metadata.get(key).unwrap_or_else(|| panic!("missing key {key}"));
        let v = &want["value"];
        match got {
            MetaValue::String(s) => assert_eq!(s, v.as_str().unwrap(), "{key}"),
            MetaValue::Bool(b) => assert_eq!(*b, v.as_bool().unwrap(), "{key}"),
            MetaValue::F32(x) => assert_eq!(*x as f64, v.as_f64().unwrap(), "{key}"),
            other => assert_eq!(other.as_u64(), v.as_u64(), "{key}"),
        }
    }
    for (key, want) in g["arrays"].as_object().unwrap() {
        let got = f.metadata.get(key).and_then(|v| v.as_array()).unwrap_or_else(|| panic!("missing array {key}"));
        assert_eq!(got.len() as u64, want["len"].as_u64().unwrap(), "{key}");
        let first = want["first"].as_array().unwrap();
        for (i, w) in first.iter().enumerate() {
            match &got[i] {
                MetaValue::String(s) => assert_eq!(s, w.as_str().unwrap(), "{key}[{i}]"),
                other => assert_eq!(other.as_i64(), w.as_i64(), "{key}[{i}]"),
            }
        }
    }

    let tensors = g["tensors"].as_array().unwrap();
    assert_eq!(f.tensors.len(), tensors.len());
    for (t, w) in f.tensors.iter().zip(tensors) {
        assert_eq!(t.name, w["name"].as_str().unwrap());
        let mut dims: Vec<usize> = w["dims"].as_array().unwrap().iter().map(|d| d.as_u64().unwrap() as usize).collect();
        dims.reverse();
        assert_eq!(t.shape, dims, "{}", t.name);
        assert_eq!(t.dtype.ggml_id() as u64, w["type"].as_u64().unwrap(), "{}", t.name);
        assert_eq!(t.bytes().len() as u64, w["n_bytes"].as_u64().unwrap(), "{}", t.name);
    }
}

#[test]
fn demo_model_facts_and_zero_copy_offsets() {
    let f = demo();
    assert_eq!(f.architecture(), Some("llama"));
    assert_eq!(f.metadata.get_u64("llama.block_count"), Some(30));
    assert_eq!(f.metadata.get_u64("llama.embedding_length"), Some(576));
    assert_eq!(f.metadata.get_u64("llama.attention.head_count"), Some(9));
    assert_eq!(f.metadata.get_u64("llama.attention.head_count_kv"), Some(3));
    assert_eq!(f.metadata.get_strings("tokenizer.ggml.tokens").map(|t| t.len()), Some(49152));
    let emb = f.tensors.get("token_embd.weight").unwrap();
    assert_eq!(emb.shape, vec![49152, 576]);
    assert_eq!(emb.dtype, DType::Q8_0);
    assert_eq!(f.tensors.get("blk.0.ffn_down.weight").unwrap().dtype, DType::Q4_1);
    assert_eq!(f.tensors.get("blk.0.ffn_down.weight").unwrap().shape, vec![576, 1536]);
    assert_eq!(f.tensors.get("output_norm.weight").unwrap().dtype, DType::F32);
    assert!(f.tensors.get("output.weight").is_none(), "the demo model ties its output to the embeddings");

    // Views point into the file at the offsets python reports: compare bytes read directly.
    let g = golden();
    let raw = std::fs::read(demo_model_path()).unwrap();
    for w in g["tensors"].as_array().unwrap().iter().step_by(37) {
        let t = f.tensors.get(w["name"].as_str().unwrap()).unwrap();
        let off = w["offset"].as_u64().unwrap() as usize;
        assert_eq!(t.bytes(), &raw[off..off + t.bytes().len()], "{}", t.name);
    }
    let norm = f.tensors.get("output_norm.weight").unwrap();
    let first = f32::from_le_bytes(norm.bytes()[..4].try_into().unwrap());
    assert!(first.is_finite() && first != 0.0);
}

#[test]
fn all_value_types_and_nested_arrays_round_trip() {
    let w = sample();
    let f = GgufFile::from_bytes("sample.gguf", w.to_bytes()).unwrap();
    assert_eq!(f.metadata.entries, w.metadata);
    assert_eq!(f.tensors.len(), 3);
    let a = f.tensors.get("a").unwrap();
    assert_eq!(a.shape, vec![2, 3]);
    assert_eq!(a.bytes()[12..16], 4.0f32.to_le_bytes());
    let q = f.tensors.get("q").unwrap();
    assert_eq!((q.dtype, q.shape.clone(), q.bytes().len()), (DType::Q8_0, vec![2, 32], 68));
    assert_eq!(f.tensors.get("b").unwrap().bytes().len(), 20);
}

fn err_of(bytes: Vec<u8>) -> ModelError {
    match GgufFile::from_bytes("bad.gguf", bytes) {
        Ok(_) => panic!("expected an error"),
        Err(e) => {
            assert!(e.to_string().starts_with("bad.gguf: "), "message must name the file: {e}");
            e
        }
    }
}

#[test]
fn every_truncation_of_a_small_file_is_an_error() {
    let bytes = sample().to_bytes();
    for cut in 0..bytes.len() {
        let e = err_of(bytes[..cut].to_vec());
        assert!(
            matches!(
                e,
                ModelError::Truncated { .. } | ModelError::TooLarge { .. } | ModelError::DataOutOfBounds { .. }
            ),
            "cut {cut}: {e}"
        );
    }
}

#[test]
fn truncations_of_the_demo_header_are_errors() {
    let raw = std::fs::read(demo_model_path()).unwrap();
    let data_offset = golden()["data_offset"].as_u64().unwrap() as usize;
    let mut cuts: Vec<usize> = (0..4096).collect();
    cuts.extend((4096..data_offset).step_by(9973));
    cuts.extend([data_offset - 1, data_offset, data_offset + 1, raw.len() - 1]);
    for cut in cuts {
        let e = err_of(raw[..cut].to_vec());
        if cut < 24 {
            assert!(matches!(e, ModelError::Truncated { .. }), "cut {cut}: {e}");
        }
    }
}

#[test]
fn bad_magic_and_versions() {
    let mut b = sample().to_bytes();
    b[..4].copy_from_slice(b"GGML");
    let e = err_of(b);
    assert!(matches!(e, ModelError::BadMagic { .. }) && e.to_string().contains("GGML"), "{e}");
    for v in [0u32, 1, 4, 3u32.swap_bytes()] {
        let mut w = sample();
        w.version = v;
        let e = err_of(w.to_bytes());
        assert!(matches!(e, ModelError::UnsupportedVersion { version, .. } if version == v), "{e}");
    }
    let mut w = sample();
    w.version = 2;
    assert!(GgufFile::from_bytes("v2.gguf", w.to_bytes()).is_ok());
}

#[test]
fn huge_counts_are_refused_before_allocating() {
    let base = sample().to_bytes();
    // tensor count, metadata count
    for at in [8usize, 16] {
        let mut b = base.clone();
        b[at..at + 8].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(matches!(err_of(b), ModelError::TooLarge { .. }));
    }
    // a string length, then an array length, far beyond the file
    let mut w = GgufWriter::new();
    w.meta("s", MetaValue::String("x".into()));
    let mut b = w.to_bytes();
    let len_at = 24 + 8 + 1 + 4;
    b[len_at..len_at + 8].copy_from_slice(&(1u64 << 40).to_le_bytes());
    assert!(matches!(err_of(b), ModelError::Truncated { .. }));
    let mut w = GgufWriter::new();
    w.meta("a", MetaValue::Array(vec![MetaValue::U8(1)]));
    let mut b = w.to_bytes();
    let count_at = 24 + 8 + 1 + 4 + 4;
    b[count_at..count_at + 8].copy_from_slice(&(1u64 << 62).to_le_bytes());
    let e = err_of(b);
    assert!(matches!(e, ModelError::TooLarge { value, .. } if value == 1 << 62), "{e}");
}

#[test]
fn deep_nesting_is_refused() {
    let mut v = MetaValue::U8(1);
    for _ in 0..MAX_ARRAY_DEPTH + 1 {
        v = MetaValue::Array(vec![v]);
    }
    let mut w = GgufWriter::new();
    w.meta("deep", v);
    assert!(matches!(err_of(w.to_bytes()), ModelError::TooLarge { .. }));
}

#[test]
fn unknown_tensor_type_names_the_tensor_and_id() {
    let mut w = GgufWriter::new();
    w.tensor_f32("weird.weight", &[4], &[0.0; 4]);
    let mut b = w.to_bytes();
    // tensor info: name len (8) + name (12) + n_dims (4) + dim (8), then the type
    let at = 24 + 8 + 12 + 4 + 8;
    b[at..at + 4].copy_from_slice(&99u32.to_le_bytes());
    let e = err_of(b.clone());
    let msg = e.to_string();
    assert!(
        matches!(e, ModelError::UnsupportedTensorType { .. }) && msg.contains("weird.weight") && msg.contains("99"),
        "{msg}"
    );
    // A type ggml defines but we do not read is named, with the types we do.
    b[at..at + 4].copy_from_slice(&23u32.to_le_bytes());
    let msg = err_of(b).to_string();
    assert!(msg.contains("IQ4_XS (ggml type 23)") && msg.contains("Q5_0, Q4_K"), "{msg}");
}

#[test]
fn tensor_data_out_of_bounds_or_misaligned() {
    let mut w = GgufWriter::new();
    w.tensor_f32("t", &[8], &[1.0; 8]);
    let good = w.to_bytes();
    let off_at = 24 + 8 + 1 + 4 + 8 + 4;
    let mut b = good.clone();
    b[off_at..off_at + 8].copy_from_slice(&64u64.to_le_bytes());
    let e = err_of(b);
    assert!(matches!(e, ModelError::DataOutOfBounds { .. }) && e.to_string().contains("\"t\""), "{e}");
    let mut b = good.clone();
    b[off_at..off_at + 8].copy_from_slice(&(u64::MAX - 31).to_le_bytes());
    assert!(matches!(err_of(b), ModelError::DataOutOfBounds { .. }));
    let mut b = good;
    b[off_at..off_at + 8].copy_from_slice(&4u64.to_le_bytes());
    assert!(matches!(err_of(b), ModelError::Corrupt { .. }));
}

#[test]
fn bad_dimensions_and_alignment() {
    let mut w = GgufWriter::new();
    w.tensor("q", DType::Q4_0, &[1, 31], vec![0; 18]);
    assert!(matches!(err_of(w.to_bytes()), ModelError::Corrupt { .. }));
    let mut w = GgufWriter::new();
    w.tensor_f32("t", &[1, 1, 1, 1, 1], &[0.0]);
    assert!(matches!(err_of(w.to_bytes()), ModelError::TooLarge { .. }));
    let mut w = GgufWriter::new();
    w.tensor_f32("t", &[1 << 40, 1 << 40], &[]);
    assert!(matches!(err_of(w.to_bytes()), ModelError::Corrupt { .. }));
    // Found by the fuzzer: a zero innermost dimension hid the overflow of the outer ones from
    // a left-to-right product, but not from Tensor::numel, which multiplies the other way.
    let mut w = GgufWriter::new();
    w.tensor_f32("t", &[1 << 40, 1 << 40, 0], &[]);
    assert!(matches!(err_of(w.to_bytes()), ModelError::Corrupt { .. }));
    let mut w = GgufWriter::new();
    w.tensor_f32("empty", &[3, 0], &[]);
    let f = GgufFile::from_bytes("e.gguf", w.to_bytes()).unwrap();
    assert_eq!((f.tensors.get("empty").unwrap().numel(), f.tensors.get("empty").unwrap().bytes().len()), (0, 0));
    let mut w = GgufWriter::new();
    w.meta("general.alignment", MetaValue::U32(24));
    assert!(matches!(err_of(w.to_bytes()), ModelError::BadValue { .. }));
    let mut w = sample();
    w.metadata.insert(0, ("general.alignment".into(), MetaValue::U32(64)));
    let f = GgufFile::from_bytes("a64.gguf", w.to_bytes()).unwrap();
    assert_eq!(f.alignment, 64);
    assert!(f
        .tensors
        .iter()
        .all(|t| (t.bytes().as_ptr() as usize - f.tensors.iter().next().unwrap().bytes().as_ptr() as usize)
            .is_multiple_of(64)));
}

#[test]
fn bad_bool_utf8_and_duplicates() {
    let mut w = GgufWriter::new();
    w.meta("b", MetaValue::Bool(true));
    let mut b = w.to_bytes();
    b[24 + 9 + 4] = 2;
    assert!(matches!(err_of(b), ModelError::Corrupt { .. }));
    let mut w = GgufWriter::new();
    w.meta("s", MetaValue::String("ab".into()));
    let mut b = w.to_bytes();
    b[24 + 9 + 4 + 8 + 1] = 0xff;
    assert!(matches!(err_of(b), ModelError::Corrupt { .. }));
    let mut w = GgufWriter::new();
    w.tensor_f32("t", &[1], &[0.0]).tensor_f32("t", &[1], &[0.0]);
    assert!(matches!(err_of(w.to_bytes()), ModelError::DuplicateTensor { .. }));
}

#[test]
fn open_reports_missing_files_by_name() {
    let e = GgufFile::open("/nonexistent/model.gguf").err().unwrap();
    assert!(matches!(e, ModelError::Io { .. }) && e.to_string().contains("/nonexistent/model.gguf"));
}
