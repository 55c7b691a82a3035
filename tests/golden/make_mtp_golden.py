#!/usr/bin/env python3
"""A tiny random llama trunk (f32 GGUF), a random MTP head sidecar for it, and the torch
reference of both, from Forge's own code (tools/forge/trunk.py and head.py). tests/mtp_head.rs
loads the two files through the server's loaders and compares.

The reference is computed incrementally with a KV cache, the way the server drafts: catch-up
rows 0..8 from the trunk's hidden states, then two chained rows from the head's own output.
The script also checks that Forge's teacher-forced training path (`MtpHead.chain`) gives the same
logits, so that what is trained is what is served.

  python3 tests/golden/make_mtp_golden.py      (needs tools/forge/requirements.txt)
Outputs: tests/data/mtp/{trunk.gguf, head.safetensors, reference.json}
"""
import json
import os
import sys

import numpy as np
import torch
from gguf import GGUFWriter

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools", "forge"))
from head import MtpHead, save_sidecar  # noqa: E402
from trunk import Trunk, decoder_layer, sha256_file  # noqa: E402

OUT = os.path.join(HERE, "..", "data", "mtp")
V, H, L, NH, NKV, FFN = 96, 64, 2, 4, 2, 96
TOKENS = [1, 17, 93, 5, 60, 64, 64, 3, 77, 42, 8, 11]
CATCH_UP = 8  # head rows fed from the trunk before chaining
SUB = sorted(set(range(0, V, 3)) | {2, 7, 11})


def write_trunk(path, rng):
    w = GGUFWriter(path, "llama")
    w.add_block_count(L)
    w.add_context_length(128)
    w.add_embedding_length(H)
    w.add_feed_forward_length(FFN)
    w.add_head_count(NH)
    w.add_head_count_kv(NKV)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    w.add_vocab_size(V)
    D = H // NH
    t = lambda *s, scale=0.1: (rng.standard_normal(s) * scale).astype(np.float32)  # noqa: E731
    w.add_tensor("token_embd.weight", t(V, H, scale=0.5))
    w.add_tensor("output_norm.weight", (1 + t(H)).astype(np.float32))
    for l in range(L):
        p = f"blk.{l}."
        w.add_tensor(p + "attn_norm.weight", (1 + t(H)).astype(np.float32))
        w.add_tensor(p + "attn_q.weight", t(NH * D, H))
        w.add_tensor(p + "attn_k.weight", t(NKV * D, H))
        w.add_tensor(p + "attn_v.weight", t(NKV * D, H))
        w.add_tensor(p + "attn_output.weight", t(H, NH * D))
        w.add_tensor(p + "ffn_norm.weight", (1 + t(H)).astype(np.float32))
        w.add_tensor(p + "ffn_gate.weight", t(FFN, H))
        w.add_tensor(p + "ffn_up.weight", t(FFN, H))
        w.add_tensor(p + "ffn_down.weight", t(H, FFN))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def step(head, cache, hidden, tokens, start):
    """The head over rows at positions start.., appending to `cache` (one layer)."""
    x = head.mix(hidden[None], torch.tensor(tokens)[None])
    n = len(tokens)
    pos = torch.arange(start, start + n)[None]
    mask = torch.ones(n, start + n, dtype=torch.bool).tril(start)[None, None]
    h = decoder_layer(x, pos, mask, head.layer, head.hp, cache, 0)
    return head.logits(h)[0], h[0]


def main():
    os.makedirs(OUT, exist_ok=True)
    rng = np.random.default_rng(7)
    torch.manual_seed(7)
    gguf_path = os.path.join(OUT, "trunk.gguf")
    write_trunk(gguf_path, rng)
    trunk = Trunk(gguf_path)
    ids = torch.tensor(TOKENS)[None]
    T = len(TOKENS)
    hid, _ = trunk.forward(ids, torch.arange(T)[None], torch.ones(1, T, dtype=torch.bool))
    hid = hid[0]

    head = MtpHead(trunk, SUB)
    with torch.no_grad():  # a random head, not the warm start: every weight must matter
        for p in head.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    save_sidecar(os.path.join(OUT, "head.safetensors"), head,
                 {"trunk_sha256": sha256_file(gguf_path), "depth_trained": "3"})

    with torch.no_grad():
        cache = []
        lg1, h1 = step(head, cache, hid[:CATCH_UP], TOKENS[1:CATCH_UP + 1], 0)
        lg2, h2 = step(head, cache, h1[-1:], [TOKENS[CATCH_UP + 1]], CATCH_UP)
        lg3, _ = step(head, cache, h2, [TOKENS[CATCH_UP + 2]], CATCH_UP + 1)
        outs = head.chain(hid[None], ids, 3)
        i = CATCH_UP - 1
        for got, want in ((outs[0][0, :CATCH_UP], lg1), (outs[1][0, i], lg2[0]), (outs[2][0, i], lg3[0])):
            err = float((got - want).abs().max())
            assert err < 1e-4, f"training path and incremental path differ by {err}"

    ref = {
        "tokens": TOKENS,
        "catch_up": CATCH_UP,
        "subvocab": SUB,
        "trunk_hidden": hid.flatten().tolist(),
        "depth1_logits": lg1.flatten().tolist(),
        "depth1_hidden": h1.flatten().tolist(),
        "depth2_logits": lg2.flatten().tolist(),
        "depth3_logits": lg3.flatten().tolist(),
    }
    with open(os.path.join(OUT, "reference.json"), "w") as f:
        json.dump(ref, f)
    print("wrote", OUT)


if __name__ == "__main__":
    main()
