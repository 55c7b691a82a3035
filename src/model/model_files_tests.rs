use super::*;
use crate::model::config::{Arch, RopeLayout};
use crate::model::test_models::{demo_model_path, hf_tensor_list, qwen3_config, temp_dir, write_hf_dir};
use serde_json::json;

#[test]
fn demo_gguf_opens_with_tokenizer_and_template() {
    let m = ModelFiles::open(demo_model_path()).unwrap();
    assert_eq!(m.format, Format::Gguf);
    assert_eq!(m.name, "Smollm2 135M 8k Lc100K Mix1 Ep2");
    assert_eq!(m.tokenizer, Some(TokenizerSource::GgufMetadata));
    let t = m.chat_template.as_deref().unwrap();
    assert!(t.contains("<|im_start|>") && t.contains("add_generation_prompt"), "{t}");
    assert_eq!((m.bos_token, m.eos_tokens.clone()), (Some(1), vec![2]));
    let info = m.info();
    assert_eq!(
        (info.arch.as_str(), info.n_layers, info.hidden, info.n_heads, info.n_kv_heads),
        ("llama", 30, 576, 9, 3)
    );
    assert_eq!((info.vocab_size, info.head_dim, info.context_length), (49152, 64, 8192));
    assert_eq!(m.weights.layers.len(), 30);
    assert_eq!(m.tensors.len(), 272);
}

fn hf_dir(tag: &str) -> PathBuf {
    let dir = temp_dir(tag);
    let cfg = qwen3_config();
    write_hf_dir(&dir, &cfg, &hf_tensor_list(&cfg, false), 2);
    dir
}

#[test]
fn hf_directory_with_tokenizer_template_and_generation_config() {
    let dir = hf_dir("files-hf");
    std::fs::write(dir.join("tokenizer.json"), "{}").unwrap();
    std::fs::write(dir.join("tokenizer_config.json"), json!({"chat_template": "{{ messages }}"}).to_string()).unwrap();
    std::fs::write(dir.join("generation_config.json"), json!({"bos_token_id": 5, "eos_token_id": [7, 8]}).to_string())
        .unwrap();
    let m = ModelFiles::open(&dir).unwrap();
    assert_eq!(m.format, Format::HuggingFace);
    assert_eq!((m.hparams.arch, m.weights.rope_layout), (Arch::Qwen3, RopeLayout::NeoX));
    assert_eq!(
        m.tokenizer,
        Some(TokenizerSource::HfJson {
            tokenizer_json: dir.join("tokenizer.json"),
            tokenizer_config: Some(dir.join("tokenizer_config.json"))
        })
    );
    assert_eq!(m.chat_template.as_deref(), Some("{{ messages }}"));
    assert_eq!((m.bos_token, m.eos_tokens.clone()), (Some(5), vec![7, 8]));
    assert_eq!(m.metadata.get_str("model_type"), Some("qwen3"));
    assert_eq!(m.metadata.get_u64("num_hidden_layers"), Some(2));
    assert!(m.metadata.get("rope_scaling").is_none());
    assert_eq!(m.info().eos_tokens, vec![7, 8]);

    // A separate chat_template.jinja wins over tokenizer_config.json.
    std::fs::write(dir.join("chat_template.jinja"), "JINJA").unwrap();
    assert_eq!(ModelFiles::open(&dir).unwrap().chat_template.as_deref(), Some("JINJA"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn named_templates_and_weights_only_directories() {
    let dir = hf_dir("files-named");
    let list = json!({"chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}]});
    std::fs::write(dir.join("tokenizer_config.json"), list.to_string()).unwrap();
    let m = ModelFiles::open(&dir).unwrap();
    assert_eq!(m.chat_template.as_deref(), Some("D"));
    assert_eq!(m.tokenizer, None);
    assert_eq!((m.bos_token, m.eos_tokens.clone()), (None, vec![]));

    std::fs::write(dir.join("tokenizer_config.json"), json!({"chat_template": 3}).to_string()).unwrap();
    assert!(matches!(ModelFiles::open(&dir), Err(ModelError::BadJson { .. })));
    std::fs::write(dir.join("config.json"), "{not json").unwrap();
    let e = ModelFiles::open(&dir).err().unwrap();
    assert!(matches!(e, ModelError::BadJson { .. }) && e.to_string().contains("config.json"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn paths_that_are_not_models() {
    let dir = temp_dir("files-bad");
    let e = ModelFiles::open(&dir).err().unwrap();
    assert!(matches!(e, ModelError::NotAModel { .. }), "{e}");
    let text = dir.join("notes.txt");
    std::fs::write(&text, "hello, world").unwrap();
    assert!(matches!(ModelFiles::open(&text), Err(ModelError::BadMagic { .. })));
    assert!(matches!(ModelFiles::open(dir.join("absent.gguf")), Err(ModelError::Io { .. })));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn config_json_flattens_into_metadata() {
    let m = json_to_metadata(&json!({"a": 1, "b": {"c": -2, "d": [1.5, "x"]}, "n": null, "t": true}));
    assert_eq!(m.get_u64("a"), Some(1));
    assert_eq!(m.get("b.c"), Some(&MetaValue::I64(-2)));
    assert_eq!(m.get("b.d"), Some(&MetaValue::Array(vec![MetaValue::F64(1.5), MetaValue::String("x".into())])));
    assert_eq!(m.get("t"), Some(&MetaValue::Bool(true)));
    assert_eq!(m.entries.len(), 4);
}
