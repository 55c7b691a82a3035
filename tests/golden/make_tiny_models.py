#!/usr/bin/env python3
"""Writes tiny random-weight Hugging Face model directories (real safetensors) for the qwen2, qwen3
and llama architectures, and the logits of an independent numpy forward pass over a fixed token
sequence. The Rust tests load each directory through the server's own loader and compare.

Run from the repo root: python3 tests/golden/make_tiny_models.py   (needs numpy)
Outputs: tests/data/tiny/<arch>/{config.json, model.safetensors, reference.json}
"""
import json, os, struct
import numpy as np

OUT = os.path.join(os.path.dirname(__file__), "..", "data", "tiny")
TOKENS = [1, 17, 93, 5, 120, 64, 64, 3, 77, 42, 8, 101]


def bf16_round(a):
    """Rounds float32 to bfloat16 (nearest even); returns (rounded float32, raw uint16)."""
    b = np.asarray(a, dtype=np.float32).view(np.uint32)
    rounded = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)
    return (rounded.astype(np.uint32) << 16).view(np.float32), rounded


def write_safetensors(path, tensors):
    """tensors: name -> (dtype string, raw bytes, shape)."""
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        dt, raw, shape = tensors[name]
        header[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def rmsnorm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rope_neox(x, pos, theta):
    # x: [T, H, D]; HF rotate_half layout: pairs (i, i + D/2).
    d = x.shape[-1]
    inv = theta ** (-np.arange(0, d, 2, dtype=np.float64) / d)
    ang = np.outer(pos, inv)  # [T, D/2]
    cos = np.cos(ang)[:, None, :].astype(np.float64)
    sin = np.sin(ang)[:, None, :].astype(np.float64)
    x1, x2 = x[..., : d // 2], x[..., d // 2 :]
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


def forward(cfg, w, tokens):
    H, KV, D = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    eps, theta = cfg["rms_norm_eps"], cfg["rope_theta"]
    T = len(tokens)
    pos = np.arange(T)
    x = w["model.embed_tokens.weight"][tokens].astype(np.float64)
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        h = rmsnorm(x, w[p + "input_layernorm.weight"], eps)
        q = h @ w[p + "self_attn.q_proj.weight"].T
        k = h @ w[p + "self_attn.k_proj.weight"].T
        v = h @ w[p + "self_attn.v_proj.weight"].T
        if cfg["model_type"] == "qwen2":
            q, k, v = q + w[p + "self_attn.q_proj.bias"], k + w[p + "self_attn.k_proj.bias"], v + w[p + "self_attn.v_proj.bias"]
        q, k, v = q.reshape(T, H, D), k.reshape(T, KV, D), v.reshape(T, KV, D)
        if cfg["model_type"] == "qwen3":
            q = rmsnorm(q, w[p + "self_attn.q_norm.weight"], eps)
            k = rmsnorm(k, w[p + "self_attn.k_norm.weight"], eps)
        q, k = rope_neox(q, pos, theta), rope_neox(k, pos, theta)
        out = np.zeros((T, H, D))
        for hh in range(H):
            kv = hh // (H // KV)
            s = q[:, hh, :] @ k[:, kv, :].T / np.sqrt(D)
            s = s + np.triu(np.full((T, T), -np.inf), 1)
            s = np.exp(s - s.max(axis=1, keepdims=True))
            s /= s.sum(axis=1, keepdims=True)
            out[:, hh, :] = s @ v[:, kv, :]
        x = x + out.reshape(T, H * D) @ w[p + "self_attn.o_proj.weight"].T
        h = rmsnorm(x, w[p + "post_attention_layernorm.weight"], eps)
        g = h @ w[p + "mlp.gate_proj.weight"].T
        u = h @ w[p + "mlp.up_proj.weight"].T
        x = x + ((g / (1 + np.exp(-g))) * u) @ w[p + "mlp.down_proj.weight"].T
    x = rmsnorm(x, w["model.norm.weight"], eps)
    head = w["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else w["lm_head.weight"]
    return x @ head.T


def make(arch, dtype, tied, seed):
    rng = np.random.default_rng(seed)
    cfg = {
        "model_type": arch, "architectures": [{"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM"}[arch]],
        "vocab_size": 128, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
        "rms_norm_eps": 1e-6, "rope_theta": 10000.0 if arch == "llama" else 1000000.0,
        "max_position_embeddings": 256, "tie_word_embeddings": tied,
        "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}[dtype],
    }
    Hd, I, V, H, KV, D = 64, 96, 128, 4, 2, 16
    shapes = {"model.embed_tokens.weight": (V, Hd), "model.norm.weight": (Hd,)}
    if not tied:
        shapes["lm_head.weight"] = (V, Hd)
    for l in range(2):
        p = f"model.layers.{l}."
        shapes.update({
            p + "input_layernorm.weight": (Hd,), p + "post_attention_layernorm.weight": (Hd,),
            p + "self_attn.q_proj.weight": (H * D, Hd), p + "self_attn.k_proj.weight": (KV * D, Hd),
            p + "self_attn.v_proj.weight": (KV * D, Hd), p + "self_attn.o_proj.weight": (Hd, H * D),
            p + "mlp.gate_proj.weight": (I, Hd), p + "mlp.up_proj.weight": (I, Hd), p + "mlp.down_proj.weight": (Hd, I),
        })
        if arch == "qwen2":
            shapes.update({p + "self_attn.q_proj.bias": (H * D,), p + "self_attn.k_proj.bias": (KV * D,), p + "self_attn.v_proj.bias": (KV * D,)})
        if arch == "qwen3":
            shapes.update({p + "self_attn.q_norm.weight": (D,), p + "self_attn.k_norm.weight": (D,)})
    weights, files = {}, {}
    for name in sorted(shapes):
        shape = shapes[name]
        if name.endswith("norm.weight"):
            a = 1.0 + 0.1 * rng.standard_normal(shape)
        else:
            a = rng.standard_normal(shape) * (0.5 / np.sqrt(shape[-1]))
        a = a.astype(np.float32)
        if dtype == "F32":
            raw = a.tobytes()
        elif dtype == "F16":
            a16 = a.astype(np.float16)
            a, raw = a16.astype(np.float32), a16.tobytes()
        else:
            a, bits = bf16_round(a)
            raw = bits.tobytes()
        weights[name] = a.astype(np.float64)
        files[name] = (dtype, raw, shape)
    d = os.path.join(OUT, arch)
    os.makedirs(d, exist_ok=True)
    write_safetensors(os.path.join(d, "model.safetensors"), files)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    logits = forward(cfg, weights, TOKENS)
    with open(os.path.join(d, "reference.json"), "w") as f:
        json.dump({"tokens": TOKENS, "logits": [[round(float(v), 6) for v in row] for row in logits],
                   "note": "numpy float64 forward pass (HF semantics, rotate_half RoPE) over the stored weights"}, f)
    print(arch, dtype, "tied" if tied else "separate head", "->", d)


if __name__ == "__main__":
    make("qwen3", "BF16", True, 3)
    make("qwen2", "F16", False, 2)
    make("llama", "F32", False, 1)
