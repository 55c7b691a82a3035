//! A safetensors image on arbitrary bytes, through our tensor views and weight picking (the
//! header itself is parsed by the `safetensors` crate): errors are fine, panics are not.

use mtplx_lite::model::safetensors::add_tensors;
use mtplx_lite::model::tensor::Storage;
use mtplx_lite::model::weights::{ModelWeights, Naming};
use mtplx_lite::model::{Arch, HParams, RopeLayout, TensorSet};
use std::path::Path;
use std::sync::Arc;

/// One input through the target: panics when an invariant breaks.
pub fn run(data: &[u8]) {
    let file = Path::new("fuzz.safetensors");
    let storage = Arc::new(Storage::Owned(data.to_vec()));
    let mut set = TensorSet::new();
    if add_tensors(&storage, file, &mut set).is_ok() {
        for t in set.iter() {
            assert_eq!(Some(t.bytes().len()), t.dtype.bytes_for(t.numel()));
        }
        // A tiny qwen3 to pick weights for; the seed corpus holds a file of exactly this shape.
        let hp = HParams {
            arch: Arch::Qwen3,
            n_layers: 1,
            hidden: 8,
            n_heads: 2,
            n_kv_heads: 1,
            head_dim: 4,
            ffn: 8,
            vocab: 4,
            context_length: 16,
            rope_theta: 1e6,
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
        };
        let _ = ModelWeights::from_tensors(&set, Naming::HuggingFace, &hp, file);
    }
}
