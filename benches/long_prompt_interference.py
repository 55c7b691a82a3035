#!/usr/bin/env python3
"""What one long prompt costs the other users of a server: running streams' gaps between
tokens, and a short request's time to first token.

    python3 benches/long_prompt_interference.py [--threads 2] [--prompt-tokens 4000] [--runs 2]
        [--server-args "--max-batch-tokens 32"] [--llama-server PATH] [--no-stream]

Starts mtplx-lite ($MTPLX_BIN, else $CARGO_TARGET_DIR/release/mtplx-lite) on the demo model
(and, with --llama-server, llama-server --parallel 4 on the same GGUF, one after the other).
Per server and run:
- one client streams a long completion the whole time and records the gaps between chunks
  (`ignore_eos`: without it the demo model ended that story after 18 tokens, and each new
  completion's first token, not a gap, waited behind a whole chunk of the long prompt);
  (`--no-stream`: no such client, so that the prompt is prefilled in whole chunks);
- quiet phase: `--quiet-s` seconds of that stream alone;
- loaded phase: a second client sends a completion with a prompt of about `--prompt-tokens`
  tokens (max_tokens 1); 0.5 s later a third sends a short one, and again every 0.5 s after
  each answer, until the long prompt answered.
Printed: the stream's p50/p99/max gap in each phase and their loaded/quiet ratio, the long
prompt's time to its answer (its prefill), and the short requests' TTFT (the first one's, the
median and the largest). Only the standard library is used.
"""

import argparse
import http.client
import json
import os
import subprocess
import sys
import threading
import time

START_TIMEOUT_S = 180.0
MODEL = os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "mtplx-lite", "SmolLM2-135M-Instruct.Q4_1.gguf")


def binary():
    if os.environ.get("MTPLX_BIN"):
        return os.environ["MTPLX_BIN"]
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(os.path.dirname(__file__), "..", "target"))
    return os.path.join(target, "release", "mtplx-lite")


def wait_healthy(port, proc):
    deadline = time.time() + START_TIMEOUT_S
    while time.time() < deadline:
        if proc.poll() is not None:
            sys.exit("the server exited at start")
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.2)
    proc.kill()
    sys.exit("the server did not become healthy")


def start_ours(threads, extra, port):
    args = [binary(), "--listen", f"127.0.0.1:{port}", "--threads", str(threads), "--model", MODEL] + extra.split()
    p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_healthy(port, p)
    return p


def start_llama(path, threads, port):
    args = [path, "-m", MODEL, "--port", str(port), "-t", str(threads), "--parallel", "4", "-c", "32768", "--no-webui"]
    p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_healthy(port, p)
    return p


def long_text(approx_tokens):
    # About 16 tokens per sentence (demo tokenizer), varied so that no tokenizer merges it into a few tokens.
    words = ["river", "mountain", "library", "engine", "garden", "signal", "harbor", "pencil"]
    out, i = [], 0
    while len(out) * 16 < approx_tokens:
        out.append(f"Item {i} says the {words[i % 8]} near {words[(i * 3) % 8]} is number {i * 7}.")
        i += 1
    return " ".join(out)


def post(port, body, on_chunk=None):
    """Posts a completion; returns (seconds to first chunk, seconds to the end, usage)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    t0 = time.perf_counter()
    c.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    first, usage = None, None
    if body.get("stream"):
        for line in r:
            if not line.startswith(b"data: "):
                continue
            now = time.perf_counter()
            first = first if first is not None else now - t0
            if on_chunk:
                on_chunk(now)
            if line.strip() == b"data: [DONE]":
                break
    else:
        data = json.loads(r.read())
        usage = data.get("usage")
        first = time.perf_counter() - t0
    c.close()
    return first, time.perf_counter() - t0, usage


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def one_run(port, args):
    chunks, stop = [], threading.Event()

    def stream():
        while not stop.is_set():
            body = {"prompt": "Write a very long story about a lighthouse keeper.", "max_tokens": 4000, "stream": True, "temperature": 0.8, "seed": 1, "ignore_eos": True}
            post(port, body, on_chunk=lambda t: chunks.append(t))
            chunks.append(None)  # a new stream: no gap across it

    if not args.no_stream:
        threading.Thread(target=stream, daemon=True).start()
    time.sleep(1.0)
    q0 = time.perf_counter()
    time.sleep(args.quiet_s)
    q1 = time.perf_counter()
    result = {}

    def long_one():
        result["long"] = post(port, {"prompt": long_text(args.prompt_tokens), "max_tokens": 1, "temperature": 0})

    lt = threading.Thread(target=long_one)
    lt.start()
    result["shorts"] = []
    while True:
        time.sleep(0.5)
        result["shorts"].append(post(port, {"prompt": "Hi", "max_tokens": 2, "stream": True, "temperature": 0})[0])
        if not lt.is_alive():
            break
    lt.join()
    l1 = time.perf_counter()
    stop.set()

    def gaps(a, b):
        out, prev = [], None
        for t in chunks:
            if t is None:
                prev = None
                continue
            if prev is not None and a <= prev and t <= b:
                out.append(t - prev)
            prev = t
        return out

    return gaps(q0, q1), gaps(q1, l1), result


def report(name, runs):
    for i, (quiet, loaded, r) in enumerate(runs):
        qp50, qp99, lp50, lp99 = pct(quiet, 0.5), pct(quiet, 0.99), pct(loaded, 0.5), pct(loaded, 0.99)
        long_t, usage, shorts = r["long"][1], r["long"][2] or {}, r["shorts"]
        ttft = f"{shorts[0]:.3f} / {pct(shorts, 0.5):.3f} / {max(shorts):.3f}"
        gaps = (
            f"{qp50 * 1e3:.1f} / {qp99 * 1e3:.1f} | {lp50 * 1e3:.1f} / {lp99 * 1e3:.1f} / {max(loaded or [0]) * 1e3:.0f} | {lp99 / qp99:.2f}x"
            if quiet and loaded
            else "- | - | -"
        )
        print(f"| {name} | {i + 1} | {usage.get('prompt_tokens', '?')} | {long_t:.2f} | {ttft} ({len(shorts)}) | {gaps} |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt-tokens", type=int, default=4000)
    ap.add_argument("--quiet-s", type=float, default=5.0)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--server-args", default="")
    ap.add_argument("--llama-server", default=os.environ.get("LLAMA_SERVER"))
    ap.add_argument("--no-stream", action="store_true", help="no client streams beside the long prompt")
    args = ap.parse_args()
    servers = [("mtplx-lite", lambda: start_ours(args.threads, args.server_args, 18731))]
    if args.llama_server:
        servers.append(("llama-server", lambda: start_llama(args.llama_server, args.threads, 18732)))
    results = {name: [] for name, _ in servers}
    for _ in range(args.runs):  # alternate the servers, run by run
        for name, start in servers:
            p = start()
            try:
                port = 18731 if name == "mtplx-lite" else 18732
                results[name].append(one_run(port, args))
            finally:
                p.terminate()
                p.wait()
    print(f"threads {args.threads}; server args {args.server_args!r}")
    print("| server | run | prompt tokens | long prompt answered (s) | short TTFT first / median / max (s) (requests) | quiet gap p50 / p99 (ms) | loaded gap p50 / p99 / max (ms) | p99 loaded / quiet |")
    print("|---|---:|---:|---:|---:|---|---|---:|")
    for name, runs in results.items():
        report(name, runs)


if __name__ == "__main__":
    main()
