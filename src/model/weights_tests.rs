use super::*;
use crate::backend::DType;
use crate::model::config::Arch;
use crate::model::gguf::GgufFile;
use crate::model::gguf_write::GgufWriter;
use crate::model::metadata::MetaValue;
use crate::model::safetensors::SafetensorsDir;
use crate::model::test_models::{demo_model_path, hf_tensor_list, qwen3_config, temp_dir, write_hf_dir};
use std::collections::HashSet;

fn all_names(w: &ModelWeights) -> HashSet<String> {
    let mut s: HashSet<String> = [&w.embed, &w.output_norm, &w.output].iter().map(|t| t.name.clone()).collect();
    for l in &w.layers {
        for t in [&l.attn_norm, &l.wq, &l.wk, &l.wv, &l.wo, &l.ffn_norm, &l.w_gate, &l.w_up, &l.w_down] {
            s.insert(t.name.clone());
        }
        for t in [&l.bq, &l.bk, &l.bv, &l.bo, &l.q_norm, &l.k_norm].into_iter().flatten() {
            s.insert(t.name.clone());
        }
    }
    s
}

#[test]
fn demo_gguf_weights_cover_every_tensor() {
    let f = GgufFile::open(demo_model_path()).unwrap();
    let hp = HParams::from_gguf(&f.metadata, &f.tensors, &f.path).unwrap();
    let w = ModelWeights::from_tensors(&f.tensors, Naming::Gguf, &hp, &f.path).unwrap();
    assert_eq!(w.layers.len(), 30);
    assert_eq!(w.rope_layout, RopeLayout::Interleaved);
    assert_eq!(w.layers[7].wq.shape, vec![576, 576]);
    assert_eq!(w.layers[7].wk.shape, vec![192, 576]);
    assert_eq!(w.layers[29].w_down.shape, vec![576, 1536]);
    assert_eq!(w.layers[0].wq.dtype, DType::Q4_1);
    assert_eq!(w.layers[0].attn_norm.dtype, DType::F32);
    // Tied: the head is the embedding matrix itself, not a copy.
    assert_eq!(w.output.bytes().as_ptr(), w.embed.bytes().as_ptr());
    let file_names: HashSet<String> = f.tensors.iter().map(|t| t.name.clone()).collect();
    assert_eq!(all_names(&w), file_names);
}

#[test]
fn hf_qwen3_directory_maps_to_logical_weights() {
    let dir = temp_dir("w-qwen3");
    let cfg = qwen3_config();
    let list = hf_tensor_list(&cfg, false);
    write_hf_dir(&dir, &cfg, &list, 2);
    let st = SafetensorsDir::open(&dir).unwrap();
    let hp = HParams::from_hf_config(&cfg, &dir).unwrap();
    let w = ModelWeights::from_tensors(&st.tensors, Naming::HuggingFace, &hp, &dir).unwrap();
    assert_eq!((hp.arch, w.rope_layout), (Arch::Qwen3, RopeLayout::NeoX));
    assert_eq!(w.layers[1].wk.name, "model.layers.1.self_attn.k_proj.weight");
    assert_eq!(w.layers[1].q_norm.as_ref().unwrap().shape, vec![32]);
    assert!(w.layers[0].bq.is_none());
    assert_eq!(w.output.name, "lm_head.weight");
    let names: HashSet<String> = list.iter().map(|(n, _)| n.clone()).collect();
    assert_eq!(all_names(&w), names);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn hf_qwen2_biases_and_tied_head() {
    let dir = temp_dir("w-qwen2");
    let mut cfg = qwen3_config();
    cfg["model_type"] = "qwen2".into();
    cfg["tie_word_embeddings"] = true.into();
    let list = hf_tensor_list(&cfg, true);
    write_hf_dir(&dir, &cfg, &list, 1);
    let st = SafetensorsDir::open(&dir).unwrap();
    let hp = HParams::from_hf_config(&cfg, &dir).unwrap();
    let w = ModelWeights::from_tensors(&st.tensors, Naming::HuggingFace, &hp, &dir).unwrap();
    assert_eq!(w.layers[0].bk.as_ref().unwrap().shape, vec![64]);
    assert!(w.layers[0].q_norm.is_none() && w.layers[0].bo.is_none());
    assert_eq!(w.output.name, "model.embed_tokens.weight");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn missing_and_misshapen_tensors_are_named() {
    let cfg = qwen3_config();
    let hp = HParams::from_hf_config(&cfg, Path::new("config.json")).unwrap();
    let dir = temp_dir("w-missing");
    let mut list = hf_tensor_list(&cfg, false);
    list.retain(|(n, _)| n != "model.layers.1.mlp.up_proj.weight");
    write_hf_dir(&dir, &cfg, &list, 1);
    let st = SafetensorsDir::open(&dir).unwrap();
    let e = ModelWeights::from_tensors(&st.tensors, Naming::HuggingFace, &hp, &dir).unwrap_err();
    assert!(
        matches!(e, ModelError::MissingTensor { .. }) && e.to_string().contains("model.layers.1.mlp.up_proj.weight"),
        "{e}"
    );

    let dir2 = temp_dir("w-shape");
    let mut list = hf_tensor_list(&cfg, false);
    for (n, s) in &mut list {
        if n == "model.layers.0.self_attn.k_proj.weight" {
            *s = vec![32, 64];
        }
    }
    write_hf_dir(&dir2, &cfg, &list, 1);
    let st = SafetensorsDir::open(&dir2).unwrap();
    let e = ModelWeights::from_tensors(&st.tensors, Naming::HuggingFace, &hp, &dir2).unwrap_err();
    let msg = e.to_string();
    assert!(
        matches!(e, ModelError::WrongShape { .. })
            && msg.contains("k_proj")
            && msg.contains("[32, 64]")
            && msg.contains("[64, 64]"),
        "{msg}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::remove_dir_all(&dir2).unwrap();
}

/// A random-free qwen3 GGUF (F32 zeros) with llama.cpp's names.
fn qwen3_gguf(skip: &str) -> Vec<u8> {
    let (h, q, kv, hd, ffn, vocab) = (64usize, 128usize, 64usize, 32usize, 96usize, 100usize);
    let mut w = GgufWriter::new();
    w.meta("general.architecture", MetaValue::String("qwen3".into()))
        .meta("qwen3.block_count", MetaValue::U32(1))
        .meta("qwen3.embedding_length", MetaValue::U32(h as u32))
        .meta("qwen3.attention.head_count", MetaValue::U32(4))
        .meta("qwen3.attention.head_count_kv", MetaValue::U32(2))
        .meta("qwen3.attention.key_length", MetaValue::U32(hd as u32))
        .meta("qwen3.feed_forward_length", MetaValue::U32(ffn as u32))
        .meta("qwen3.context_length", MetaValue::U32(512))
        .meta("qwen3.attention.layer_norm_rms_epsilon", MetaValue::F32(1e-6))
        .meta("qwen3.vocab_size", MetaValue::U32(vocab as u32));
    let tensors: [(&str, Vec<usize>); 12] = [
        ("token_embd.weight", vec![vocab, h]),
        ("blk.0.attn_norm.weight", vec![h]),
        ("blk.0.attn_q.weight", vec![q, h]),
        ("blk.0.attn_k.weight", vec![kv, h]),
        ("blk.0.attn_v.weight", vec![kv, h]),
        ("blk.0.attn_output.weight", vec![h, q]),
        ("blk.0.attn_q_norm.weight", vec![hd]),
        ("blk.0.attn_k_norm.weight", vec![hd]),
        ("blk.0.ffn_norm.weight", vec![h]),
        ("blk.0.ffn_gate.weight", vec![ffn, h]),
        ("blk.0.ffn_up.weight", vec![ffn, h]),
        ("blk.0.ffn_down.weight", vec![h, ffn]),
    ];
    for (n, s) in tensors.iter().chain([("output_norm.weight", vec![h])].iter()) {
        if *n != skip {
            w.tensor_f32(n, s, &vec![0.0; s.iter().product()]);
        }
    }
    w.to_bytes()
}

#[test]
fn gguf_qwen3_names_and_errors() {
    let f = GgufFile::from_bytes("q3.gguf", qwen3_gguf("")).unwrap();
    let hp = HParams::from_gguf(&f.metadata, &f.tensors, &f.path).unwrap();
    let w = ModelWeights::from_tensors(&f.tensors, Naming::Gguf, &hp, &f.path).unwrap();
    assert_eq!(w.rope_layout, RopeLayout::NeoX);
    assert_eq!(w.layers[0].k_norm.as_ref().unwrap().name, "blk.0.attn_k_norm.weight");
    assert_eq!(w.output.name, "token_embd.weight");

    let f = GgufFile::from_bytes("q3.gguf", qwen3_gguf("blk.0.attn_q_norm.weight")).unwrap();
    let hp = HParams::from_gguf(&f.metadata, &f.tensors, &f.path).unwrap();
    let e = ModelWeights::from_tensors(&f.tensors, Naming::Gguf, &hp, &f.path).unwrap_err();
    assert_eq!(e.to_string(), "q3.gguf: missing tensor \"blk.0.attn_q_norm.weight\"");
}

/// The fuzz seeds are real, complete files of the tiny qwen3 shape: the GGUF one was written
/// by the independent `gguf` package (tests/data/make_fuzz_seeds.py), the safetensors one by
/// hand from the format definition. Both must load end to end, so the fuzzers start deep.
#[test]
fn fuzz_seed_files_load_completely() {
    let f = GgufFile::from_bytes("seed.gguf", include_bytes!("../../fuzz/corpus/gguf_header/seed-tiny-qwen3").to_vec())
        .unwrap();
    let hp = HParams::from_gguf(&f.metadata, &f.tensors, &f.path).unwrap();
    assert_eq!((hp.arch, hp.hidden, hp.n_heads, hp.n_kv_heads, hp.head_dim, hp.vocab), (Arch::Qwen3, 8, 2, 1, 4, 4));
    let w = ModelWeights::from_tensors(&f.tensors, Naming::Gguf, &hp, &f.path).unwrap();
    let q = &w.layers[0].wq;
    assert_eq!(q.shape, vec![8, 8]);
    // numpy's arange(64).reshape(8, 8): row 1 starts with 8.0
    assert_eq!(q.bytes()[32..36], 8.0f32.to_le_bytes());

    let storage = std::sync::Arc::new(crate::model::tensor::Storage::Owned(
        include_bytes!("../../fuzz/corpus/safetensors_header/seed-tiny-qwen3").to_vec(),
    ));
    let mut set = TensorSet::new();
    crate::model::safetensors::add_tensors(&storage, Path::new("seed.safetensors"), &mut set).unwrap();
    let w2 = ModelWeights::from_tensors(&set, Naming::HuggingFace, &hp, Path::new("seed.safetensors")).unwrap();
    assert_eq!(w2.layers[0].w_down.shape, vec![8, 8]);
    assert_eq!(w2.layers[0].w_down.dtype, DType::BF16);
}
