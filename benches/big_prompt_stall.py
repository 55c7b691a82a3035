#!/usr/bin/env python3
"""What one client sending 4 MB prompts costs everyone else.

    python3 benches/big_prompt_stall.py [--threads 2] [--seconds 10] [--mb 4]

Starts mtplx-lite ($MTPLX_BIN, else $CARGO_TARGET_DIR/release/mtplx-lite) on the demo model and,
for `--seconds` each, alternating quiet and loaded phases (twice), measures:
- the latency of `GET /health` from a second client (p50, p99, max);
- the largest gap between two streamed chunks of a third client's long completion;
- the server's peak resident memory (VmHWM).
In the loaded phases a first client posts chat requests with `--mb` MB of text in a loop (each
is refused with 400 `context_length_exceeded`). Reported side by side, with the loaded / quiet
ratios. Only the standard library is used.
"""

import argparse
import http.client
import json
import os
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


def big_loop(addr, stop, mb, counts):
    content = "lorem ipsum " * (mb * 1024 * 1024 // 12)
    body = json.dumps({"messages": [{"role": "user", "content": content}], "max_tokens": 1}).encode()
    while not stop.is_set():
        c = http.client.HTTPConnection(*addr, timeout=120)
        c.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
        r = c.getresponse()
        r.read()
        counts[r.status] = counts.get(r.status, 0) + 1
        c.close()


def phase(addr, seconds, loaded, mb):
    stop = threading.Event()
    lat, gaps, counts = [], [], {}
    ts = [threading.Thread(target=health_loop, args=(addr, stop, lat)), threading.Thread(target=stream_gaps, args=(addr, stop, gaps))]
    if loaded:
        ts.append(threading.Thread(target=big_loop, args=(addr, stop, mb, counts)))
    for t in ts:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in ts:
        t.join()
    return lat, gaps, counts


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--mb", type=int, default=4)
    a = ap.parse_args()
    p, addr = start(a.threads)
    try:
        rows = []
        for loaded in (False, True, False, True):
            lat, gaps, counts = phase(addr, a.seconds, loaded, a.mb)
            rows.append((loaded, lat, gaps, counts, vm_hwm_kib(p.pid)))
        print("| phase | /health p50 ms | p99 ms | max ms | stream gap p99 ms | max ms | 4 MB requests (status: n) | peak RSS MiB |")
        print("|---|---:|---:|---:|---:|---:|---|---:|")
        for loaded, lat, gaps, counts, hwm in rows:
            print(f"| {'loaded' if loaded else 'quiet'} | {pct(lat, .5)*1e3:.2f} | {pct(lat, .99)*1e3:.2f} | {max(lat)*1e3:.2f} | {pct(gaps, .99)*1e3:.1f} | {max(gaps)*1e3:.1f} | {counts} | {hwm/1024:.0f} |")
        q = [r for r in rows if not r[0]]
        l = [r for r in rows if r[0]]
        worst = lambda rs, i: max(max(r[i]) for r in rs)
        print(f"\nloaded / quiet: /health max {worst(l, 1) / worst(q, 1):.2f}x, stream gap max {worst(l, 2) / worst(q, 2):.2f}x")
    finally:
        p.kill()
        p.wait()


if __name__ == "__main__":
    main()
