#!/usr/bin/env python3
"""Writes the seed corpora of the model-file fuzz targets (fuzz/corpus/<target>/seed-*):
- gguf_header: the first 4 KiB of the demo model (a real header, truncated), and a complete tiny
  qwen3 GGUF written by the independent `gguf` package;
- safetensors_header: a complete tiny qwen3 safetensors file (the shape the fuzz target picks
  weights for), built by hand from the format's definition, and a two-tensor file.
Run from the repository root: python3 tests/data/make_fuzz_seeds.py"""
import json, os, struct
import numpy as np
import gguf

demo = os.environ.get("MTPLX_DEMO_MODEL", os.path.expanduser("~/.cache/mtplx-lite/SmolLM2-135M-Instruct.Q4_1.gguf"))
g = "fuzz/corpus/gguf_header"
s = "fuzz/corpus/safetensors_header"
os.makedirs(g, exist_ok=True)
os.makedirs(s, exist_ok=True)

with open(demo, "rb") as f:
    open(f"{g}/seed-demo-prefix", "wb").write(f.read(4096))

# tiny qwen3: 1 layer, hidden 8, 2 heads of 4, 1 kv head, ffn 8, vocab 4, tied embeddings
H, Q, KV, HD, FFN, V = 8, 8, 4, 4, 8, 4
tensors = [
    ("embed", [V, H]), ("attn_norm", [H]), ("q", [Q, H]), ("k", [KV, H]), ("v", [KV, H]), ("o", [H, Q]),
    ("q_norm", [HD]), ("k_norm", [HD]), ("ffn_norm", [H]), ("gate", [FFN, H]), ("up", [FFN, H]),
    ("down", [H, FFN]), ("norm", [H]),
]
gguf_names = {"embed": "token_embd.weight", "norm": "output_norm.weight", "attn_norm": "blk.0.attn_norm.weight",
    "q": "blk.0.attn_q.weight", "k": "blk.0.attn_k.weight", "v": "blk.0.attn_v.weight", "o": "blk.0.attn_output.weight",
    "q_norm": "blk.0.attn_q_norm.weight", "k_norm": "blk.0.attn_k_norm.weight", "ffn_norm": "blk.0.ffn_norm.weight",
    "gate": "blk.0.ffn_gate.weight", "up": "blk.0.ffn_up.weight", "down": "blk.0.ffn_down.weight"}
hf_names = {"embed": "model.embed_tokens.weight", "norm": "model.norm.weight",
    "attn_norm": "model.layers.0.input_layernorm.weight", "q": "model.layers.0.self_attn.q_proj.weight",
    "k": "model.layers.0.self_attn.k_proj.weight", "v": "model.layers.0.self_attn.v_proj.weight",
    "o": "model.layers.0.self_attn.o_proj.weight", "q_norm": "model.layers.0.self_attn.q_norm.weight",
    "k_norm": "model.layers.0.self_attn.k_norm.weight", "ffn_norm": "model.layers.0.post_attention_layernorm.weight",
    "gate": "model.layers.0.mlp.gate_proj.weight", "up": "model.layers.0.mlp.up_proj.weight",
    "down": "model.layers.0.mlp.down_proj.weight"}

w = gguf.GGUFWriter(f"{g}/seed-tiny-qwen3", "qwen3")
w.add_block_count(1); w.add_embedding_length(H); w.add_head_count(2); w.add_head_count_kv(1)
w.add_key_length(HD); w.add_value_length(HD); w.add_feed_forward_length(FFN); w.add_context_length(16)
w.add_layer_norm_rms_eps(1e-6); w.add_rope_freq_base(1e6); w.add_vocab_size(V)
w.add_array("tokenizer.ggml.tokens", ["a", "b", "c", "d"])
for key, shape in tensors:
    w.add_tensor(gguf_names[key], np.arange(np.prod(shape), dtype=np.float32).reshape(shape))
w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()

def safetensors(path, items):
    header, data = {}, b""
    for name, dtype, shape, raw in items:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    open(path, "wb").write(struct.pack("<Q", len(h)) + h + data)

safetensors(f"{s}/seed-tiny-qwen3", [
    (hf_names[k], "F32" if len(shape) == 1 else "BF16", shape,
     np.arange(np.prod(shape), dtype=np.float32).tobytes() if len(shape) == 1
     else (np.arange(np.prod(shape), dtype=np.float32).view(np.uint32) >> 16).astype("<u2").tobytes())
    for k, shape in tensors])
safetensors(f"{s}/seed-two", [("a", "F16", [2, 2], b"\x00\x3c" * 4), ("b", "F32", [1], struct.pack("<f", 1.0))])
