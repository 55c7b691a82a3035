"""The trunk: a llama-architecture GGUF dequantized to f32 and run in torch, frozen.

It mirrors src/model/llama.rs (GGUF's interleaved RoPE, grouped-query attention, SwiGLU) so that
the hidden states the head learns from are the ones the server will hand it. `hidden` is the
residual stream after the last layer, before the final norm: what `Model::forward_hidden`
returns on the Rust side.
"""
import hashlib
import importlib.util
import os
import tempfile
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from gguf import GGUFReader
from gguf.quants import dequantize

REPO = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))


@dataclass
class HParams:
    arch: str
    n_layers: int
    hidden: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    ffn: int
    vocab: int
    eps: float
    theta: float


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _field(reader, key):
    f = reader.fields.get(key)
    return None if f is None else f.contents()


_ROPE = {}


def rope(x, pos, theta):
    """x: (B, heads, T, D); pos: (B, T). GGUF llama pairs dimensions (2i, 2i+1)."""
    d = x.shape[-1]
    need = int(pos.max()) + 1
    table = _ROPE.get((d, theta))
    if table is None or table[0].shape[0] < need:
        n = max(need, 4096)
        inv = theta ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
        ang = torch.arange(n, dtype=torch.float64)[:, None] * inv
        table = (ang.cos().float(), ang.sin().float())
        _ROPE[(d, theta)] = table
    c, s = table[0][pos][:, None], table[1][pos][:, None]  # (B, 1, T, D/2)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), dim=-1).flatten(-2)


def rms(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


class Trunk:
    """Frozen f32 weights and a batched forward with an optional KV cache."""

    def __init__(self, path):
        r = GGUFReader(path)
        arch = _field(r, "general.architecture")
        if arch != "llama":
            raise SystemExit(f"forge rebuilds the llama architecture only; {path} is {arch!r}")
        g = lambda k: _field(r, f"{arch}.{k}")  # noqa: E731
        W = {}
        for t in r.tensors:
            a = dequantize(t.data, t.tensor_type).astype(np.float32)
            W[t.name] = torch.from_numpy(a.reshape([int(x) for x in reversed(t.shape)]).copy())
        n_heads = int(g("attention.head_count"))
        self.hp = HParams(
            arch=arch,
            n_layers=int(g("block_count")),
            hidden=int(g("embedding_length")),
            n_heads=n_heads,
            n_kv_heads=int(g("attention.head_count_kv")),
            head_dim=int(g("embedding_length")) // n_heads,
            ffn=int(g("feed_forward_length")),
            vocab=W["token_embd.weight"].shape[0],
            eps=float(g("attention.layer_norm_rms_epsilon")),
            theta=float(g("rope.freq_base") or 10000.0),
        )
        self.W = W
        self.embed = W["token_embd.weight"]
        self.output = W.get("output.weight", self.embed)
        self.output_norm = W["output_norm.weight"]
        self.path = path
        eos = _field(r, "tokenizer.ggml.eos_token_id")
        self.eos = [] if eos is None else [int(eos)]
        self.template = _field(r, "tokenizer.chat_template")
        self._reader = r

    def layer_weights(self, l):
        p = f"blk.{l}."
        return {k: self.W[p + k + ".weight"] for k in (
            "attn_norm", "attn_q", "attn_k", "attn_v", "attn_output",
            "ffn_norm", "ffn_gate", "ffn_up", "ffn_down")}

    @torch.no_grad()
    def forward(self, ids, pos, key_ok, cache=None):
        """ids, pos: (B, T) int64; key_ok: (B, Tk) bool over all keys (cached + new), False for
        left padding. Returns (hidden (B, T, H) before the final norm, logits (B, T, V))."""
        hp = self.hp
        B, T = ids.shape
        x = self.embed[ids]
        Tk = key_ok.shape[1]
        past = Tk - T
        causal = torch.ones(T, Tk, dtype=torch.bool).tril(past)
        mask = causal[None, None] & key_ok[:, None, None, :]
        for l in range(hp.n_layers):
            x = decoder_layer(x, pos, mask, self.layer_weights(l), hp, cache, l)
        logits = rms(x, self.output_norm, hp.eps) @ self.output.T
        return x, logits


def decoder_layer(x, pos, mask, w, hp, cache=None, l=0, extra_kv=None):
    """One llama block. `cache` (a list of per-layer (k, v)) is extended in place. `extra_kv`
    lets the MTP head attend to keys computed elsewhere (see head.py)."""
    B, T, _ = x.shape
    h = rms(x, w["attn_norm"], hp.eps)
    q = (h @ w["attn_q"].T).view(B, T, hp.n_heads, hp.head_dim).transpose(1, 2)
    k = (h @ w["attn_k"].T).view(B, T, hp.n_kv_heads, hp.head_dim).transpose(1, 2)
    v = (h @ w["attn_v"].T).view(B, T, hp.n_kv_heads, hp.head_dim).transpose(1, 2)
    q, k = rope(q, pos, hp.theta), rope(k, pos, hp.theta)
    if cache is not None:
        if len(cache) > l:
            k = torch.cat((cache[l][0], k), 2)
            v = torch.cat((cache[l][1], v), 2)
            cache[l] = (k, v)
        else:
            cache.append((k, v))
    if extra_kv is not None:
        o = extra_kv(q, k, v)
    else:
        rep = hp.n_heads // hp.n_kv_heads
        o = F.scaled_dot_product_attention(
            q, k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1), attn_mask=mask)
    x = x + o.transpose(1, 2).reshape(B, T, -1) @ w["attn_output"].T
    h = rms(x, w["ffn_norm"], hp.eps)
    return x + (F.silu(h @ w["ffn_gate"].T) * (h @ w["ffn_up"].T)) @ w["ffn_down"].T


def load_tokenizer(gguf_path):
    """The GGUF's byte-level BPE as a `tokenizers` Tokenizer, built by the same script the
    tokenizer golden tests use (tests/golden/gguf_tokenizer_json.py)."""
    from tokenizers import Tokenizer

    spec = importlib.util.spec_from_file_location(
        "gguf_tokenizer_json", os.path.join(REPO, "tests", "golden", "gguf_tokenizer_json.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    with tempfile.TemporaryDirectory() as d:
        mod.main(gguf_path, d)
        return Tokenizer.from_file(os.path.join(d, "tokenizer.json"))


def render_chat(template, user_text):
    """One user message through the model's own chat template, as transformers renders it."""
    import jinja2

    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    return env.from_string(template).render(
        messages=[{"role": "user", "content": user_text}], add_generation_prompt=True)


@torch.no_grad()
def generate(trunk, prompts, max_new, temperature, gen, eos):
    """Batched decoding of token-id prompts (left-padded). Greedy at temperature 0, otherwise
    plain sampling at `temperature` from the torch generator `gen`. Returns the new ids."""
    B = len(prompts)
    T = max(len(p) for p in prompts)
    ids = torch.zeros(B, T, dtype=torch.long)
    ok = torch.zeros(B, T, dtype=torch.bool)
    for b, p in enumerate(prompts):
        ids[b, T - len(p):] = torch.tensor(p)
        ok[b, T - len(p):] = True
    pos = (ok.long().cumsum(1) - 1).clamp(min=0)
    cache = []
    _, logits = trunk.forward(ids, pos, ok, cache)
    last = logits[:, -1]
    out = [[] for _ in range(B)]
    done = torch.zeros(B, dtype=torch.bool)
    next_pos = pos[:, -1] + 1
    for _ in range(max_new):
        if temperature == 0:
            tok = last.argmax(-1)
        else:
            tok = torch.multinomial(F.softmax(last / temperature, -1), 1, generator=gen)[:, 0]
        for b in range(B):
            if not done[b]:
                out[b].append(int(tok[b]))
                if int(tok[b]) in eos:
                    done[b] = True
        if bool(done.all()):
            break
        ok = torch.cat((ok, torch.ones(B, 1, dtype=torch.bool)), 1)
        _, logits = trunk.forward(tok[:, None], next_pos[:, None], ok, cache)
        last = logits[:, -1]
        next_pos = next_pos + 1
    return out
