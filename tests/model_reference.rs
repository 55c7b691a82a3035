//! The llama-family forward pass against independent references: tiny random-weight qwen3,
//! qwen2 and llama models (real safetensors) whose logits a numpy forward pass computed
//! (tests/golden/make_tiny_models.py).

use mtplx_lite::backend::cpu::Isa;
use mtplx_lite::model::llama::Llama;
use mtplx_lite::model::{LogitsWanted, Model, ModelFiles, SeqBatch};
use std::path::Path;

fn reference(arch: &str) -> (Vec<u32>, Vec<Vec<f32>>) {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/tiny").join(arch).join("reference.json");
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap();
    let tokens = v["tokens"].as_array().unwrap().iter().map(|t| t.as_u64().unwrap() as u32).collect();
    let logits = v["logits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect())
        .collect();
    (tokens, logits)
}

fn load(arch: &str) -> Llama {
    let files = ModelFiles::open(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/tiny").join(arch)).unwrap();
    assert_eq!(files.hparams.arch.name(), arch);
    Llama::load(&files, 2).unwrap()
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

/// Tolerance on logits: the references are float64; we compute in float32 (measured: at most
/// 6e-4), except where attention multiplies bf16 pairs or tiles (`Isa::attention_in_bf16`:
/// queries, keys, values and weights rounded to 8 significant bits; measured: at most 8.0e-3).
fn tol() -> f32 {
    if Isa::detect().attention_in_bf16() {
        2e-2
    } else {
        2e-3
    }
}

fn check_prefill(arch: &str) {
    let model = load(arch);
    let (tokens, want) = reference(arch);
    let vocab = model.info().vocab_size;
    let mut cache = model.new_cache(64);
    let out = model.forward(&mut [SeqBatch { tokens: &tokens, cache: &mut cache, logits: LogitsWanted::All }]).unwrap();
    assert_eq!(out[0].len(), tokens.len() * vocab);
    for (i, row) in out[0].chunks(vocab).enumerate() {
        let d = max_abs_diff(row, &want[i]);
        assert!(d < tol(), "{arch}: position {i} differs from the numpy reference by {d}");
    }
    assert_eq!(cache.len(), tokens.len());
}

#[test]
fn qwen3_matches_numpy_reference() {
    check_prefill("qwen3");
}

#[test]
fn qwen2_matches_numpy_reference() {
    check_prefill("qwen2");
}

#[test]
fn llama_matches_numpy_reference() {
    check_prefill("llama");
}

/// Token-by-token decoding over the KV cache gives the logits of one full prefill, and so does
/// a batch that mixes sequences at different positions.
#[test]
fn incremental_and_batched_decoding_match_prefill() {
    let model = load("qwen3");
    let (tokens, want) = reference("qwen3");
    let vocab = model.info().vocab_size;
    let mut a = model.new_cache(64);
    let mut b = model.new_cache(64);
    // Sequence b starts 3 tokens ahead, so each step batches two different positions.
    model.forward(&mut [SeqBatch { tokens: &tokens[..3], cache: &mut b, logits: LogitsWanted::Last }]).unwrap();
    for i in 0..tokens.len() - 3 {
        let out = model
            .forward(&mut [
                SeqBatch { tokens: &tokens[i..i + 1], cache: &mut a, logits: LogitsWanted::Last },
                SeqBatch { tokens: &tokens[i + 3..i + 4], cache: &mut b, logits: LogitsWanted::Last },
            ])
            .unwrap();
        assert!(max_abs_diff(&out[0], &want[i]) < tol(), "a at {i}");
        assert!(max_abs_diff(&out[1], &want[i + 3]) < tol(), "b at {}", i + 3);
        assert_eq!(out[0].len(), vocab);
    }
}

#[test]
fn context_overflow_and_bad_tokens_are_errors() {
    let model = load("llama");
    let mut cache = model.new_cache(4);
    let e = model
        .forward(&mut [SeqBatch { tokens: &[1, 2, 3, 4, 5], cache: &mut cache, logits: LogitsWanted::Last }])
        .unwrap_err();
    assert!(e.to_string().contains("at most 4"), "{e}");
    let e = model
        .forward(&mut [SeqBatch { tokens: &[1, 9999], cache: &mut cache, logits: LogitsWanted::Last }])
        .unwrap_err();
    assert!(e.to_string().contains("9999"), "{e}");
    assert_eq!(cache.len(), 0, "a refused forward leaves the cache untouched");
}
