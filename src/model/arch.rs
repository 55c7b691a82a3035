//! Each architecture as a description: from its hyper-parameters to what every decoder layer does
//! ([`LayerSpec`]) and what the model does around them ([`ModelSpec`]). The forward pass
//! (`llama.rs` over `decoder.rs`) runs any description; adding an architecture means adding its
//! facts here and in `config.rs`, and an op to the backends where it needs a new one.

use super::config::{Arch, HParams, RopeLayout};
use super::decoder::{Activation, AttentionKind, LayerSpec};
use crate::backend::{Heads, Rope};

/// Gemma 3 27B's layer count: llama.cpp scales its scores by `hidden / n_heads` rather than by
/// the head size (its `query_pre_attn_scalar`), which the GGUF file does not carry.
const GEMMA3_27B_LAYERS: usize = 62;

/// What a model does beside its layers.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelSpec {
    /// One description per decoder layer, in order.
    pub layers: Vec<LayerSpec>,
    /// What the token embeddings are multiplied by before the first layer (Gemma: the square
    /// root of the hidden size).
    pub embed_scale: Option<f32>,
}

/// The description of the model `hp` describes, whose Q and K weights rotate as `rope_layout`
/// says.
pub fn describe(hp: &HParams, rope_layout: RopeLayout) -> ModelSpec {
    let heads = Heads { n_heads: hp.n_heads, n_kv_heads: hp.n_kv_heads, head_dim: hp.head_dim };
    let score_scale = match hp.arch {
        Arch::Gemma3 if hp.n_layers == GEMMA3_27B_LAYERS => 1.0 / ((hp.hidden / hp.n_heads) as f32).sqrt(),
        _ => LayerSpec::default_score_scale(hp.head_dim),
    };
    let rope = |theta| Rope { layout: rope_layout, theta, dims: hp.head_dim };
    let layer = |l: usize| {
        let (attention, theta) = match hp.sliding {
            Some(s) if s.is_local(l) => (AttentionKind::Sliding { window: s.window }, s.local_theta),
            _ => (AttentionKind::Causal, hp.rope_theta),
        };
        LayerSpec {
            heads,
            ffn: hp.ffn,
            rms_eps: hp.rms_eps,
            rope: rope(theta),
            attention,
            activation: if hp.gelu { Activation::GeGlu } else { Activation::SwiGlu },
            score_scale,
        }
    };
    ModelSpec {
        layers: (0..hp.n_layers).map(layer).collect(),
        // As llama.cpp: the f32 square root, applied in f32.
        embed_scale: hp.embed_scale.then(|| (hp.hidden as f32).sqrt()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::config::Sliding;

    fn hp(arch: Arch) -> HParams {
        HParams {
            arch,
            n_layers: 12,
            hidden: 640,
            n_heads: 4,
            n_kv_heads: 1,
            head_dim: 256,
            ffn: 2048,
            vocab: 1000,
            context_length: 4096,
            rope_theta: 1_000_000.0,
            rms_eps: 1e-6,
            tied_embeddings: true,
            rope_layout: RopeLayout::NeoX,
            qk_norm: true,
            qkv_bias: false,
            o_bias: false,
            sliding: None,
            post_norms: false,
            embed_scale: false,
            gelu: false,
        }
    }

    #[test]
    fn gemma3_alternates_five_sliding_layers_and_one_global() {
        let sliding = Some(Sliding { window: 512, global_every: 6, local_theta: 10_000.0 });
        let g = HParams { sliding, embed_scale: true, gelu: true, post_norms: true, ..hp(Arch::Gemma3) };
        let m = describe(&g, RopeLayout::NeoX);
        let global: Vec<usize> = (0..12).filter(|&l| m.layers[l].attention == AttentionKind::Causal).collect();
        assert_eq!(global, [5, 11]);
        assert_eq!(m.layers[0].attention, AttentionKind::Sliding { window: 512 });
        assert_eq!((m.layers[0].rope.theta, m.layers[5].rope.theta), (10_000.0, 1_000_000.0));
        assert!(m.layers.iter().all(|l| l.activation == Activation::GeGlu && l.score_scale == 1.0 / 16.0));
        assert_eq!(m.embed_scale, Some(640f32.sqrt()));
    }

    #[test]
    fn the_llama_family_is_causal_swiglu_with_one_rope() {
        let m = describe(&hp(Arch::Qwen3), RopeLayout::NeoX);
        assert!(m.layers.iter().all(|l| *l == m.layers[0]));
        assert_eq!(m.layers[0].attention, AttentionKind::Causal);
        assert_eq!(m.layers[0].activation, Activation::SwiGlu);
        assert_eq!(m.layers[0].rope.theta, 1_000_000.0);
        assert_eq!(m.embed_scale, None);
    }
}
