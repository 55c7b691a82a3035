#!/usr/bin/env python3
"""The CPU cost of HTTP + SSE per streamed token, read from the server's own threads.

    python3 benches/sse_cost.py [--threads 2] [--tokens 512] [--requests 4]

Starts mtplx-lite ($MTPLX_BIN, else $CARGO_TARGET_DIR/release/mtplx-lite) on the demo model,
streams `--requests` greedy chat completions one after the other, and reads each thread's
on-CPU time from /proc/PID/task/TID/schedstat (nanoseconds) before and after. Reported per
generated token: the I/O threads' CPU time (the executor running HTTP parsing, JSON encoding
and SSE writes: the main thread, mtplx-io-*, async-io and blocking-* helpers), the decode
thread's CPU time and the wall time. The ratio io / wall is what the HTTP layer could at most
take from decoding on a machine with no spare core; with a spare core it runs beside it.
Only the standard library is used.
"""

import argparse
import http.client
import json
import os
import socket
import subprocess
import sys
import time

SERVER_START_TIMEOUT_S = 120.0  # model load, fetching the demo model if missing
REQUEST_TIMEOUT_S = 300.0  # one streamed answer, socket inactivity bound
DECODE_THREADS = ("mtplx-decode", "mtplx-kernel")


def binary():
    if os.environ.get("MTPLX_BIN"):
        return os.environ["MTPLX_BIN"]
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(os.path.dirname(__file__), "..", "target"))
    return os.path.join(target, "release", "mtplx-lite")


def thread_cpu(pid):
    """{thread name: on-CPU nanoseconds} summed over threads of the same name prefix."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                name = f.read().strip()
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                ns = int(f.read().split()[0])
        except OSError:
            continue  # the thread ended between listdir and open
        key = name.rstrip("0123456789-")
        out[key] = out.get(key, 0) + ns
    return out


def stream_chat(port, prompt, max_tokens):
    body = json.dumps({
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens, "temperature": 0, "stream": True,
        "stream_options": {"include_usage": True},
    })
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=REQUEST_TIMEOUT_S)
    conn.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        sys.exit(f"chat failed: {resp.status} {resp.read()[:200]!r}")
    tokens = 0
    for line in resp:
        line = line.strip()
        if line.startswith(b"data: {"):
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
    conn.close()
    return tokens


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--requests", type=int, default=4)
    a = ap.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([binary(), "--listen", f"127.0.0.1:{port}", "--threads", str(a.threads)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + SERVER_START_TIMEOUT_S
        while b"listening" not in proc.stdout.readline():
            if time.time() > deadline or proc.poll() is not None:
                sys.exit("the server did not start")
        stream_chat(port, "Say hello.", 8)  # warm-up: page the weights in
        before, t0 = thread_cpu(proc.pid), time.perf_counter()
        tokens = sum(stream_chat(port, f"Write a long essay about topic number {i}.", a.tokens)
                     for i in range(a.requests))
        wall, after = time.perf_counter() - t0, thread_cpu(proc.pid)
    finally:
        proc.terminate()
        proc.wait()
    delta = {k: after.get(k, 0) - before.get(k, 0) for k in after}
    decode = sum(v for k, v in delta.items() if k.startswith(DECODE_THREADS))
    io = sum(v for k, v in delta.items() if not k.startswith(DECODE_THREADS + ("mtplx-signals",)))
    print(f"load average {os.getloadavg()[0]:.2f}; {a.requests} streamed chats, {tokens} tokens, "
          f"{a.threads} kernel thread(s), {tokens / wall:.1f} tok/s")
    print("per-thread CPU: " + ", ".join(f"{k} {v / 1e6:.1f} ms" for k, v in sorted(delta.items())))
    per = lambda ns: ns / tokens / 1e3
    print(f"per token: wall {wall / tokens * 1e6:.1f} us, decode threads CPU {per(decode):.1f} us, "
          f"I/O threads CPU {per(io):.2f} us")
    print(f"HTTP + SSE CPU per token / wall per token: {100 * io / 1e9 / wall:.2f}%")


if __name__ == "__main__":
    main()
