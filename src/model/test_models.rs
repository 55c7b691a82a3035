//! Models for the model layer's unit tests: where the demo GGUF is, fresh temp directories, and
//! tiny Hugging Face model directories (config.json and safetensors shards) written from a
//! config.

use std::path::PathBuf;

/// The demo GGUF: `MTPLX_DEMO_MODEL`, else where the server caches it (`XDG_CACHE_HOME`
/// honoured; `tests/setup.sh` fetches it there). Tests that use it fail (not skip) when it is
/// missing.
pub fn demo_model_path() -> PathBuf {
    if let Some(p) = std::env::var_os("MTPLX_DEMO_MODEL") {
        return PathBuf::from(p);
    }
    crate::model::fetch::cached_demo_model().unwrap_or_else(|e| panic!("{e}"))
}

/// A fresh, empty directory under the system temp dir, unique to this test.
pub fn temp_dir(tag: &str) -> PathBuf {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("mtplx-model-{tag}-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create temp dir");
    dir
}

/// A tiny qwen3-shaped `config.json` (2 layers, hidden 64, 4 heads of 32, 2 kv heads).
pub fn qwen3_config() -> serde_json::Value {
    serde_json::json!({
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
        "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 32, "intermediate_size": 96, "vocab_size": 100, "max_position_embeddings": 4096,
        "rope_theta": 1000000.0, "rms_norm_eps": 1e-6, "tie_word_embeddings": false,
        "attention_bias": false, "rope_scaling": null, "torch_dtype": "bfloat16"
    })
}

/// The HF tensors of a qwen3 (or, with `qkv_bias`, qwen2) config, written out by hand rather
/// than derived from the weights module, so that a wrong name mapping there fails the tests.
pub fn hf_tensor_list(cfg: &serde_json::Value, qkv_bias: bool) -> Vec<(String, Vec<usize>)> {
    let g = |k: &str| cfg[k].as_u64().unwrap() as usize;
    let (h, heads, kv, hd, ffn, vocab) = (
        g("hidden_size"),
        g("num_attention_heads"),
        g("num_key_value_heads"),
        g("head_dim"),
        g("intermediate_size"),
        g("vocab_size"),
    );
    let mut out = vec![("model.embed_tokens.weight".to_string(), vec![vocab, h])];
    for l in 0..g("num_hidden_layers") {
        let p = format!("model.layers.{l}");
        out.push((format!("{p}.input_layernorm.weight"), vec![h]));
        out.push((format!("{p}.self_attn.q_proj.weight"), vec![heads * hd, h]));
        out.push((format!("{p}.self_attn.k_proj.weight"), vec![kv * hd, h]));
        out.push((format!("{p}.self_attn.v_proj.weight"), vec![kv * hd, h]));
        out.push((format!("{p}.self_attn.o_proj.weight"), vec![h, heads * hd]));
        if qkv_bias {
            out.push((format!("{p}.self_attn.q_proj.bias"), vec![heads * hd]));
            out.push((format!("{p}.self_attn.k_proj.bias"), vec![kv * hd]));
            out.push((format!("{p}.self_attn.v_proj.bias"), vec![kv * hd]));
        } else {
            out.push((format!("{p}.self_attn.q_norm.weight"), vec![hd]));
            out.push((format!("{p}.self_attn.k_norm.weight"), vec![hd]));
        }
        out.push((format!("{p}.post_attention_layernorm.weight"), vec![h]));
        out.push((format!("{p}.mlp.gate_proj.weight"), vec![ffn, h]));
        out.push((format!("{p}.mlp.up_proj.weight"), vec![ffn, h]));
        out.push((format!("{p}.mlp.down_proj.weight"), vec![h, ffn]));
    }
    out.push(("model.norm.weight".to_string(), vec![h]));
    if !cfg["tie_word_embeddings"].as_bool().unwrap_or(false) {
        out.push(("lm_head.weight".to_string(), vec![vocab, h]));
    }
    out
}

/// Deterministic bytes for a tensor: element `i` of tensor `t` encodes `t * 1000 + i` (mod
/// 65536) in `dtype`, so tests can tell tensors and positions apart.
pub fn tensor_bytes(dtype: safetensors::Dtype, tag: usize, numel: usize) -> Vec<u8> {
    (0..numel)
        .flat_map(|i| {
            let v = ((tag * 1000 + i) % 65536) as f32;
            match dtype {
                safetensors::Dtype::F32 => v.to_le_bytes().to_vec(),
                safetensors::Dtype::BF16 => ((v.to_bits() >> 16) as u16).to_le_bytes().to_vec(),
                _ => ((i % 65536) as u16).to_le_bytes().to_vec(),
            }
        })
        .collect()
}

/// Writes one safetensors file from `(name, dtype, shape, bytes)`.
pub fn write_safetensors(path: &std::path::Path, tensors: &[(String, safetensors::Dtype, Vec<usize>, Vec<u8>)]) {
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = tensors
        .iter()
        .map(|(n, d, s, b)| (n.clone(), safetensors::tensor::TensorView::new(*d, s.clone(), b).unwrap()))
        .collect();
    std::fs::write(path, safetensors::serialize(views, None).unwrap()).unwrap();
}

/// Writes a Hugging Face directory: `config.json` and the tensors of `list` (BF16 matrices,
/// F32 vectors), in `shards` files with an index when `shards > 1`.
pub fn write_hf_dir(dir: &std::path::Path, cfg: &serde_json::Value, list: &[(String, Vec<usize>)], shards: usize) {
    std::fs::write(dir.join("config.json"), serde_json::to_vec_pretty(cfg).unwrap()).unwrap();
    let all: Vec<_> = list
        .iter()
        .enumerate()
        .map(|(i, (n, s))| {
            let d = if s.len() == 1 { safetensors::Dtype::F32 } else { safetensors::Dtype::BF16 };
            (n.clone(), d, s.clone(), tensor_bytes(d, i, s.iter().product()))
        })
        .collect();
    if shards <= 1 {
        write_safetensors(&dir.join("model.safetensors"), &all);
        return;
    }
    let mut map = serde_json::Map::new();
    let per = all.len().div_ceil(shards);
    for (k, chunk) in all.chunks(per).enumerate() {
        let name = format!("model-{:05}-of-{:05}.safetensors", k + 1, shards);
        write_safetensors(&dir.join(&name), chunk);
        for t in chunk {
            map.insert(t.0.clone(), serde_json::Value::String(name.clone()));
        }
    }
    let index = serde_json::json!({"metadata": {"total_size": 0}, "weight_map": map});
    std::fs::write(dir.join("model.safetensors.index.json"), serde_json::to_vec(&index).unwrap()).unwrap();
}
