#!/usr/bin/env python3
"""The demo model's exact logits: every tensor dequantized with the `gguf` PyPI package and the
forward pass run in float64 numpy (llama, GGUF's interleaved RoPE), over the teacher-forced text
of tests/data/reference/smollm2_llama_cpp.json. Both llama.cpp and we quantize activations to
8 bits, so neither matches this exactly; tests/demo_model_reference.rs checks that we stray from
it no more than llama.cpp does.

  python3 tests/golden/make_exact_reference.py MODEL.gguf   # about a minute
"""
import json, os, sys
import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize

HERE = os.path.dirname(__file__)
REF = os.path.join(HERE, "..", "data", "reference", "smollm2_llama_cpp.json")
OUT = os.path.join(HERE, "..", "data", "reference", "smollm2_exact.json")

r = GGUFReader(sys.argv[1])
fields = {f.name: f for f in r.fields.values()}
def scalar(k):
    f = fields[k]
    return f.parts[f.data[0]].tolist()[0]
eps = scalar("llama.attention.layer_norm_rms_epsilon")
theta = scalar("llama.rope.freq_base")
L = scalar("llama.block_count")
H = scalar("llama.attention.head_count")
KV = scalar("llama.attention.head_count_kv")
W = {}
for t in r.tensors:
    a = dequantize(t.data, t.tensor_type).astype(np.float64)
    W[t.name] = a.reshape([int(x) for x in reversed(t.shape)])
D = W["blk.0.attn_q.weight"].shape[0] // H

def rms(x, w):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w

def rope(x, pos):  # GGUF llama: pairs (2i, 2i+1)
    d = x.shape[-1]
    ang = np.outer(pos, theta ** (-np.arange(0, d, 2) / d))[:, None, :]
    c, s = np.cos(ang), np.sin(ang)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2], out[..., 1::2] = x0 * c - x1 * s, x0 * s + x1 * c
    return out

toks = json.load(open(REF))["teacher_forced"]["ids"]
T = len(toks)
pos = np.arange(T)
x = W["token_embd.weight"][toks]
mask = np.triu(np.full((T, T), -np.inf), 1)
for l in range(L):
    p = f"blk.{l}."
    h = rms(x, W[p + "attn_norm.weight"])
    q = rope((h @ W[p + "attn_q.weight"].T).reshape(T, H, D), pos)
    k = rope((h @ W[p + "attn_k.weight"].T).reshape(T, KV, D), pos)
    v = (h @ W[p + "attn_v.weight"].T).reshape(T, KV, D)
    o = np.zeros((T, H, D))
    for hh in range(H):
        kv = hh // (H // KV)
        s = q[:, hh] @ k[:, kv].T / np.sqrt(D) + mask
        s = np.exp(s - s.max(1, keepdims=True))
        o[:, hh] = (s / s.sum(1, keepdims=True)) @ v[:, kv]
    x = x + o.reshape(T, H * D) @ W[p + "attn_output.weight"].T
    h = rms(x, W[p + "ffn_norm.weight"])
    g, u = h @ W[p + "ffn_gate.weight"].T, h @ W[p + "ffn_up.weight"].T
    x = x + ((g / (1 + np.exp(-g))) * u) @ W[p + "ffn_down.weight"].T
logits = rms(x, W["output_norm.weight"]) @ W.get("output.weight", W["token_embd.weight"]).T
top = []
for row in logits:
    idx = np.argsort(-row)[:10]
    top.append({"ids": [int(i) for i in idx], "logits": [round(float(row[i]), 4) for i in idx]})
json.dump({"reference": "float64 numpy over gguf-dequantized weights", "ids": toks, "top10": top}, open(OUT, "w"))
print("wrote", OUT, T, "positions")
