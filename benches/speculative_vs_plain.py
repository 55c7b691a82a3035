#!/usr/bin/env python3
"""Speculative decoding against plain decoding on one server, in the same run.

    python3 benches/speculative_vs_plain.py [--threads 2] [--rounds 3] [--max-tokens 192]
        [--server-args "--draft auto --depth auto"] [--modes none,ngram,auto]
        [--llama-server PATH [--llama-spec ngram-simple]]

Starts mtplx-lite ($MTPLX_BIN, else $CARGO_TARGET_DIR/release/mtplx-lite) on the demo model
and sends each prompt of three classes (editing: rewrite a given code block with one change;
code: write new code; chat) once per mode per round, the modes taking turns, one request at a
time, each with `"mtplx": {"draft": MODE}`. Per class and mode it prints the decode tokens/s
(completion tokens after the first over the time after the first, from the server's own
records, summed over the class's requests), its ratio to plain, and the acceptance by draft position. At temperature 0 it checks
that every mode gave the plain text, and says so. With --llama-server, two llama-servers run
beside it on the same GGUF, one plain and one with its own speculation (`--spec-type`, n-gram
lookup by default), and take their turns in the same rounds; their rows use llama-server's own
timings (`predicted_per_second`, `draft_n`, `draft_n_accepted`). Only the standard library is
used.
"""

import argparse
import http.client
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from long_prompt_interference import MODEL, binary, wait_healthy  # noqa: E402

CODE = """def parse_config(path):
    config = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            key, value = line.split("=", 1)
            config[key.strip()] = value.strip()
    return config


def merge_configs(base, override):
    result = dict(base)
    for key, value in override.items():
        result[key] = value
    return result


def load_all(paths):
    merged = {}
    for path in paths:
        merged = merge_configs(merged, parse_config(path))
    return merged
"""

PROMPTS = {
    "editing": [
        "Rewrite this Python code with the function parse_config renamed to read_config everywhere. "
        "Reply with the whole code only.\n\n```python\n" + CODE + "```",
        "Rewrite this Python code with the variable name `merged` changed to `combined`. "
        "Reply with the whole code only.\n\n```python\n" + CODE + "```",
    ],
    "code": [
        "Write a Python function that returns the n-th Fibonacci number iteratively, with a docstring.",
        "Write a Rust function that reverses the words of a sentence.",
    ],
    "chat": [
        "What are three good habits for staying healthy? Answer in a short paragraph.",
        "Explain what a hash map is to a beginner.",
    ],
}


def post_chat(port, prompt, max_tokens, temperature, **extra):
    body = {
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": temperature,
        "seed": 7,
        **extra,
    }
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    c.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    v = json.loads(r.read())
    if r.status != 200:
        sys.exit(f"request to port {port} failed: {r.status} {v}")
    return v


def ask(port, prompt, mode, max_tokens, temperature):
    v = post_chat(port, prompt, max_tokens, temperature, mtplx={"draft": mode})
    return v["id"], v["choices"][0]["message"]["content"]


def ask_llama(port, prompt, max_tokens, temperature):
    v = post_chat(port, prompt, max_tokens, temperature)
    t = v.get("timings", {})
    rec = {
        "decode_tok_s": t.get("predicted_per_second", 0.0),
        "decode_tokens": t.get("predicted_n", 0),
        "decode_s": t.get("predicted_ms", 0.0) / 1e3,
        "drafted_tokens": t.get("draft_n", 0),
        "accepted_tokens": t.get("draft_n_accepted", 0),
        "verify_calls": 0,
    }
    return rec, v["choices"][0]["message"]["content"]


def start_llama(path, port, threads, spec):
    args = [path, "-m", MODEL, "--port", str(port), "-t", str(threads), "-c", "4096", "--parallel", "1"]
    args += ["--spec-type", spec]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_healthy(port, proc)
    return proc


def records(port):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("GET", "/v1/mtplx/metrics")
    return {r["request_id"]: r for r in json.loads(c.getresponse().read())["history"]}


def decode_rate(rs):
    """Decode tokens over decode time, summed over a class's requests: its prompts differ in
    length and speed, so a median of per-request rates would jump between them."""
    tokens = seconds = 0.0
    for r in rs:
        if "decode_s" in r:  # llama-server's own timings
            tokens, seconds = tokens + r["decode_tokens"], seconds + r["decode_s"]
        elif r["decode_tok_s"] > 0:
            n = r["completion_tokens"] - 1  # the server's rate: tokens after the first
            tokens, seconds = tokens + n, seconds + n / r["decode_tok_s"]
    return tokens / seconds if seconds else 0.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=192)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--modes", default="none,ngram,auto")
    ap.add_argument("--server-args", default="--draft auto --depth auto")
    ap.add_argument("--port", type=int, default=8131)
    ap.add_argument("--llama-server", default=os.environ.get("LLAMA_SERVER"))
    ap.add_argument("--llama-spec", default="ngram-simple")
    a = ap.parse_args()
    modes = a.modes.split(",")
    llama_modes = ["llama:none", f"llama:{a.llama_spec}"] if a.llama_server else []
    args = [binary(), "--listen", f"127.0.0.1:{a.port}", "--threads", str(a.threads), "--model", MODEL]
    proc = subprocess.Popen(args + a.server_args.split(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    procs = [proc]
    llama_ports = {}
    try:
        wait_healthy(a.port, proc)
        for k, m in enumerate(llama_modes):
            llama_ports[m] = a.port + 1 + k
            procs.append(start_llama(a.llama_server, llama_ports[m], a.threads, m.split(":", 1)[1]))
        for prompts in PROMPTS.values():  # warm-up: first-touch costs stay out of the figures
            ask(a.port, prompts[0], "none", 8, a.temperature)
            for port in llama_ports.values():
                ask_llama(port, prompts[0], 8, a.temperature)
        ids = {(cls, m): [] for cls in PROMPTS for m in modes}
        llama_recs = {(cls, m): [] for cls in PROMPTS for m in llama_modes}
        texts = {}
        for _ in range(a.rounds):
            for cls, prompts in PROMPTS.items():
                for i, p in enumerate(prompts):
                    for m in modes:
                        rid, text = ask(a.port, p, m, a.max_tokens, a.temperature)
                        ids[(cls, m)].append(rid)
                        texts.setdefault((cls, i), {}).setdefault(m, set()).add(text)
                    for m in llama_modes:
                        rec, text = ask_llama(llama_ports[m], p, a.max_tokens, a.temperature)
                        llama_recs[(cls, m)].append(rec)
                        texts.setdefault(("llama", cls, i), {}).setdefault(m, set()).add(text)
        recs = records(a.port)
    finally:
        for p in procs:
            p.terminate()
            p.wait()
    print(f"threads {a.threads}, temperature {a.temperature}, server args: {a.server_args}")
    print(f"{'class':8} {'mode':18} {'decode tok/s':>12} {'vs plain':>9} {'accept':>7} {'tok/verify':>10}  accepted/drafted by position")
    for cls in PROMPTS:
        plain = None
        for m in modes + llama_modes:
            if m in llama_modes:
                rs = llama_recs[(cls, m)]
            else:
                rs = [recs[r] for r in ids[(cls, m)] if r in recs]
            rate = decode_rate(rs)
            plain = rate if m in ("none", "llama:none") else plain
            drafted = sum(r["drafted_tokens"] for r in rs)
            accepted = sum(r["accepted_tokens"] for r in rs)
            calls = sum(r["verify_calls"] for r in rs)
            acc = [0] * 8
            dr = [0] * 8
            for r in rs:
                for j, x in enumerate(r.get("accepted_by_depth", [])):
                    acc[j] += x
                for j, x in enumerate(r.get("drafted_by_depth", [])):
                    dr[j] += x
            by_pos = " ".join(f"{acc[j]}/{dr[j]}" for j in range(8) if dr[j])
            per_verify = (accepted + calls) / calls if calls else 0.0
            ratio = f"{rate / plain:.2f}x" if plain else "-"
            rate_acc = accepted / drafted if drafted else 0.0
            print(f"{cls:8} {m:18} {rate:12.1f} {ratio:>9} {rate_acc:7.2f} {per_verify:10.2f}  {by_pos}")
    if a.temperature == 0:
        ours = [v for k, v in texts.items() if k[0] != "llama"]
        same = all(len(set().union(*by_mode.values())) == 1 for by_mode in ours)
        print("temperature 0: every mode gave the plain text" if same else "temperature 0: TEXTS DIFFER between modes")
        theirs = [v for k, v in texts.items() if k[0] == "llama"]
        if theirs:
            same = all(len(set().union(*by_mode.values())) == 1 for by_mode in theirs)
            print("llama-server: speculation gave the plain text" if same else "llama-server: TEXTS DIFFER with speculation")


if __name__ == "__main__":
    main()
