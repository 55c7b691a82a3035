use super::*;
use crate::model::gguf::GgufFile;
use crate::model::gguf_write::GgufWriter;
use crate::model::metadata::MetaValue;
use crate::model::test_models::demo_model_path;
use serde_json::json;

#[test]
fn demo_gguf_hparams() {
    let f = GgufFile::open(demo_model_path()).unwrap();
    let hp = HParams::from_gguf(&f.metadata, &f.tensors, &f.path).unwrap();
    assert_eq!(hp.arch, Arch::Llama);
    assert_eq!((hp.n_layers, hp.hidden, hp.n_heads, hp.n_kv_heads, hp.head_dim), (30, 576, 9, 3, 64));
    assert_eq!((hp.ffn, hp.vocab, hp.context_length), (1536, 49152, 8192));
    assert_eq!(hp.rope_theta, 100_000.0);
    assert_eq!(hp.rms_eps, 1e-5);
    assert!(hp.tied_embeddings);
    assert_eq!(hp.rope_layout, RopeLayout::Interleaved);
    assert!(!hp.qk_norm && !hp.qkv_bias && !hp.o_bias);
}

fn qwen3_gguf_meta() -> GgufWriter {
    let mut w = GgufWriter::new();
    w.meta("general.architecture", MetaValue::String("qwen3".into()))
        .meta("qwen3.block_count", MetaValue::U32(2))
        .meta("qwen3.embedding_length", MetaValue::U32(64))
        .meta("qwen3.attention.head_count", MetaValue::U32(4))
        .meta("qwen3.attention.head_count_kv", MetaValue::U32(2))
        .meta("qwen3.attention.key_length", MetaValue::U32(32))
        .meta("qwen3.feed_forward_length", MetaValue::U32(96))
        .meta("qwen3.context_length", MetaValue::U32(4096))
        .meta("qwen3.rope.freq_base", MetaValue::F32(1_000_000.0))
        .meta("qwen3.attention.layer_norm_rms_epsilon", MetaValue::F32(1e-6))
        .meta("qwen3.vocab_size", MetaValue::U32(100));
    w.tensor_f32("output.weight", &[1], &[0.0]);
    w
}

#[test]
fn qwen3_gguf_uses_neox_and_key_length() {
    let f = GgufFile::from_bytes("q.gguf", qwen3_gguf_meta().to_bytes()).unwrap();
    let hp = HParams::from_gguf(&f.metadata, &f.tensors, &f.path).unwrap();
    assert_eq!((hp.arch, hp.head_dim, hp.q_dim(), hp.kv_dim()), (Arch::Qwen3, 32, 128, 64));
    assert_eq!(hp.rope_layout, RopeLayout::NeoX);
    assert!(hp.qk_norm && !hp.tied_embeddings && !hp.qkv_bias);
    assert_eq!(hp.rope_theta, 1e6);
}

#[test]
fn gguf_errors_name_the_key() {
    let mut w = qwen3_gguf_meta();
    w.metadata[0].1 = MetaValue::String("mamba".into());
    let f = GgufFile::from_bytes("m.gguf", w.to_bytes()).unwrap();
    let e = HParams::from_gguf(&f.metadata, &f.tensors, &f.path).unwrap_err();
    assert!(matches!(e, ModelError::UnknownArchitecture { .. }) && e.to_string().contains("mamba"), "{e}");

    let mut w = qwen3_gguf_meta();
    w.metadata.retain(|(k, _)| k != "qwen3.block_count");
    let f = GgufFile::from_bytes("m.gguf", w.to_bytes()).unwrap();
    let e = HParams::from_gguf(&f.metadata, &f.tensors, &f.path).unwrap_err();
    assert!(e.to_string().contains("qwen3.block_count"), "{e}");

    let mut w = qwen3_gguf_meta();
    w.metadata[4].1 = MetaValue::U32(3); // 4 heads over 3 kv heads
    let f = GgufFile::from_bytes("m.gguf", w.to_bytes()).unwrap();
    let e = HParams::from_gguf(&f.metadata, &f.tensors, &f.path).unwrap_err();
    assert!(matches!(e, ModelError::BadValue { .. }), "{e}");

    let mut w = qwen3_gguf_meta();
    w.metadata[1].1 = MetaValue::U64(1 << 40);
    let f = GgufFile::from_bytes("m.gguf", w.to_bytes()).unwrap();
    let e = HParams::from_gguf(&f.metadata, &f.tensors, &f.path).unwrap_err();
    assert!(e.to_string().contains("outside 1..=1024"), "{e}");
}

fn qwen3_config() -> serde_json::Value {
    json!({
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
        "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 32, "intermediate_size": 96, "vocab_size": 100, "max_position_embeddings": 4096,
        "rope_theta": 1000000.0, "rms_norm_eps": 1e-6, "tie_word_embeddings": true,
        "attention_bias": false, "rope_scaling": null, "torch_dtype": "bfloat16"
    })
}

#[test]
fn hf_configs_of_each_arch() {
    let p = Path::new("config.json");
    let hp = HParams::from_hf_config(&qwen3_config(), p).unwrap();
    assert_eq!((hp.arch, hp.n_layers, hp.hidden, hp.head_dim, hp.ffn, hp.vocab), (Arch::Qwen3, 2, 64, 32, 96, 100));
    assert!(hp.tied_embeddings && hp.qk_norm && !hp.qkv_bias);
    assert_eq!(hp.rope_layout, RopeLayout::NeoX);

    let qwen2 = json!({"model_type": "qwen2", "num_hidden_layers": 1, "hidden_size": 32, "num_attention_heads": 2,
        "num_key_value_heads": 1, "intermediate_size": 64, "vocab_size": 50, "max_position_embeddings": 128,
        "rms_norm_eps": 1e-6});
    let hp = HParams::from_hf_config(&qwen2, p).unwrap();
    assert_eq!((hp.head_dim, hp.rope_theta, hp.tied_embeddings), (16, 10_000.0, false));
    assert!(hp.qkv_bias && !hp.o_bias && !hp.qk_norm);

    let llama = json!({"model_type": "llama", "num_hidden_layers": 1, "hidden_size": 32, "num_attention_heads": 4,
        "intermediate_size": 64, "vocab_size": 50, "max_position_embeddings": 128, "rms_norm_eps": 1e-5,
        "rope_theta": 500000.0});
    let hp = HParams::from_hf_config(&llama, p).unwrap();
    assert_eq!((hp.n_kv_heads, hp.head_dim, hp.rope_layout), (4, 8, RopeLayout::NeoX));
}

#[test]
fn hf_config_errors() {
    let p = Path::new("/m/config.json");
    let mut c = qwen3_config();
    c["model_type"] = json!("gpt2");
    let e = HParams::from_hf_config(&c, p).unwrap_err();
    assert!(matches!(e, ModelError::UnknownArchitecture { .. }) && e.to_string().contains("/m/config.json"), "{e}");
    let mut c = qwen3_config();
    c.as_object_mut().unwrap().remove("hidden_size");
    assert!(matches!(HParams::from_hf_config(&c, p), Err(ModelError::MissingKey { .. })));
    let mut c = qwen3_config();
    c["hidden_size"] = json!(-3);
    assert!(matches!(HParams::from_hf_config(&c, p), Err(ModelError::BadValue { .. })));
    let mut c = qwen3_config();
    c["rms_norm_eps"] = json!("tiny");
    assert!(matches!(HParams::from_hf_config(&c, p), Err(ModelError::BadValue { .. })));
    let mut c = qwen3_config();
    c["rope_scaling"] = json!({"rope_type": "yarn", "factor": 4.0});
    let e = HParams::from_hf_config(&c, p).unwrap_err();
    assert!(e.to_string().contains("yarn"), "{e}");
    let mut c = qwen3_config();
    c["head_dim"] = json!(31);
    assert!(matches!(HParams::from_hf_config(&c, p), Err(ModelError::BadValue { .. })));
}
