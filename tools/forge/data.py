"""Training data for the head: the trunk's own answers to the committed prompts, and text that
ships on the machine (licences, package docs, Rust and Python sources), picked by glob at run
time so that no download is needed. Everything is ordered and sampled with a seeded RNG.
"""
import glob
import gzip
import os
import random
import sysconfig

import torch
import torch.nn.functional as F

from trunk import generate, render_chat

HERE = os.path.dirname(os.path.abspath(__file__))


def load_prompts():
    """{class: [prompt text]} from prompts/*.txt: one per line, or `%%`-separated blocks."""
    out = {}
    for path in sorted(glob.glob(os.path.join(HERE, "prompts", "*.txt"))):
        text = open(path, encoding="utf-8").read()
        if "\n%%\n" in text:
            items = [b.strip() for b in text.split("\n%%\n")]
        else:
            items = [line.strip() for line in text.splitlines()]
        out[os.path.splitext(os.path.basename(path))[0]] = [p for p in items if p]
    return out


def _read(path, limit=200_000):
    try:
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rt", encoding="utf-8", errors="strict") as f:
            return f.read(limit)
    except (OSError, UnicodeDecodeError, EOFError):
        return None


def machine_text_sources():
    """Glob patterns per kind; whichever exist on this machine are used."""
    home = os.path.expanduser("~")
    stdlib = sysconfig.get_paths()["stdlib"]
    return {
        "licences": ["/usr/share/common-licenses/*"],
        "docs": ["/usr/share/doc/*/README*", "/usr/share/doc/*/*.md", "/usr/share/doc/*/*.txt",
                 "/usr/share/doc/*/NEWS*"],
        "rust": [os.path.join(home, ".cargo/registry/src/*/*/src/*.rs"),
                 os.path.join(home, ".rustup/toolchains/*/lib/rustlib/src/rust/library/*/src/*.rs")],
        "python": [os.path.join(stdlib, "*.py"), os.path.join(stdlib, "*/*.py")],
    }


def machine_docs(rng, tokens_per_kind, tok):
    """{kind: [token-id lists]}: files sampled per kind until about `tokens_per_kind` tokens."""
    out = {}
    for kind, patterns in machine_text_sources().items():
        files = sorted({p for pat in patterns for p in glob.glob(pat) if os.path.isfile(p)})
        rng.shuffle(files)
        docs, n = [], 0
        for path in files:
            if n >= tokens_per_kind:
                break
            text = _read(path)
            if not text or len(text) < 200:
                continue
            ids = tok.encode(text[:12_000]).ids
            docs.append(ids)
            n += len(ids)
        out[kind] = docs
    return out


def prompt_ids(trunk, tok, prompts):
    return [tok.encode(render_chat(trunk.template, p)).ids for p in prompts]


def trunk_answers(trunk, tok, prompts, seed, max_new, samples):
    """Prompt + answer token lists: one greedy answer and `samples` answers at T=0.7 each."""
    gen = torch.Generator().manual_seed(seed)
    ids = prompt_ids(trunk, tok, prompts)
    docs = []
    for temp, reps in ((0.0, 1), (0.7, samples)):
        for _ in range(reps):
            for i in range(0, len(ids), 40):
                batch = ids[i:i + 40]
                outs = generate(trunk, batch, max_new, temp, gen, trunk.eos)
                docs.extend(p + o for p, o in zip(batch, outs))
    return docs


def windows(docs, size, min_len=32):
    """Cuts each document into windows of at most `size` tokens (a short tail is dropped)."""
    out = []
    for d in docs:
        for s in range(0, len(d), size):
            w = d[s:s + size]
            if len(w) >= min_len:
                out.append(w)
    return out


def subvocab(docs, size, vocab, always):
    """FR-Spec: the `size` most frequent token ids over the training tokens (ties by id), with
    the end-of-turn tokens always in. Returns (ids sorted ascending, counts over all ids)."""
    counts = torch.zeros(vocab, dtype=torch.long)
    for d in docs:
        counts += torch.bincount(torch.tensor(d), minlength=vocab)
    order = sorted(range(vocab), key=lambda i: (-int(counts[i]), i))
    keep = set(always)
    for i in order:
        if len(keep) >= size:
            break
        keep.add(i)
    return sorted(keep), counts


@torch.no_grad()
def features(trunk, wins, sub_ids, topk, batch=8):
    """Runs the frozen trunk once over every window. Per window: ids, hidden states (pre-final-
    norm, f32 as the server hands them over), the trunk's top-`topk` distribution restricted to the sub-vocab
    (indices into it, renormalised probabilities) and its full-vocabulary argmax."""
    sub = torch.tensor(sub_ids)
    out = []
    order = sorted(range(len(wins)), key=lambda i: len(wins[i]))
    for s in range(0, len(order), batch):
        idx = order[s:s + batch]
        T = max(len(wins[i]) for i in idx)
        ids = torch.zeros(len(idx), T, dtype=torch.long)
        ok = torch.zeros(len(idx), T, dtype=torch.bool)
        for b, i in enumerate(idx):
            ids[b, :len(wins[i])] = torch.tensor(wins[i])
            ok[b, :len(wins[i])] = True
        pos = torch.arange(T)[None].expand(len(idx), T)
        hid, logits = trunk.forward(ids, pos, ok)
        arg = logits.argmax(-1)
        lp = F.log_softmax(logits[..., sub], -1)
        top_lp, top_i = lp.topk(topk, -1)
        top_p = F.softmax(top_lp, -1)
        for b, i in enumerate(idx):
            n = len(wins[i])
            out.append({"ids": ids[b, :n].clone(), "hid": hid[b, :n].clone(),
                        "top_i": top_i[b, :n].short(), "top_p": top_p[b, :n].half(),
                        "argmax": arg[b, :n].int()})
    return out
