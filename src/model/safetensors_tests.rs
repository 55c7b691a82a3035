use super::*;
use crate::model::test_models::{
    hf_tensor_list, qwen3_config, temp_dir, tensor_bytes, write_hf_dir, write_safetensors,
};

#[test]
fn single_file_loads_zero_copy_with_hf_names() {
    let dir = temp_dir("st-single");
    let cfg = qwen3_config();
    let list = hf_tensor_list(&cfg, false);
    write_hf_dir(&dir, &cfg, &list, 1);
    let st = SafetensorsDir::open(&dir).unwrap();
    assert_eq!(st.files, vec![dir.join("model.safetensors")]);
    assert_eq!(st.tensors.len(), list.len());
    for (i, (name, shape)) in list.iter().enumerate() {
        let t = st.tensors.get(name).unwrap_or_else(|| panic!("{name}"));
        assert_eq!(&t.shape, shape, "{name}");
        let want = if shape.len() == 1 { (DType::F32, Dtype::F32) } else { (DType::BF16, Dtype::BF16) };
        assert_eq!(t.dtype, want.0);
        assert_eq!(t.bytes(), tensor_bytes(want.1, i, shape.iter().product()), "{name}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn sharded_directory_with_index() {
    let dir = temp_dir("st-sharded");
    let cfg = qwen3_config();
    let list = hf_tensor_list(&cfg, false);
    write_hf_dir(&dir, &cfg, &list, 3);
    let st = SafetensorsDir::open(&dir).unwrap();
    assert_eq!(st.files.len(), 3);
    assert_eq!(st.tensors.len(), list.len());
    let q = st.tensors.get("model.layers.1.self_attn.q_proj.weight").unwrap();
    assert_eq!(q.shape, vec![128, 64]);

    // An index naming a tensor its shard lacks.
    let index_path = dir.join(INDEX_FILE);
    let mut index: serde_json::Value = serde_json::from_slice(&std::fs::read(&index_path).unwrap()).unwrap();
    index["weight_map"]["model.extra.weight"] = "model-00002-of-00003.safetensors".into();
    std::fs::write(&index_path, serde_json::to_vec(&index).unwrap()).unwrap();
    let e = SafetensorsDir::open(&dir).err().unwrap();
    assert!(
        matches!(e, ModelError::MissingTensor { .. })
            && e.to_string().contains("model.extra.weight")
            && e.to_string().contains("00002"),
        "{e}"
    );

    // A shard path that leaves the directory.
    index["weight_map"]["model.extra.weight"] = "../evil.safetensors".into();
    std::fs::write(&index_path, serde_json::to_vec(&index).unwrap()).unwrap();
    assert!(matches!(SafetensorsDir::open(&dir), Err(ModelError::BadJson { .. })));

    std::fs::write(&index_path, b"{\"weight_map\": ").unwrap();
    let e = SafetensorsDir::open(&dir).err().unwrap();
    assert!(matches!(e, ModelError::BadJson { .. }) && e.to_string().contains(INDEX_FILE), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn unsupported_dtype_names_the_tensor() {
    let dir = temp_dir("st-dtype");
    let t = vec![("model.weird".to_string(), Dtype::I64, vec![2], vec![0u8; 16])];
    write_safetensors(&dir.join(SINGLE_FILE), &t);
    let e = SafetensorsDir::open(&dir).err().unwrap();
    assert!(
        matches!(e, ModelError::UnsupportedTensorType { .. })
            && e.to_string().contains("model.weird")
            && e.to_string().contains("I64"),
        "{e}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn corrupt_and_truncated_files_are_errors() {
    let dir = temp_dir("st-corrupt");
    let t = vec![
        ("a".to_string(), Dtype::F32, vec![2, 2], vec![1u8; 16]),
        ("b".to_string(), Dtype::F16, vec![3], vec![2u8; 6]),
    ];
    let path = dir.join(SINGLE_FILE);
    write_safetensors(&path, &t);
    let good = std::fs::read(&path).unwrap();
    for cut in 0..good.len() {
        let storage = Arc::new(Storage::Owned(good[..cut].to_vec()));
        let e = add_tensors(&storage, &path, &mut TensorSet::new()).err().unwrap_or_else(|| panic!("cut {cut} parsed"));
        assert!(e.to_string().contains("model.safetensors"), "{e}");
    }
    let mut huge = good.clone();
    huge[..8].copy_from_slice(&u64::MAX.to_le_bytes());
    assert!(add_tensors(&Arc::new(Storage::Owned(huge)), &path, &mut TensorSet::new()).is_err());
    let mut set = TensorSet::new();
    add_tensors(&Arc::new(Storage::Owned(good)), &path, &mut set).unwrap();
    assert_eq!(set.get("b").unwrap().bytes(), &[2u8; 6]);

    let empty = temp_dir("st-empty");
    assert!(matches!(SafetensorsDir::open(&empty), Err(ModelError::NotAModel { .. })));
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::remove_dir_all(&empty).unwrap();
}

#[test]
fn zero_sized_shapes_that_overflow_are_refused() {
    let header = br#"{"t":{"dtype":"F32","shape":[0,4294967296,4294967296],"data_offsets":[0,0]}}"#;
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(header);
    let e =
        add_tensors(&Arc::new(Storage::Owned(bytes)), Path::new("z.safetensors"), &mut TensorSet::new()).err().unwrap();
    assert!(matches!(e, ModelError::Corrupt { .. }) && e.to_string().contains("overflows"), "{e}");
}
