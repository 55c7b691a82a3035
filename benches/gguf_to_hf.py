#!/usr/bin/env python3
"""Converts a llama-architecture GGUF (the demo model) to a Hugging Face model directory, so that
a reference server that cannot read GGUF (mlx_lm.server, see streaming_vs_llama_server.py) serves
the very same weights and tokenizer that mtplx-lite and llama-server read from the GGUF.

    python3 benches/gguf_to_hf.py MODEL.gguf OUT_DIR [--dtype float32|float16|bfloat16]

Writes OUT_DIR/config.json (LlamaForCausalLM, hparams from the GGUF metadata),
OUT_DIR/model.safetensors and the tokenizer files. Needs the `gguf` and `numpy` PyPI packages
(and `safetensors`, which mlx-lm pulls in); nothing is downloaded.

- Weights: every tensor is dequantized by `gguf.quants.dequantize` (Q4_1 / Q8_0 -> float32, the
  values the quantized blocks stand for) and stored as --dtype (default float32: the dequantized
  values are then kept exactly; float16 rounds them).
- Q and K projections: llama.cpp's convert_hf_to_gguf.py permutes their rows, per head, from the
  Hugging Face (NeoX, rotate-half) rope layout to the interleaved one that ggml's rope expects.
  They are permuted back here, or every rotary position would rotate the wrong pairs.
- Tokenizer: tokenizer.json and tokenizer_config.json (vocabulary, merges, control tokens,
  chat template, bos/eos) come from tests/golden/gguf_tokenizer_json.py, the writer the golden
  tokenizer tests already check against mtplx-lite; this script only adds generation defaults.
- No output.weight in the GGUF means the output head is the token embedding
  (tie_word_embeddings).
"""

import argparse
import importlib.util
import json
import os

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize

HERE = os.path.dirname(os.path.abspath(__file__))


def tokenizer_writer():
    path = os.path.join(HERE, "..", "tests", "golden", "gguf_tokenizer_json.py")
    spec = importlib.util.spec_from_file_location("gguf_tokenizer_json", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def field(reader, key, default=None):
    f = reader.fields.get(key)
    return default if f is None else f.contents()


def unpermute(w, n_head):
    """Inverse of llama.cpp's `permute` (convert_hf_to_gguf.py, LlamaModel): rows of each head go
    from interleaved pairs (x0, x1), (x2, x3)... back to halves (x0, x2, ...), (x1, x3, ...)."""
    rows = w.shape[0]
    return w.reshape(n_head, rows // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def hf_name(name):
    """GGUF tensor name -> Hugging Face LlamaForCausalLM name."""
    fixed = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
             "output.weight": "lm_head.weight"}
    if name in fixed:
        return fixed[name]
    blk, layer, rest = name.split(".", 2)
    if blk != "blk":
        raise ValueError(f"unexpected tensor {name}")
    sub = {"attn_norm.weight": "input_layernorm.weight", "ffn_norm.weight": "post_attention_layernorm.weight",
           "attn_q.weight": "self_attn.q_proj.weight", "attn_k.weight": "self_attn.k_proj.weight",
           "attn_v.weight": "self_attn.v_proj.weight", "attn_output.weight": "self_attn.o_proj.weight",
           "ffn_gate.weight": "mlp.gate_proj.weight", "ffn_up.weight": "mlp.up_proj.weight",
           "ffn_down.weight": "mlp.down_proj.weight"}
    if rest not in sub:
        raise ValueError(f"unexpected tensor {name}")
    return f"model.layers.{layer}.{sub[rest]}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("gguf")
    ap.add_argument("out_dir")
    ap.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"])
    args = ap.parse_args()

    r = GGUFReader(args.gguf)
    arch = field(r, "general.architecture")
    if arch != "llama":
        raise SystemExit(f"only the llama architecture is supported, not {arch!r}")

    def hp(key, default=None):
        v = field(r, f"llama.{key}", default)
        if v is None:
            raise SystemExit(f"GGUF has no llama.{key}")
        return v

    hidden = hp("embedding_length")
    n_head = hp("attention.head_count")
    n_head_kv = hp("attention.head_count_kv", n_head)
    head_dim = hidden // n_head
    if hp("rope.dimension_count", head_dim) != head_dim:
        raise SystemExit("partial rotary embeddings are not supported")
    tensors = {t.name: t for t in r.tensors}
    vocab = field(r, "llama.vocab_size") or len(field(r, "tokenizer.ggml.tokens"))
    bos = field(r, "tokenizer.ggml.bos_token_id")
    eos = field(r, "tokenizer.ggml.eos_token_id")
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": hidden,
        "intermediate_size": hp("feed_forward_length"),
        "num_hidden_layers": hp("block_count"),
        "num_attention_heads": n_head,
        "num_key_value_heads": n_head_kv,
        "head_dim": head_dim,
        "max_position_embeddings": hp("context_length"),
        "rope_theta": float(hp("rope.freq_base", 10000.0)),
        "rms_norm_eps": float(hp("attention.layer_norm_rms_epsilon")),
        "vocab_size": vocab,
        "hidden_act": "silu",
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": "output.weight" not in tensors,
        "bos_token_id": bos,
        "eos_token_id": eos,
        "pad_token_id": field(r, "tokenizer.ggml.padding_token_id"),
        "torch_dtype": args.dtype,
    }
    if field(r, "llama.rope.scaling.type") not in (None, "none"):
        raise SystemExit("rope scaling is not supported")

    # The safetensors numpy API has no bfloat16; go through mlx for that dtype only.
    weights = {}
    for t in r.tensors:
        w = dequantize(t.data, t.tensor_type).astype(np.float32)
        # GGUF shapes list ne0 (the contiguous input dim) first; numpy data is [out, in] already.
        w = w.reshape([int(x) for x in reversed(t.shape)]) if w.ndim > 1 else w.reshape(-1)
        if t.name.endswith("attn_q.weight"):
            w = unpermute(w, n_head)
        elif t.name.endswith("attn_k.weight"):
            w = unpermute(w, n_head_kv)
        weights[hf_name(t.name)] = np.ascontiguousarray(w)

    os.makedirs(args.out_dir, exist_ok=True)
    out = os.path.join(args.out_dir, "model.safetensors")
    if args.dtype == "bfloat16":
        import mlx.core as mx
        mx.save_safetensors(out, {k: mx.array(v).astype(mx.bfloat16) for k, v in weights.items()},
                            metadata={"format": "pt"})
    else:
        from safetensors.numpy import save_file
        save_file({k: v.astype(args.dtype) for k, v in weights.items()}, out, metadata={"format": "pt"})
    with open(os.path.join(args.out_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    tokenizer_writer().main(args.gguf, args.out_dir)
    with open(os.path.join(args.out_dir, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": bos, "eos_token_id": eos, "do_sample": False}, f, indent=2)
    print(f"wrote {args.out_dir}: {len(weights)} tensors as {args.dtype}, "
          f"{config['num_hidden_layers']} layers, hidden {hidden}, heads {n_head}/{n_head_kv}, vocab {vocab}, "
          f"tied embeddings {config['tie_word_embeddings']}")


if __name__ == "__main__":
    main()
