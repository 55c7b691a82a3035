//! A tiny random-weight qwen3 trunk that carries an MTP head in its own checkpoint, written in
//! each naming the loader reads (`checkpoint.rs`): a Hugging Face directory with Qwen's `mtp.*`
//! tensors or DeepSeek's extra `model.layers.{n}`, or a GGUF file with llama.cpp's
//! `blk.{n}.nextn.*`. Tests use it (unit tests and `tests/`, hence public, like `gguf_write`).
//!
//! The names are written out here by hand, not derived from the loader's name maps, so that a
//! wrong map there fails the tests instead of agreeing with itself.

use crate::backend::DType;
use crate::model::gguf_write::GgufWriter;
use crate::model::metadata::MetaValue;
use serde::Serialize;
use std::path::Path;

pub const LAYERS: usize = 2;
pub const HIDDEN: usize = 64;
pub const HEADS: usize = 4;
pub const KV_HEADS: usize = 2;
pub const HEAD_DIM: usize = 16;
pub const FFN: usize = 96;
pub const VOCAB: usize = 128;
const EPS: f32 = 1e-6;
const ROPE_THETA: f32 = 10_000.0;

/// Which checkpoint naming to write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Written {
    /// Hugging Face directory, Qwen3-Next's `mtp.*`.
    Qwen,
    /// Hugging Face directory, DeepSeek-V3's extra `model.layers.{LAYERS}`.
    DeepSeek,
    /// GGUF file, llama.cpp's `blk.{LAYERS}.nextn.*`.
    Gguf,
}

pub const ALL: [Written; 3] = [Written::Qwen, Written::DeepSeek, Written::Gguf];

/// One tensor, shape outermost first, f32 values.
pub type Named = (String, Vec<usize>, Vec<f32>);

/// What a tensor is, independent of any naming.
#[derive(Clone, Debug)]
enum Role {
    /// A trunk tensor, by its Hugging Face name.
    Trunk(String),
    /// `fc`, `enorm`, `hnorm` or `final_norm`.
    Head(&'static str),
    /// A tensor of the head's block, by its Hugging Face name inside a block.
    HeadBlock(&'static str),
}

/// Block tensors: Hugging Face name inside a block, GGUF name inside a block, shape.
fn block_tensors() -> Vec<(&'static str, &'static str, Vec<usize>)> {
    let (q, kv) = (HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM);
    vec![
        ("input_layernorm.weight", "attn_norm.weight", vec![HIDDEN]),
        ("self_attn.q_proj.weight", "attn_q.weight", vec![q, HIDDEN]),
        ("self_attn.k_proj.weight", "attn_k.weight", vec![kv, HIDDEN]),
        ("self_attn.v_proj.weight", "attn_v.weight", vec![kv, HIDDEN]),
        ("self_attn.o_proj.weight", "attn_output.weight", vec![HIDDEN, q]),
        ("self_attn.q_norm.weight", "attn_q_norm.weight", vec![HEAD_DIM]),
        ("self_attn.k_norm.weight", "attn_k_norm.weight", vec![HEAD_DIM]),
        ("post_attention_layernorm.weight", "ffn_norm.weight", vec![HIDDEN]),
        ("mlp.gate_proj.weight", "ffn_gate.weight", vec![FFN, HIDDEN]),
        ("mlp.up_proj.weight", "ffn_up.weight", vec![FFN, HIDDEN]),
        ("mlp.down_proj.weight", "ffn_down.weight", vec![HIDDEN, FFN]),
    ]
}

fn gguf_in_block(hf: &str) -> &'static str {
    block_tensors().into_iter().find(|(h, _, _)| *h == hf).map(|(_, g, _)| g).expect("a block tensor")
}

/// splitmix64: reproducible values without a dependency.
struct Rng(u64);

impl Rng {
    /// Uniform in [-1, 1).
    fn next(&mut self) -> f32 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        (z >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }

    fn values(&mut self, n: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|_| self.next() * scale).collect()
    }
}

/// A trunk and its head, by role.
pub struct TinyMtp {
    tensors: Vec<(Role, Vec<usize>, Vec<f32>)>,
}

/// The token a predictive trunk mostly follows `t` with (a permutation of the vocabulary).
pub fn successor(t: u32) -> u32 {
    (5 * t + 3) % VOCAB as u32
}

impl TinyMtp {
    /// Random weights from `seed`. With `predictive`, the trunk's output head maps each token's
    /// embedding to [`successor`]'s row, so that its greedy text mostly follows that
    /// permutation (its blocks, of size `trunk_mix`, make it stray now and then), and the head
    /// reads only the next token's embedding, so it drafts `successor` of it: drafts are then
    /// accepted often, and rejected where the trunk strays.
    pub fn new(seed: u64, predictive: bool, trunk_mix: f32) -> TinyMtp {
        let mut rng = Rng(seed);
        let mut tensors = Vec::new();
        let matrix = |rng: &mut Rng, shape: &[usize], scale: f32| rng.values(shape.iter().product(), scale);
        let norm = |rng: &mut Rng, n: usize| rng.values(n, 0.1).into_iter().map(|x| 1.0 + x).collect::<Vec<_>>();
        // Uniform in [-√3, √3]: unit variance, so an embedding row has an RMS of about 1.
        let embed = matrix(&mut rng, &[VOCAB, HIDDEN], 3f32.sqrt());
        let head_rows = if predictive {
            let mut w = vec![0.0; VOCAB * HIDDEN];
            for t in 0..VOCAB {
                let s = successor(t as u32) as usize;
                w[s * HIDDEN..(s + 1) * HIDDEN].copy_from_slice(&embed[t * HIDDEN..(t + 1) * HIDDEN]);
            }
            w
        } else {
            matrix(&mut rng, &[VOCAB, HIDDEN], 1.0 / (HIDDEN as f32).sqrt())
        };
        tensors.push((Role::Trunk("model.embed_tokens.weight".into()), vec![VOCAB, HIDDEN], embed));
        let block = |rng: &mut Rng, mix: f32| {
            let mut out = Vec::new();
            for (name, _, shape) in block_tensors() {
                let v = if shape.len() == 1 {
                    norm(rng, shape[0])
                } else {
                    rng.values(shape[0] * shape[1], mix * (3.0 / shape[1] as f32).sqrt())
                };
                out.push((name, shape, v));
            }
            out
        };
        for l in 0..LAYERS {
            for (name, shape, v) in block(&mut rng, trunk_mix) {
                tensors.push((Role::Trunk(format!("model.layers.{l}.{name}")), shape, v));
            }
        }
        tensors.push((Role::Trunk("model.norm.weight".into()), vec![HIDDEN], vec![1.0; HIDDEN]));
        tensors.push((Role::Trunk("lm_head.weight".into()), vec![VOCAB, HIDDEN], head_rows));

        let fc = if predictive {
            // The embedding half is the identity, the hidden half zero.
            let mut fc = vec![0.0; HIDDEN * 2 * HIDDEN];
            (0..HIDDEN).for_each(|i| fc[i * 2 * HIDDEN + i] = 1.0);
            fc
        } else {
            rng.values(HIDDEN * 2 * HIDDEN, (3.0 / (2 * HIDDEN) as f32).sqrt())
        };
        tensors.push((Role::Head("fc"), vec![HIDDEN, 2 * HIDDEN], fc));
        for role in ["enorm", "hnorm", "final_norm"] {
            let v = if predictive { vec![1.0; HIDDEN] } else { norm(&mut rng, HIDDEN) };
            tensors.push((Role::Head(role), vec![HIDDEN], v));
        }
        let head_mix = if predictive { 0.1 } else { 1.0 };
        for (name, shape, v) in block(&mut rng, head_mix) {
            tensors.push((Role::HeadBlock(name), shape, v));
        }
        TinyMtp { tensors }
    }

    /// Every tensor under `naming`'s names.
    pub fn named(&self, naming: Written) -> Vec<Named> {
        self.tensors.iter().map(|(role, shape, v)| (name(naming, role), shape.clone(), v.clone())).collect()
    }

    /// Writes the model in `naming` under `dir` (a GGUF file `model.gguf` in it, or the directory
    /// itself for Hugging Face) and returns the path to open.
    pub fn write(&self, naming: Written, dir: &Path) -> std::path::PathBuf {
        write_tensors(naming, dir, &self.named(naming))
    }
}

fn name(naming: Written, role: &Role) -> String {
    let n = LAYERS;
    match (naming, role) {
        (Written::Gguf, Role::Trunk(hf)) => match hf.as_str() {
            "model.embed_tokens.weight" => "token_embd.weight".into(),
            "model.norm.weight" => "output_norm.weight".into(),
            "lm_head.weight" => "output.weight".into(),
            other => {
                let rest = other.strip_prefix("model.layers.").expect("a block tensor");
                let (l, inner) = rest.split_once('.').expect("layer.name");
                format!("blk.{l}.{}", gguf_in_block(inner))
            }
        },
        (_, Role::Trunk(hf)) => hf.clone(),
        (Written::Qwen, Role::Head(r)) => match *r {
            "fc" => "mtp.fc.weight".into(),
            "enorm" => "mtp.pre_fc_norm_embedding.weight".into(),
            "hnorm" => "mtp.pre_fc_norm_hidden.weight".into(),
            _ => "mtp.norm.weight".into(),
        },
        (Written::DeepSeek, Role::Head(r)) => match *r {
            "fc" => format!("model.layers.{n}.eh_proj.weight"),
            "enorm" => format!("model.layers.{n}.enorm.weight"),
            "hnorm" => format!("model.layers.{n}.hnorm.weight"),
            _ => format!("model.layers.{n}.shared_head.norm.weight"),
        },
        (Written::Gguf, Role::Head(r)) => match *r {
            "fc" => format!("blk.{n}.nextn.eh_proj.weight"),
            "enorm" => format!("blk.{n}.nextn.enorm.weight"),
            "hnorm" => format!("blk.{n}.nextn.hnorm.weight"),
            _ => format!("blk.{n}.nextn.shared_head_norm.weight"),
        },
        (Written::Qwen, Role::HeadBlock(inner)) => format!("mtp.layers.0.{inner}"),
        (Written::DeepSeek, Role::HeadBlock(inner)) => format!("model.layers.{n}.{inner}"),
        (Written::Gguf, Role::HeadBlock(inner)) => format!("blk.{n}.{}", gguf_in_block(inner)),
    }
}

/// A qwen3 `config.json`, as transformers writes one.
#[derive(Serialize)]
struct HfConfig {
    model_type: &'static str,
    num_hidden_layers: usize,
    hidden_size: usize,
    num_attention_heads: usize,
    num_key_value_heads: usize,
    head_dim: usize,
    intermediate_size: usize,
    vocab_size: usize,
    max_position_embeddings: usize,
    rope_theta: f32,
    rms_norm_eps: f32,
    tie_word_embeddings: bool,
    /// DeepSeek-V3's count of MTP blocks after the trunk's.
    #[serde(skip_serializing_if = "Option::is_none")]
    num_nextn_predict_layers: Option<usize>,
}

/// Writes `tensors` (as [`TinyMtp::named`] gives them, edited or not) in `naming`'s format under
/// `dir`; returns the path to open.
pub fn write_tensors(naming: Written, dir: &Path, tensors: &[Named]) -> std::path::PathBuf {
    if naming == Written::Gguf {
        let path = dir.join("model.gguf");
        std::fs::write(&path, gguf_bytes(tensors, LAYERS + 1, 1)).expect("writing the GGUF");
        return path;
    }
    let cfg = HfConfig {
        model_type: "qwen3",
        num_hidden_layers: LAYERS,
        hidden_size: HIDDEN,
        num_attention_heads: HEADS,
        num_key_value_heads: KV_HEADS,
        head_dim: HEAD_DIM,
        intermediate_size: FFN,
        vocab_size: VOCAB,
        max_position_embeddings: 4096,
        rope_theta: ROPE_THETA,
        rms_norm_eps: EPS,
        tie_word_embeddings: false,
        num_nextn_predict_layers: (naming == Written::DeepSeek).then_some(1),
    };
    std::fs::write(dir.join("config.json"), serde_json::to_vec_pretty(&cfg).expect("config")).expect("config.json");
    let bytes: Vec<Vec<u8>> =
        tensors.iter().map(|(_, _, v)| v.iter().flat_map(|x| x.to_le_bytes()).collect()).collect();
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = tensors
        .iter()
        .zip(&bytes)
        .map(|((n, shape, _), b)| {
            let view = safetensors::tensor::TensorView::new(safetensors::Dtype::F32, shape.clone(), b);
            (n.clone(), view.expect("a consistent tensor"))
        })
        .collect();
    let file = safetensors::serialize(views, None).expect("serializing");
    std::fs::write(dir.join("model.safetensors"), file).expect("model.safetensors");
    dir.to_path_buf()
}

/// A GGUF image of `tensors` that says it has `blocks` blocks, the last `nextn` of them MTP
/// blocks (llama.cpp's converter counts them in `block_count`).
pub fn gguf_bytes(tensors: &[Named], blocks: usize, nextn: usize) -> Vec<u8> {
    let mut w = GgufWriter::new();
    let u = |v: usize| MetaValue::U32(v as u32);
    w.meta("general.architecture", MetaValue::String("qwen3".into()))
        .meta("qwen3.block_count", u(blocks))
        .meta("qwen3.nextn_predict_layers", u(nextn))
        .meta("qwen3.embedding_length", u(HIDDEN))
        .meta("qwen3.attention.head_count", u(HEADS))
        .meta("qwen3.attention.head_count_kv", u(KV_HEADS))
        .meta("qwen3.attention.key_length", u(HEAD_DIM))
        .meta("qwen3.feed_forward_length", u(FFN))
        .meta("qwen3.context_length", u(4096))
        .meta("qwen3.vocab_size", u(VOCAB))
        .meta("qwen3.rope.freq_base", MetaValue::F32(ROPE_THETA))
        .meta("qwen3.attention.layer_norm_rms_epsilon", MetaValue::F32(EPS));
    for (n, shape, v) in tensors {
        let data = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        w.tensor(n, DType::F32, shape, data);
    }
    w.to_bytes()
}
