"""Continuous batching through the server: aggregate streamed tokens/s at 1 and N concurrent chat
clients against one mtplx-lite server, and the ratio of each level to one client (issue 12's
"4 sequences decoding together ... through the server with 4 streaming clients").

    python3 benches/streaming_clients.py [--levels 1,4] [--rounds 3] [--server-args "--draft none"]

Each round starts every client of a level at once; each streams a greedy chat answer of
--max-tokens tokens (a different prompt per client) and counts its content chunks. A round's
figure is all clients' chunks over the round's wall time; the levels take turns within each
round, and each level's median round is printed, with the rate of the decoding alone (the
chunks after each client's first, from the first first chunk to the last chunk: the prompts'
prefill left out, which a round of 128 tokens per client otherwise counts). The
server runs with --threads (default: every core) and --server-args (default "--draft none", so
that one stream is plain decoding, not speculation, and the ratio measures batching alone).
"""
import argparse
import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.request


def stream_one(addr, i, max_tokens, out):
    body = json.dumps({
        "model": "bench",
        "messages": [{"role": "user", "content": f"Tell me a long story about lighthouse keeper number {i}."}],
        "max_tokens": max_tokens, "temperature": 0, "stream": True,
    }).encode()
    req = urllib.request.Request(f"http://{addr}/v1/chat/completions", body, {"Content-Type": "application/json"})
    n, first, last = 0, None, None
    with urllib.request.urlopen(req, timeout=600) as r:
        for line in r:
            if line.startswith(b"data: {"):
                d = json.loads(line[6:])
                if d["choices"] and d["choices"][0].get("delta", {}).get("content"):
                    n += 1
                    last = time.time()
                    first = first or last
    out.append((n, first, last))


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(here, "..", "target"))
    cache = os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "mtplx-lite")
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=os.environ.get("MTPLX_BIN", os.path.join(target, "release", "mtplx-lite")))
    ap.add_argument("--model", default=os.environ.get("MTPLX_DEMO_MODEL", os.path.join(cache, "SmolLM2-135M-Instruct.Q4_1.gguf")))
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--levels", default="1,4", help="concurrent clients, comma-separated")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--server-args", default="--draft none")
    args = ap.parse_args()
    cmd = [args.bin, "--listen", "127.0.0.1:0", "--model", args.model, "--threads", str(args.threads)]
    server = subprocess.Popen(cmd + args.server_args.split(), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        addr = None
        for line in server.stdout:
            m = re.search(r"listening on http://(\S+)", line)
            if m:
                addr = m.group(1)
                break
        if addr is None:
            sys.exit(f"the server did not start: {' '.join(cmd)}")
        stream_one(addr, 0, args.max_tokens, [])  # warm-up: page in the weights
        print(f"# {os.getloadavg()[0]:.2f} load average at start; server: {' '.join(cmd[3:])} {args.server_args}")
        print("| clients | aggregate tok/s (median round) | rounds | vs 1 client | decoding alone: tok/s | vs 1 client |")
        print("|---:|---:|---|---:|---:|---:|")
        levels = [int(x) for x in args.levels.split(",")]
        # The levels take turns within each round, so that a neighbour's burst on a shared
        # machine slows them alike rather than one level's rounds.
        rates = {level: [] for level in levels}
        decode = {level: [] for level in levels}
        for r in range(args.rounds):
            for level in levels:
                out = []
                ts = [threading.Thread(target=stream_one, args=(addr, r * 1000 + i, args.max_tokens, out)) for i in range(level)]
                t = time.time()
                for x in ts:
                    x.start()
                for x in ts:
                    x.join()
                rates[level].append(sum(n for n, _, _ in out) / (time.time() - t))
                # The decoding alone: the tokens after each client's first, over the time from
                # the first first token to the last token (the prompts' prefill left out).
                got = [(n, a, b) for n, a, b in out if n > 0]
                span = max((b for _, _, b in got), default=0) - min((a for _, a, _ in got), default=0)
                decode[level].append(sum(n - 1 for n, _, _ in got) / span if span > 0 else 0.0)
        base = dbase = None
        for level in levels:
            med = sorted(rates[level])[len(rates[level]) // 2]
            dmed = sorted(decode[level])[len(decode[level]) // 2]
            base = base or (med if level == 1 else None)
            dbase = dbase or (dmed if level == 1 else None)
            ratio = f"{med / base:.2f}x" if base else ""
            dratio = f"{dmed / dbase:.2f}x" if dbase else ""
            print(f"| {level} | {med:.1f} | {', '.join(f'{x:.1f}' for x in rates[level])} | {ratio} | {dmed:.1f} | {dratio} |")
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
