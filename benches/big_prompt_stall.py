#!/usr/bin/env python3
"""What one client sending big prompts costs everyone else.

    python3 benches/big_prompt_stall.py [--threads 2] [--seconds 10] [--mb 4] [--kinds 4mb,digits,lorem]

Starts mtplx-lite ($MTPLX_BIN, else $CARGO_TARGET_DIR/release/mtplx-lite) on the demo model, a
fresh server per kind of big prompt, and for `--seconds` each, alternating quiet and loaded
phases (twice), measures:
- the latency of `GET /health` from a second client (p50, p99, max);
- the largest gap between two streamed chunks of a third client's long completion;
- the server's peak resident memory (VmHWM) after each phase.
In the loaded phases a first client posts chat requests (`max_tokens` 1) in a loop, of a kind:
- `4mb`: `--mb` MB of text, refused by its byte size before tokenizing;
- `digits`, `lorem`: the largest text of that kind that no bound refuses before tokenizing
  (at most the byte bound: the context times the most bytes one token can stand for, read off a
  refusal's message; less where the vocabulary bound refuses sooner), so that each one is
  tokenized, then refused for length; `digits` is a run of random digits (the tokenizer's worst
  case: a token per byte, no place to cut the text), `lorem` is words.
Reported side by side, with the loaded / quiet ratios. Only the standard library is used.
"""

import argparse
import http.client
import json
import os
import random
import re
import socket
import subprocess
import sys
import threading
import time

SERVER_START_TIMEOUT_S = 120.0


def binary():
    if os.environ.get("MTPLX_BIN"):
        return os.environ["MTPLX_BIN"]
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(os.path.dirname(__file__), "..", "target"))
    return os.path.join(target, "release", "mtplx-lite")


def start(threads):
    p = subprocess.Popen([binary(), "--listen", "127.0.0.1:0", "--threads", str(threads)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    deadline = time.time() + SERVER_START_TIMEOUT_S
    while time.time() < deadline:
        line = p.stdout.readline()
        if line.startswith("listening on http://"):
            host, port = line.strip().removeprefix("listening on http://").rsplit(":", 1)
            return p, (host, int(port))
        if not line and p.poll() is not None:
            break
    p.kill()
    sys.exit("mtplx-lite did not start")


def vm_hwm_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def health_loop(addr, stop, out):
    c = http.client.HTTPConnection(*addr, timeout=60)
    while not stop.is_set():
        t = time.perf_counter()
        c.request("GET", "/health")
        c.getresponse().read()
        out.append(time.perf_counter() - t)
        time.sleep(0.01)


def stream_gaps(addr, stop, out):
    while not stop.is_set():
        s = socket.create_connection(addr, timeout=60)
        body = json.dumps({"prompt": "1, 2, 3, 4, 5, 6, 7, 8, 9, 10,", "max_tokens": 400, "temperature": 0, "stream": True})
        s.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: b\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n{body}".encode())
        f = s.makefile("rb")
        last = None
        for line in f:
            if stop.is_set():
                break
            if line.startswith(b"data: "):
                now = time.perf_counter()
                if last is not None:
                    out.append(now - last)
                last = now
        s.close()


def chat_body(content, max_tokens=1):
    return json.dumps({"messages": [{"role": "user", "content": content}], "max_tokens": max_tokens}).encode()


def post(addr, body):
    c = http.client.HTTPConnection(*addr, timeout=120)
    c.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    text = r.read()
    c.close()
    return r.status, text


def refused_by_bound(addr, content, ctx):
    # `max_tokens` of the whole context: a probe that passes the bounds is tokenized, then
    # refused for length, never admitted (a prefill of thousands of tokens, and its KV cache).
    status, text = post(addr, chat_body(content, ctx))
    return status == 400 and b"bytes of text" in text


def byte_bound(addr):
    """The context times the most bytes a token stands for: the longest text the byte bound passes."""
    c = http.client.HTTPConnection(*addr, timeout=60)
    c.request("GET", "/v1/models")
    ctx = json.loads(c.getresponse().read())["data"][0]["context_length"]
    probe = 1_000_000
    status, text = post(addr, chat_body("a" * probe))
    m = re.search(r"at least (\d+) tokens", json.loads(text)["error"]["message"])
    if status != 400 or not m:
        sys.exit(f"a {probe}-byte prompt was not refused by its size: {status} {text[:200]}")
    least = int(m.group(1))
    # The bound is ceil(bytes / per); the largest `per` that gives `least` is the server's.
    per = max(p for p in range(1, probe + 1) if -(-probe // p) == least) if least > 1 else probe
    return ctx, ctx * per


def largest_tokenized(addr, make):
    """The longest `make(n)` that no bound refuses before tokenizing (binary search; each probe
    the bounds refuse is cheap)."""
    ctx, hi = byte_bound(addr)
    if not refused_by_bound(addr, make(hi), ctx):
        return make(hi)
    lo = ctx  # a text of no more bytes than the context cannot be refused by a bound
    while hi - lo > max(16, lo // 200):
        mid = (lo + hi) // 2
        if refused_by_bound(addr, make(mid), ctx):
            hi = mid
        else:
            lo = mid
    return make(lo)


def content_of(kind, mb, addr):
    if kind == "4mb":
        # Just under the body limit (`--max-body-bytes`, 4 MiB), with room for the JSON around it.
        return "lorem ipsum " * ((mb * 1024 * 1024 - 1024) // 12)
    if kind == "digits":
        rng = random.Random(7)
        run = "".join(rng.choice("0123456789") for _ in range(8 << 20))
        return largest_tokenized(addr, lambda n: run[:n])
    return largest_tokenized(addr, lambda n: ("lorem ipsum " * (n // 12 + 1))[:n])


def big_loop(addr, stop, body, counts):
    while not stop.is_set():
        c = http.client.HTTPConnection(*addr, timeout=120)
        c.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
        r = c.getresponse()
        r.read()
        counts[r.status] = counts.get(r.status, 0) + 1
        c.close()


def phase(addr, seconds, loaded, body):
    stop = threading.Event()
    lat, gaps, counts = [], [], {}
    ts = [threading.Thread(target=health_loop, args=(addr, stop, lat)), threading.Thread(target=stream_gaps, args=(addr, stop, gaps))]
    if loaded:
        ts.append(threading.Thread(target=big_loop, args=(addr, stop, body, counts)))
    for t in ts:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in ts:
        t.join()
    return lat, gaps, counts


def run_kind(kind, a):
    p, addr = start(a.threads)
    try:
        hwm_start = vm_hwm_kib(p.pid)
        content = content_of(kind, a.mb, addr)
        body = chat_body(content)
        hwm_probed = vm_hwm_kib(p.pid)
        t = time.perf_counter()
        status, text = post(addr, body)
        took = time.perf_counter() - t
        print(f"\n{kind}: {len(content.encode())} bytes of text; alone: {status} in {took:.2f} s, {text[:160]!r}", flush=True)
        print(f"peak RSS: {hwm_start/1024:.0f} MiB at start, {hwm_probed/1024:.0f} MiB after the probes that sized the text, {vm_hwm_kib(p.pid)/1024:.0f} MiB after one request", flush=True)
        rows = []
        for loaded in (False, True, False, True):
            lat, gaps, counts = phase(addr, a.seconds, loaded, body)
            rows.append((loaded, lat, gaps, counts, vm_hwm_kib(p.pid)))
        print("| phase | /health p50 ms | p99 ms | max ms | stream gap p99 ms | max ms | big requests (status: n) | peak RSS MiB after |")
        print("|---|---:|---:|---:|---:|---:|---|---:|")
        for loaded, lat, gaps, counts, hwm in rows:
            print(f"| {kind if loaded else 'quiet'} | {pct(lat, .5)*1e3:.2f} | {pct(lat, .99)*1e3:.2f} | {max(lat)*1e3:.2f} | {pct(gaps, .99)*1e3:.1f} | {max(gaps)*1e3:.1f} | {counts} | {hwm/1024:.0f} |")
        q = [r for r in rows if not r[0]]
        l = [r for r in rows if r[0]]
        worst = lambda rs, i: max(max(r[i]) for r in rs)
        print(f"\n{kind} loaded / quiet: /health max {worst(l, 1) / worst(q, 1):.2f}x, stream gap max {worst(l, 2) / worst(q, 2):.2f}x; peak RSS {hwm_start/1024:.0f} MiB at start, {rows[-1][4]/1024:.0f} MiB at the end", flush=True)
    finally:
        p.kill()
        p.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--mb", type=int, default=4)
    ap.add_argument("--kinds", default="4mb,digits,lorem")
    a = ap.parse_args()
    for kind in a.kinds.split(","):
        if kind not in ("4mb", "digits", "lorem"):
            sys.exit(f"unknown kind {kind!r}: 4mb, digits or lorem")
        run_kind(kind, a)


if __name__ == "__main__":
    main()
