//! `mtplx-lite synth`: a llama-shaped GGUF of random weights, for measuring speed where no real
//! model can be fetched (a GPU machine without network: `benches/gpu_device.sh`). Every block of
//! a quantized type is random bytes with a small fixed scale, which is a valid block for every
//! type written here; the text such a model writes is noise, its cost is a real model's.

use argh::FromArgs;
use mtplx_lite::backend::cpu::float16::f32_to_f16;
use mtplx_lite::backend::DType;
use mtplx_lite::model::gguf_write::GgufWriter;
use mtplx_lite::model::MetaValue;
use std::path::PathBuf;

/// write a llama-shaped GGUF of random weights (for benchmarks without a network)
#[derive(FromArgs)]
#[argh(subcommand, name = "synth")]
pub struct SynthCmd {
    /// the shape: tiny (a few MB, for tests), 1b (Llama 3.2 1B's trunk) or 7b (Llama 2 7B's)
    #[argh(option)]
    pub shape: String,
    /// the matrices' type: q4_k or q8_0 (norms stay F32)
    #[argh(option)]
    pub dtype: String,
    /// where to write the file
    #[argh(option)]
    pub out: PathBuf,
}

/// A llama-family shape.
struct Shape {
    hidden: usize,
    layers: usize,
    heads: usize,
    kv_heads: usize,
    ffn: usize,
    vocab: usize,
}

/// Vocabulary of every shape: 32,000 as Llama 2 (a smaller vocabulary than Llama 3's keeps the
/// file to the trunk's cost, which decode speed is about).
const VOCAB: usize = 32_000;

fn shape(name: &str) -> Result<Shape, String> {
    Ok(match name {
        "tiny" => Shape { hidden: 256, layers: 2, heads: 4, kv_heads: 2, ffn: 512, vocab: 1_024 },
        "1b" => Shape { hidden: 2048, layers: 16, heads: 32, kv_heads: 8, ffn: 8192, vocab: VOCAB },
        "7b" => Shape { hidden: 4096, layers: 32, heads: 32, kv_heads: 32, ffn: 11008, vocab: VOCAB },
        _ => return Err(format!("--shape {name}: expected tiny, 1b or 7b")),
    })
}

/// Random blocks of `dtype` for `n` values, each block's f16 scales set to a small value so
/// that activations stay finite through the layers.
fn random_blocks(dtype: DType, n: usize, seed: &mut u64) -> Vec<u8> {
    let bytes = dtype.bytes_for(n).expect("whole blocks");
    let mut out = Vec::with_capacity(bytes);
    while out.len() < bytes {
        // xorshift64*: fast enough for gigabytes.
        *seed ^= *seed >> 12;
        *seed ^= *seed << 25;
        *seed ^= *seed >> 27;
        out.extend_from_slice(&seed.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes());
    }
    out.truncate(bytes);
    let scales: &[usize] = match dtype {
        DType::Q4K => &[0, 2],
        DType::Q8_0 => &[0],
        _ => &[],
    };
    let small = f32_to_f16(0.0005).to_le_bytes();
    for blk in out.chunks_exact_mut(dtype.block_bytes()) {
        for &o in scales {
            blk[o..o + 2].copy_from_slice(&small);
        }
    }
    out
}

/// A SentencePiece vocabulary of `n` tokens: unk, bos, eos, the 256 byte tokens, then fillers.
fn vocabulary(w: &mut GgufWriter, n: usize) {
    let mut tokens = vec!["<unk>".to_string(), "<s>".into(), "</s>".into()];
    tokens.extend((0..256).map(|b| format!("<0x{b:02X}>")));
    let fixed = tokens.len();
    tokens.extend((fixed..n).map(|i| format!("\u{2581}t{i}")));
    let types: Vec<MetaValue> = (0..n)
        .map(|i| {
            MetaValue::I32(if i < 3 {
                3
            } else if i < fixed {
                6
            } else {
                1
            })
        })
        .collect();
    w.meta("tokenizer.ggml.model", MetaValue::String("llama".into()))
        .meta("tokenizer.ggml.tokens", MetaValue::Array(tokens.into_iter().map(MetaValue::String).collect()))
        .meta("tokenizer.ggml.scores", MetaValue::Array((0..n).map(|i| MetaValue::F32(-(i as f32))).collect()))
        .meta("tokenizer.ggml.token_type", MetaValue::Array(types))
        .meta("tokenizer.ggml.bos_token_id", MetaValue::U32(1))
        .meta("tokenizer.ggml.eos_token_id", MetaValue::U32(2))
        .meta("tokenizer.ggml.unknown_token_id", MetaValue::U32(0));
}

pub fn run(cmd: &SynthCmd) -> Result<(), String> {
    let s = shape(&cmd.shape)?;
    let dtype = match cmd.dtype.as_str() {
        "q4_k" => DType::Q4K,
        "q8_0" => DType::Q8_0,
        d => return Err(format!("--dtype {d}: expected q4_k or q8_0")),
    };
    let head_dim = s.hidden / s.heads;
    let (q, kv) = (s.hidden, s.kv_heads * head_dim);
    let mut w = GgufWriter::new();
    let u = |v: usize| MetaValue::U32(v as u32);
    w.meta("general.architecture", MetaValue::String("llama".into()))
        .meta("general.name", MetaValue::String(format!("synthetic-{}-{}", cmd.shape, cmd.dtype)))
        .meta("llama.block_count", u(s.layers))
        .meta("llama.embedding_length", u(s.hidden))
        .meta("llama.attention.head_count", u(s.heads))
        .meta("llama.attention.head_count_kv", u(s.kv_heads))
        .meta("llama.feed_forward_length", u(s.ffn))
        .meta("llama.context_length", u(4096))
        .meta("llama.vocab_size", u(s.vocab))
        .meta("llama.rope.freq_base", MetaValue::F32(10_000.0))
        .meta("llama.attention.layer_norm_rms_epsilon", MetaValue::F32(1e-5));
    vocabulary(&mut w, s.vocab);
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut matrix = |w: &mut GgufWriter, name: &str, rows: usize, cols: usize| {
        w.tensor(name, dtype, &[rows, cols], random_blocks(dtype, rows * cols, &mut seed));
    };
    matrix(&mut w, "token_embd.weight", s.vocab, s.hidden);
    for l in 0..s.layers {
        w.tensor_f32(&format!("blk.{l}.attn_norm.weight"), &[s.hidden], &vec![1.0; s.hidden]);
        w.tensor_f32(&format!("blk.{l}.ffn_norm.weight"), &[s.hidden], &vec![1.0; s.hidden]);
        for (name, rows, cols) in [
            ("attn_q", q, s.hidden),
            ("attn_k", kv, s.hidden),
            ("attn_v", kv, s.hidden),
            ("attn_output", s.hidden, q),
            ("ffn_gate", s.ffn, s.hidden),
            ("ffn_up", s.ffn, s.hidden),
            ("ffn_down", s.hidden, s.ffn),
        ] {
            matrix(&mut w, &format!("blk.{l}.{name}.weight"), rows, cols);
        }
    }
    w.tensor_f32("output_norm.weight", &[s.hidden], &vec![1.0; s.hidden]);
    matrix(&mut w, "output.weight", s.vocab, s.hidden);
    std::fs::write(&cmd.out, w.to_bytes()).map_err(|e| format!("cannot write {}: {e}", cmd.out.display()))?;
    println!("wrote {} ({} layers, hidden {}, {})", cmd.out.display(), s.layers, s.hidden, dtype.name());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use mtplx_lite::model::{ModelFiles, Tokenizer};

    #[test]
    fn a_synthetic_model_loads_with_its_tokenizer_and_runs() {
        let dir = std::env::temp_dir().join(format!("mtplx-synth-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for dtype in ["q4_k", "q8_0"] {
            let out = dir.join(format!("tiny-{dtype}.gguf"));
            run(&SynthCmd { shape: "tiny".into(), dtype: dtype.into(), out: out.clone() }).unwrap();
            let files = ModelFiles::open(&out).unwrap();
            let tok = Tokenizer::from_model_files(&files).unwrap();
            assert_eq!(tok.vocab_size(), 1_024);
            let model = mtplx_lite::model::llama::Llama::load(&files, 1).unwrap();
            let mut cache = mtplx_lite::model::Model::new_cache(&model, 16);
            let ids = [1u32, 300, 500];
            let mut b = [mtplx_lite::model::SeqBatch {
                tokens: &ids,
                cache: &mut cache,
                logits: mtplx_lite::model::LogitsWanted::Last,
            }];
            let logits = mtplx_lite::model::Model::forward(&model, &mut b).unwrap();
            assert!(logits[0].len() == 1_024 && logits[0].iter().all(|v| v.is_finite()), "{dtype}");
        }
        assert!(run(&SynthCmd { shape: "3b".into(), dtype: "q4_k".into(), out: dir.join("x") }).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
