#!/usr/bin/env python3
"""Forge: self-distils a multi-token-prediction head for a trunk GGUF that has none.

The trunk is frozen; the head learns the trunk's own next-next-token distribution from its last
hidden state and the next token, chained for `--depth` steps. Data: the trunk's answers to
tools/forge/prompts (greedy and sampled at T=0.7) and text that ships on this machine. The run is
seeded: the same machine, files and flags give the same sidecar.

  python3 -m venv .venv && .venv/bin/pip install -r tools/forge/requirements.txt
  .venv/bin/python tools/forge/forge.py --out models/SmolLM2-135M-Instruct.Q4_1.mtp.safetensors

Ends with the verdict: greedy acceptance of the head's top-1 against the trunk's greedy token by
chained depth, on held-out prompts and held-out machine text, and the sub-vocabulary's coverage.
"""
import argparse
import copy
import json
import math
import os
import random
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import data  # noqa: E402
from head import FORMAT_VERSION, MtpHead, save_sidecar  # noqa: E402
from trunk import Trunk, generate, load_tokenizer, sha256_file  # noqa: E402

DEMO = "SmolLM2-135M-Instruct.Q4_1.gguf"


def default_gguf():
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "mtplx-lite", DEMO)


def log(*a):
    print(f"[forge {time.strftime('%H:%M:%S')}]", *a, flush=True)


def check_reference(trunk, path):
    """Top-10 logits of the trunk against the float64 numpy reference the Rust tests use."""
    ref = json.load(open(path))
    ids = torch.tensor(ref["ids"])[None]
    _, logits = trunk.forward(ids, torch.arange(ids.shape[1])[None], torch.ones_like(ids, dtype=torch.bool))
    worst, same_top1 = 0.0, 0
    for row, top in zip(logits[0], ref["top10"]):
        worst = max(worst, max(abs(float(row[i]) - v) for i, v in zip(top["ids"], top["logits"])))
        same_top1 += int(row.argmax()) == top["ids"][0]
    return worst, same_top1, len(ref["top10"])


def pad(batch, key, T, fill=0):
    x = batch[0][key]
    out = torch.full((len(batch), T) + tuple(x.shape[1:]), fill, dtype=x.dtype)
    for b, f in enumerate(batch):
        out[b, :len(f[key])] = f[key]
    return out


def collate(batch):
    T = max(len(f["ids"]) for f in batch)
    return {k: pad(batch, k, T) for k in ("ids", "hid", "top_i", "top_p", "argmax")}, \
        torch.tensor([len(f["ids"]) for f in batch])


def chain_loss(head, batch, depth, weights):
    x, lens = collate(batch)
    outs = head.chain(x["hid"], x["ids"], depth)
    total, parts = 0.0, []
    for k, lg in enumerate(outs, start=1):
        m = lg.shape[1]
        valid = (torch.arange(m)[None] + k) < lens[:, None]
        ti, tp = x["top_i"][:, k:k + m].long(), x["top_p"][:, k:k + m].float()
        ce = -(tp * F.log_softmax(lg, -1).gather(-1, ti)).sum(-1)
        loss = (ce * valid).sum() / valid.sum().clamp(min=1)
        parts.append(float(loss))
        total = total + weights[k - 1] * loss
    return total / sum(weights[:depth]), parts


@torch.no_grad()
def acceptance(head, evals, depth):
    """Greedy speculative acceptance, exactly: on the trunk's own greedy continuations, a chain
    started at i accepts depth k if the head's top-1 equals the trunk's greedy token at every
    depth up to k. Returns {class: (chains, [P(accepted >= k)], coverage)}."""
    sub = head.sub_ids
    in_sub = torch.zeros(head.hp.vocab, dtype=torch.bool)
    in_sub[sub] = True
    res = {}
    for cls, items in evals.items():
        n_chains, acc, cov_hit, cov_n = 0, [0] * depth, 0, 0
        for f, start in items:
            ids, hid, arg = f["ids"][None], f["hid"][None].float(), f["argmax"]
            n = ids.shape[1]
            outs = head.chain(hid, ids, depth)
            lo, hi = max(start - 1, 0), n - 1 - depth
            if hi <= lo:
                continue
            ok = torch.ones(hi - lo, dtype=torch.bool)
            for k, lg in enumerate(outs, start=1):
                pred = sub[lg[0, lo:hi].argmax(-1)]
                ok &= pred == arg[lo + k:hi + k]
                acc[k - 1] += int(ok.sum())
            n_chains += hi - lo
            gen = arg[start - 1:n - 1]
            cov_hit += int(in_sub[gen].sum())
            cov_n += len(gen)
        res[cls] = (n_chains, [a / max(n_chains, 1) for a in acc], cov_hit / max(cov_n, 1))
    return res


def verdict_table(res, depth):
    lines = ["| held-out class | chains | " + " | ".join(f"depth {k}" for k in range(1, depth + 1))
             + " | tokens/verify | sub-vocab coverage |",
             "|---|---|" + "---|" * depth + "---|---|"]
    for cls, (n, acc, cov) in res.items():
        lines.append(f"| {cls} | {n} | " + " | ".join(f"{a:.3f}" for a in acc)
                     + f" | {1 + sum(acc):.2f} | {cov:.3f} |")
    return "\n".join(lines)


def rounded(head, dtype):
    h = copy.deepcopy(head)
    with torch.no_grad():
        for p in h.parameters():
            p.copy_(p.to(dtype).float())
    return h


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf", default=default_gguf(), help="the trunk (default: the demo model in the cache)")
    ap.add_argument("--out", required=True, help="the sidecar .safetensors to write")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=1200, help="optimizer steps (fixed, for reproducibility)")
    ap.add_argument("--max-minutes", type=float, default=40, help="stop training early past this (then not reproducible)")
    ap.add_argument("--depth", type=int, default=3, help="chained depth trained")
    ap.add_argument("--eval-depth", type=int, default=4)
    ap.add_argument("--batch", type=int, default=8, help="windows per step")
    ap.add_argument("--window", type=int, default=256, help="tokens per window")
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--subvocab", type=int, default=8192, help="draft sub-vocabulary size (FR-Spec)")
    ap.add_argument("--topk", type=int, default=16, help="teacher probabilities kept per position")
    ap.add_argument("--text-tokens", type=int, default=40000, help="machine-text tokens per kind")
    ap.add_argument("--samples", type=int, default=2, help="sampled (T=0.7) answers per prompt")
    ap.add_argument("--max-new", type=int, default=192, help="most answer tokens per prompt")
    ap.add_argument("--dtype", choices=("f32", "f16", "bf16"), default="f32", help="sidecar weights")
    ap.add_argument("--f32-copy", help="also write the head in f32 here (to compare precisions)")
    ap.add_argument("--reference", default=os.path.join(data.HERE, "..", "..", "tests", "data", "reference", "smollm2_exact.json"))
    a = ap.parse_args()

    t0 = time.time()
    torch.manual_seed(a.seed)
    random.seed(a.seed)
    torch.set_num_threads(a.threads)
    rng = random.Random(a.seed)
    log("trunk", a.gguf)
    sha = sha256_file(a.gguf)
    trunk = Trunk(a.gguf)
    tok = load_tokenizer(a.gguf)
    hp = trunk.hp
    if os.path.basename(a.gguf) == DEMO and os.path.exists(a.reference):
        worst, same, n = check_reference(trunk, a.reference)
        log(f"trunk vs float64 reference: top-1 equal at {same}/{n} positions, max |logit diff| {worst:.4f}")

    prompts = data.load_prompts()
    train_p, eval_p = {}, {}
    for cls, ps in prompts.items():  # every 6th prompt of each class is held out
        train_p[cls] = [p for i, p in enumerate(ps) if i % 6 != 5]
        eval_p[cls] = [p for i, p in enumerate(ps) if i % 6 == 5]
    log("answers:", {c: len(p) for c, p in train_p.items()}, "held out:", {c: len(p) for c, p in eval_p.items()})
    docs = []
    for cls, ps in train_p.items():
        docs += data.trunk_answers(trunk, tok, ps, a.seed, a.max_new, a.samples)
        log(f"  {cls}: {len(docs)} answer documents so far, {time.time() - t0:.0f}s")
    n_answer_tokens = sum(map(len, docs))
    machine = data.machine_docs(rng, a.text_tokens, tok)
    eval_text = []
    for kind, ds in machine.items():
        cut = max(1, len(ds) // 10)
        docs += ds[:-cut]
        eval_text += [(kind, d[:128]) for d in ds[-cut:] if len(d) >= 128]
    n_text_tokens = sum(map(len, docs)) - n_answer_tokens
    log(f"data: {n_answer_tokens} answer tokens, {n_text_tokens} machine-text tokens, {time.time() - t0:.0f}s")

    sub_ids, counts = data.subvocab(docs, a.subvocab, hp.vocab, trunk.eos)
    train_cov = float(counts[sub_ids].sum()) / float(counts.sum())
    log(f"sub-vocab: {len(sub_ids)} ids cover {train_cov:.4f} of training tokens")

    wins = data.windows(docs, a.window)
    feats = data.features(trunk, wins, sub_ids, a.topk)
    log(f"trunk features: {len(wins)} windows, {sum(map(len, wins))} tokens, {time.time() - t0:.0f}s")

    evals, starts = {}, {}
    gen = torch.Generator().manual_seed(a.seed + 1)
    for cls, ps in eval_p.items():
        pids = data.prompt_ids(trunk, tok, ps)
        outs = generate(trunk, pids, a.max_new, 0.0, gen, trunk.eos)
        evals[cls] = [p + o for p, o in zip(pids, outs)]
        starts[cls] = [len(p) for p in pids]
    by_kind = {}
    for kind, prefix in eval_text:
        by_kind.setdefault(kind, []).append(prefix)
    for kind, prefixes in by_kind.items():
        outs = []
        for i in range(0, len(prefixes), 16):
            outs += generate(trunk, prefixes[i:i + 16], 48, 0.0, gen, [])
        evals["text:" + kind] = [p + o for p, o in zip(prefixes, outs)]
        starts["text:" + kind] = [len(p) for p in prefixes]
    eval_feats = {}
    for c, d in evals.items():
        fs = data.features(trunk, d, sub_ids, a.topk, batch=1)
        eval_feats[c] = list(zip(fs, starts[c]))
    log(f"held-out: {sum(len(v) for v in evals.values())} greedy continuations, {time.time() - t0:.0f}s")

    head = MtpHead(trunk, sub_ids)
    del trunk.W  # the head holds what it needs; the trunk's weights are no longer used
    opt = torch.optim.AdamW(head.parameters(), lr=a.lr, weight_decay=0.0, betas=(0.9, 0.98))
    warm = 30
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warm) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(s, a.steps) / a.steps))))
    weights = [1.0, 0.8, 0.6, 0.5, 0.4, 0.3, 0.3, 0.3]
    before = acceptance(head, eval_feats, a.eval_depth)
    log("before training:\n" + verdict_table(before, a.eval_depth))
    t_train = time.time()
    order, step, stopped_early = [], 0, False
    while step < a.steps:
        if not order:
            order = torch.randperm(len(feats)).tolist()
        batch = [feats[order.pop()] for _ in range(min(a.batch, len(order)))]
        loss, parts = chain_loss(head, batch, a.depth, weights)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(head.parameters(), 1.0)
        opt.step()
        sched.step()
        step += 1
        if step % 50 == 0:
            log(f"step {step}/{a.steps} loss {float(loss):.3f} by depth " + " ".join(f"{p:.3f}" for p in parts)
                + f" ({time.time() - t_train:.0f}s)")
        if step % 400 == 0:
            log("\n" + verdict_table(acceptance(head, eval_feats, a.eval_depth), a.eval_depth))
        if time.time() - t_train > a.max_minutes * 60:
            stopped_early = True
            log(f"time cap of {a.max_minutes} min reached at step {step}: stopping (not reproducible by step count)")
            break
    train_s = time.time() - t_train

    res = acceptance(head, eval_feats, a.eval_depth)
    alt = {d: acceptance(rounded(head, getattr(torch, n)), eval_feats, a.eval_depth)
           for d, n in (("f16", "float16"), ("bf16", "bfloat16"))}
    dtype = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[a.dtype]
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    meta = {
        "trunk_sha256": sha, "trunk_file": os.path.basename(a.gguf), "depth_trained": str(a.depth),
        "seed": str(a.seed), "steps": str(step), "train_seconds": f"{train_s:.0f}",
        "train_tokens": str(sum(map(len, wins))), "subvocab_train_coverage": f"{train_cov:.4f}",
        "verdict": {c: {"chains": n, "accept_by_depth": [round(x, 4) for x in acc], "coverage": round(cov, 4)}
                    for c, (n, acc, cov) in res.items()},
    }
    save_sidecar(a.out, head, meta, dtype)
    if a.f32_copy:
        save_sidecar(a.f32_copy, head, meta, torch.float32)
    print()
    print(f"Forge verdict: trunk {os.path.basename(a.gguf)} (sha256 {sha[:16]}…), {hp.n_layers} layers, hidden {hp.hidden}")
    print(f"  data: {n_answer_tokens} answer tokens + {n_text_tokens} machine-text tokens; {len(wins)} windows")
    print(f"  training: {step} steps of {a.batch} windows, depth {a.depth}, {train_s / 60:.1f} min"
          + (" (stopped by the time cap)" if stopped_early else "") + f"; whole run {(time.time() - t0) / 60:.1f} min")
    print(f"  sub-vocab: {len(sub_ids)} ids, {train_cov:.3f} of training tokens")
    print(f"  sidecar: {a.out} ({os.path.getsize(a.out) / 1e6:.1f} MB, {a.dtype}), format {FORMAT_VERSION}")
    print("\nGreedy acceptance (P[chain accepts >= k drafts]), head weights in f32:")
    print(verdict_table(res, a.eval_depth))
    for d, r in alt.items():
        print(f"\nSame head with its weights rounded to {d}:")
        print(verdict_table(r, a.eval_depth))
    print("\nBefore training (warm start only):")
    print(verdict_table(before, a.eval_depth))


if __name__ == "__main__":
    main()
