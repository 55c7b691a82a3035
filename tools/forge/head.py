"""The MTP head (DeepSeek-V3 / Qwen3-Next layout) and its sidecar file.

One step: h' = layer(fc(concat(enorm(embed(t_next)), hnorm(h)))), draft logits =
embed[subvocab] @ final_norm(h'). The embedding and the output rows are the trunk's (tied) and
stay frozen; everything else is trained. The head keeps its own KV cache at the trunk's positions:
row i of the head pairs the trunk's hidden state at position i with the token at i + 1.

Chained drafting at inference appends entries for drafted positions after the entries made from
the trunk's real hidden states. Training reproduces exactly that attention pattern (see
`chain_attention`), so depth 2..D is trained on what it will see.
"""
import json

import torch
import torch.nn as nn
import torch.nn.functional as F
from safetensors.torch import save_file

from trunk import decoder_layer, rms

FORMAT = "mtplx-mtp-sidecar"
FORMAT_VERSION = "1"
LAYER_KEYS = ("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output",
              "ffn_norm", "ffn_gate", "ffn_up", "ffn_down")


class MtpHead(nn.Module):
    def __init__(self, trunk, sub_ids):
        super().__init__()
        hp = trunk.hp
        self.hp = hp
        H = hp.hidden
        last = trunk.layer_weights(hp.n_layers - 1)
        self.layer = nn.ParameterDict({k: nn.Parameter(last[k].clone()) for k in LAYER_KEYS})
        self.enorm = nn.Parameter(torch.ones(H))
        # The trunk's hidden state is a residual stream of large norm; starting hnorm and the
        # final norm from the trunk's own final norm puts the head's input and output on the
        # scale the last layer already works at.
        self.hnorm = nn.Parameter(trunk.output_norm.clone())
        self.final_norm = nn.Parameter(trunk.output_norm.clone())
        # fc starts as "pass the hidden state through, add a little of the token": the warm-
        # started layer then sees nearly what it saw in the trunk.
        fc = torch.zeros(H, 2 * H)
        fc[:, H:] = torch.eye(H)
        fc[:, :H] = torch.randn(H, H) * (0.02 / H ** 0.5)
        self.fc = nn.Parameter(fc)
        self.register_buffer("embed", trunk.embed, persistent=False)
        self.register_buffer("sub_ids", torch.tensor(sub_ids, dtype=torch.long), persistent=False)
        self.register_buffer("sub_out", trunk.output[self.sub_ids].clone(), persistent=False)

    def mix(self, hidden, tokens):
        e = rms(self.embed[tokens], self.enorm, self.hp.eps)
        h = rms(hidden, self.hnorm, self.hp.eps)
        return torch.cat((e, h), -1) @ self.fc.T

    def logits(self, h):
        return rms(h, self.final_norm, self.hp.eps) @ self.sub_out.T

    def chain(self, hid, ids, depth):
        """Teacher-forced chained forward over whole windows.

        hid: (B, T, H) trunk hidden states; ids: (B, T) the window's tokens. Returns a list of
        `depth` draft-logit tensors; entry k-1 has shape (B, T-k, S) and its row i predicts the
        token at i + k + 1 (the trunk's distribution at position i + k).
        """
        hp = self.hp
        B, T, _ = hid.shape
        scale = hp.head_dim ** -0.5
        rep = hp.n_heads // hp.n_kv_heads
        n = T - 1
        pos = torch.arange(n)[None].expand(B, n)
        first = {}

        def attend_first(q, k, v):
            first["k"], first["v"] = k, v
            mask = torch.ones(n, n, dtype=torch.bool).tril()
            return F.scaled_dot_product_attention(
                q, k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1), attn_mask=mask)

        h = decoder_layer(self.mix(hid[:, :n], ids[:, 1:]), pos, None, self.layer, hp,
                          extra_kv=attend_first)
        outs = [self.logits(h)]
        own = []  # the chain's own (k, v) per depth >= 2, row i = chain started at i
        for k in range(2, depth + 1):
            m = T - k  # chains that still have a real next token
            h = h[:, :m]
            K1, V1 = first["k"][:, :, :m], first["v"][:, :, :m]
            own = [(a[:, :, :m], b[:, :, :m]) for a, b in own]
            pos_k = torch.arange(m)[None].expand(B, m) + (k - 1)

            def attend_chain(q, kk, vv, K1=K1, V1=V1, own=own, m=m):
                own.append((kk, vv))
                K1r, V1r = K1.repeat_interleave(rep, 1), V1.repeat_interleave(rep, 1)
                s1 = (q @ K1r.transpose(-1, -2)) * scale
                s1 = s1.masked_fill(~torch.ones(m, m, dtype=torch.bool).tril(), float("-inf"))
                ko = [a.repeat_interleave(rep, 1) for a, _ in own]
                vo = [b.repeat_interleave(rep, 1) for _, b in own]
                s2 = torch.stack([(q * a).sum(-1) * scale for a in ko], -1)
                p = torch.softmax(torch.cat((s1, s2), -1), -1)
                o = p[..., :m] @ V1r
                for j, b in enumerate(vo):
                    o = o + p[..., m + j:m + j + 1] * b
                return o

            h = decoder_layer(self.mix(h, ids[:, k:k + m]), pos_k, None, self.layer, hp,
                              extra_kv=attend_chain)
            outs.append(self.logits(h))
        return outs


def save_sidecar(path, head, meta, dtype=torch.float32):
    """Writes the head's weights in `dtype` (f32, f16 or bf16; never quantized further), the
    sub-vocabulary ids (i32) and the metadata naming the trunk it was trained for."""
    t = {f"mtp.layer.{k}.weight": p.detach().to(dtype).contiguous() for k, p in head.layer.items()}
    t["mtp.enorm.weight"] = head.enorm.detach().to(dtype).contiguous()
    t["mtp.hnorm.weight"] = head.hnorm.detach().to(dtype).contiguous()
    t["mtp.eh_proj.weight"] = head.fc.detach().to(dtype).contiguous()
    t["mtp.final_norm.weight"] = head.final_norm.detach().to(dtype).contiguous()
    t["mtp.subvocab.ids"] = head.sub_ids.to(torch.int32).contiguous()
    hp = head.hp
    md = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "architecture": hp.arch,
        "hidden_size": str(hp.hidden),
        "n_layers": str(hp.n_layers),
        "n_heads": str(hp.n_heads),
        "n_kv_heads": str(hp.n_kv_heads),
        "head_dim": str(hp.head_dim),
        "ffn": str(hp.ffn),
        "vocab_size": str(hp.vocab),
        "rope_theta": repr(hp.theta),
        "rms_eps": repr(hp.eps),
        "rope_layout": "interleaved",
        "subvocab_size": str(len(head.sub_ids)),
        "dtype": str(dtype).replace("torch.", ""),
    }
    md.update({k: (v if isinstance(v, str) else json.dumps(v)) for k, v in meta.items()})
    save_file(t, path, metadata=md)
