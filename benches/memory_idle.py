#!/usr/bin/env python3
"""Resident memory (VmRSS) of an idle mtplx-lite server, and with many idle keep-alive
connections open on it.

    python3 benches/memory_idle.py [--connections 1000]

Steps: start the server on the demo model; RSS once healthy; RSS after one short chat (the
decode path and a KV cache touched); RSS with N connections that each completed one
`GET /health` and stay open (keep-alive, well inside the server's 60 s idle timeout); RSS after
they are closed. The binary is $MTPLX_BIN, else $CARGO_TARGET_DIR/release/mtplx-lite.
"""

import argparse
import http.client
import json
import os
import socket
import subprocess
import sys
import time

SERVER_START_TIMEOUT_S = 120.0  # model load on a busy machine
SETTLE_S = 1.0  # let the server finish bookkeeping before reading RSS
IO_TIMEOUT_S = 30.0  # one socket operation


def status_kib(pid):
    """VmRSS, RssAnon (heap: KV caches, buffers) and RssFile (mapped weights, binary), in KiB."""
    want = {"VmRSS:": 0, "RssAnon:": 1, "RssFile:": 2}
    out = [0, 0, 0]
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key = line.split(":")[0] + ":"
            if key in want:
                out[want[key]] = int(line.split()[1])
    return tuple(out)


def open_fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def read_response(sock):
    """Reads one HTTP/1.1 response with a Content-Length body; returns the status code."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(4096)
        if not chunk:
            raise RuntimeError("connection closed before the response headers")
        buf += chunk
    head, _, body = buf.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(body) < length:
        chunk = sock.recv(4096)
        if not chunk:
            raise RuntimeError("connection closed inside the response body")
        body += chunk
    return int(head.split(b" ", 2)[1])


def health_on(sock):
    sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    return read_response(sock)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    default_bin = os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(here, "..", "target")), "release", "mtplx-lite")
    default_model = os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "mtplx-lite",
                                 "SmolLM2-135M-Instruct.Q4_1.gguf")
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=os.environ.get("MTPLX_DEMO_MODEL", default_model))
    ap.add_argument("--mtplx-bin", default=os.environ.get("MTPLX_BIN", default_bin))
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--connections", type=int, default=1000)
    args = ap.parse_args()

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # Room for the benchmark's connections plus the probes.
    max_conn = max(1024, args.connections + 16)
    proc = subprocess.Popen([args.mtplx_bin, "--listen", f"127.0.0.1:{port}", "--model", args.model, "--threads",
                             str(args.threads), "--max-connections", str(max_conn)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    socks = []
    try:
        deadline = time.monotonic() + SERVER_START_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"server exited with {proc.returncode}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
                    if health_on(s) == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("server not healthy in time")
            time.sleep(0.2)
        time.sleep(SETTLE_S)
        rows = [("idle, model loaded", status_kib(proc.pid), open_fds(proc.pid))]

        c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        c.request("POST", "/v1/chat/completions", body=json.dumps({"messages": [{"role": "user", "content": "Hi"}],
                  "max_tokens": 16, "temperature": 0}), headers={"Content-Type": "application/json"})
        r = c.getresponse()
        r.read()
        c.close()
        if r.status != 200:
            raise RuntimeError(f"chat answered {r.status}")
        time.sleep(SETTLE_S)
        rows.append(("idle, after one 16-token chat", status_kib(proc.pid), open_fds(proc.pid)))

        t = time.monotonic()
        for _ in range(args.connections):
            s = socket.create_connection(("127.0.0.1", port), timeout=IO_TIMEOUT_S)
            if health_on(s) != 200:
                raise RuntimeError("health on a keep-alive connection failed")
            socks.append(s)
        opened_in = time.monotonic() - t
        time.sleep(SETTLE_S)
        rss_open = status_kib(proc.pid)
        rows.append((f"{args.connections} idle keep-alive connections", rss_open, open_fds(proc.pid)))
        # Every connection must still be alive and served, or the number above means nothing.
        alive = sum(1 for s in socks if health_on(s) == 200)
        if alive != len(socks):
            raise RuntimeError(f"only {alive} of {len(socks)} connections still served")

        for s in socks:
            s.close()
        socks.clear()
        time.sleep(2 * SETTLE_S)
        rows.append(("after closing them", status_kib(proc.pid), open_fds(proc.pid)))
    finally:
        for s in socks:
            s.close()
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    with open("/proc/loadavg") as f:
        load = " ".join(f.read().split()[:3])
    print(f"memory_idle: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.path.basename(args.model)}, "
          f"threads {args.threads}, load average {load}")
    print()
    print("| state | VmRSS MiB | RssAnon MiB | RssFile MiB | open fds |")
    print("|---|---:|---:|---:|---:|")
    for name, (rss, anon, file), fds in rows:
        print(f"| {name} | {rss / 1024:.1f} | {anon / 1024:.1f} | {file / 1024:.1f} | {fds} |")
    extra = rss_open[0] - rows[1][1][0]
    print()
    print(f"{args.connections} connections opened in {opened_in:.2f} s, all {alive} still served afterwards; "
          f"cost {extra / 1024:.1f} MiB, {extra * 1024 / args.connections / 1024:.1f} KiB per idle connection")


if __name__ == "__main__":
    sys.exit(main())

# ---------------------------------------------------------------------------------------------
# Measured 2026-11-29 20:48 UTC, shared 2-core dev box, default settings:
#
# memory_idle: 2026-11-29 20:48 UTC, SmolLM2-135M-Instruct.Q4_1.gguf, threads 2, load average 1.34 1.62 2.46
#
# | state | VmRSS MiB | RssAnon MiB | RssFile MiB | open fds |
# |---|---:|---:|---:|---:|
# | idle, model loaded | 34.0 | 20.7 | 13.3 | 11 |
# | idle, after one 16-token chat | 125.8 | 24.2 | 101.6 | 11 |
# | 1000 idle keep-alive connections | 141.5 | 39.8 | 101.6 | 1011 |
# | after closing them | 141.5 | 39.8 | 101.6 | 11 |
#
# 1000 connections opened in 0.20 s, all 1000 still served afterwards; cost 15.7 MiB, 16.0 KiB per idle connection
#
# The weights are mmapped and paged in on first use (RssFile 13 -> 102 MiB, the GGUF is 94 MiB). 16 KiB
# per idle connection is the HTTP read buffer (src/http/io.rs READ_CHUNK); after the connections close
# the allocator keeps the pages (RSS does not go back down), no fds leak.
