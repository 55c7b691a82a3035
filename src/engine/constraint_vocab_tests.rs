//! The grammar's view of a vocabulary is the same whether the tokenizer came from a GGUF file's
//! metadata or from a Hugging Face `tokenizer.json`: each committed `tokenizer.json` is written
//! into GGUF metadata as llama.cpp's converter writes it (tokens in id order, token types,
//! merges), and the raw bytes of every id are compared.

use super::token_bytes;
use crate::model::metadata::{MetaValue, Metadata};
use crate::model::Tokenizer;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// GGUF token types (llama.cpp's `llama_token_type`).
const NORMAL: i32 = 1;
const UNKNOWN: i32 = 2;
const CONTROL: i32 = 3;
const USER_DEFINED: i32 = 4;
const BYTE: i32 = 6;

fn dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/tokenizers").join(name)
}

/// `tokenizer.json` as GGUF metadata: `model` is `llama` (SentencePiece) or `gpt2` (byte-level
/// BPE), `pre` the pre-tokenizer's name for the latter.
fn as_gguf(json: &Value, model: &str, pre: Option<&str>) -> Metadata {
    let vocab = json["model"]["vocab"].as_object().unwrap();
    let added = json["added_tokens"].as_array().unwrap();
    let n =
        vocab.values().chain(added.iter().map(|a| &a["id"])).map(|id| id.as_u64().unwrap() as usize + 1).max().unwrap();
    let mut tokens = vec![String::new(); n];
    let mut types = vec![NORMAL; n];
    for (t, id) in vocab {
        let id = id.as_u64().unwrap() as usize;
        tokens[id] = t.clone();
        if model == "llama" && t.len() == 6 && t.starts_with("<0x") && t.ends_with('>') {
            types[id] = BYTE;
        }
    }
    let unk = json["model"]["unk_token"].as_str();
    for a in added {
        let (id, content) = (a["id"].as_u64().unwrap() as usize, a["content"].as_str().unwrap());
        tokens[id] = content.to_string();
        types[id] = match (Some(content) == unk, a["special"].as_bool() == Some(true)) {
            (true, _) => UNKNOWN,
            (false, true) => CONTROL,
            (false, false) => USER_DEFINED,
        };
    }
    let merges: Vec<MetaValue> = json["model"]["merges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| match m {
            Value::String(s) => MetaValue::String(s.clone()),
            Value::Array(pair) => {
                MetaValue::String(format!("{} {}", pair[0].as_str().unwrap(), pair[1].as_str().unwrap()))
            }
            other => panic!("a merge {other}"),
        })
        .collect();
    let strings = |v: Vec<String>| MetaValue::Array(v.into_iter().map(MetaValue::String).collect());
    let mut entries = vec![
        ("tokenizer.ggml.model".to_string(), MetaValue::String(model.into())),
        ("tokenizer.ggml.tokens".to_string(), strings(tokens)),
        ("tokenizer.ggml.token_type".to_string(), MetaValue::Array(types.into_iter().map(MetaValue::I32).collect())),
        // Merge order follows the scores in a SentencePiece file: the earlier the merge, the higher.
        ("tokenizer.ggml.scores".to_string(), MetaValue::Array((0..n).map(|i| MetaValue::F32(-(i as f32))).collect())),
        ("tokenizer.ggml.merges".to_string(), MetaValue::Array(merges)),
        ("tokenizer.ggml.eos_token_id".to_string(), MetaValue::U32(added[0]["id"].as_u64().unwrap() as u32)),
    ];
    if let Some(pre) = pre {
        entries.push(("tokenizer.ggml.pre".to_string(), MetaValue::String(pre.into())));
    }
    Metadata { entries }
}

#[test]
fn a_gguf_vocabulary_and_its_tokenizer_json_give_the_same_bytes_id_for_id() {
    for (name, model, pre) in
        [("llama2", "llama", None), ("llama3", "gpt2", Some("llama-bpe")), ("qwen3", "gpt2", Some("qwen2"))]
    {
        let d = dir(name);
        let from_json =
            Tokenizer::from_json_files(&d.join("tokenizer.json"), Some(&d.join("tokenizer_config.json"))).unwrap();
        let json: Value = serde_json::from_slice(&std::fs::read(d.join("tokenizer.json")).unwrap()).unwrap();
        let from_gguf = Tokenizer::from_gguf_metadata(&as_gguf(&json, model, pre)).unwrap();
        assert_eq!(from_gguf.vocab_size(), from_json.vocab_size(), "{name}");
        let width = from_json.vocab_size() + 8;
        let (a, b) = (token_bytes(&from_json, width), token_bytes(&from_gguf, width));
        let differ: Vec<usize> = (0..width).filter(|&i| a[i] != b[i]).collect();
        assert!(
            differ.is_empty(),
            "{name}: {} ids differ, the first {:?}: {:?} from tokenizer.json, {:?} from GGUF",
            differ.len(),
            differ[0],
            String::from_utf8_lossy(&a[differ[0]]),
            String::from_utf8_lossy(&b[differ[0]])
        );
        // The conversions kept the spaces, byte tokens and control tokens the trie depends on.
        let space: Vec<usize> = (0..width).filter(|&i| a[i].first() == Some(&b' ')).collect();
        assert!(space.len() > 1000, "{name}: {} tokens start with a space", space.len());
    }
}
