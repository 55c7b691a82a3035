#!/usr/bin/env bash
# Resident memory of the server on the demo model: after load, and after SEQUENCES concurrent
# completions of about TOKENS tokens each (prompt and answer), against the budget
# "model file size + KV caches + 64 MiB" (issues 3 and 12). Peak (VmHWM) is reported too.
#   bash benches/memory_model.sh [SEQUENCES TOKENS]     (default: 1 sequence, 128 tokens)
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL="${MTPLX_DEMO_MODEL:-${XDG_CACHE_HOME:-$HOME/.cache}/mtplx-lite/SmolLM2-135M-Instruct.Q4_1.gguf}"
cargo build --release --quiet
BIN="${CARGO_TARGET_DIR:-target}/release/mtplx-lite"
out=$(mktemp)
"$BIN" --listen 127.0.0.1:0 --model "$MODEL" --threads 1 > "$out" 2>/dev/null &
PID=$!
trap 'kill $PID 2>/dev/null; rm -f "$out"' EXIT
for _ in $(seq 1 100); do grep -q listening "$out" && break; sleep 0.1; done
ADDR=$(sed -n 's/^listening on http:\/\///p' "$out")
rss() { awk '/^VmRSS/ {print $2 * 1024}' /proc/$PID/status; }
after_load=$(rss)
SEQS="${1:-1}" TOKENS="${2:-128}"
# Each sequence: a distinct prompt of about TOKENS - 64 tokens (about 18 per sentence), then 64
# generated; the KV figure is the most the caches held together, from the records.
kv=$(python3 - "$ADDR" "$SEQS" "$TOKENS" <<'PY'
import json, sys, threading, urllib.request
addr, seqs, tokens = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
gen = min(64, tokens // 2)
used = []
def one(i):
    words = " ".join(f"Line {j} of story {i} tells of a lighthouse keeper." for j in range(max(1, (tokens - gen) // 14)))
    body = json.dumps({"prompt": words if tokens > 128 else "Once upon a time", "max_tokens": gen if tokens > 128 else tokens, "temperature": 0}).encode()
    req = urllib.request.Request(f"http://{addr}/v1/completions", body, {"Content-Type": "application/json"})
    r = json.load(urllib.request.urlopen(req, timeout=600))
    used.append((r["usage"]["prompt_tokens"] + r["usage"]["completion_tokens"], r["mtplx_stats"]["session_postcommit_snapshot"]["used_bytes"]))
threads = [threading.Thread(target=one, args=(i,)) for i in range(seqs)]
[t.start() for t in threads]
[t.join() for t in threads]
print("sequences of", sorted(u[0] for u in used), "tokens", file=sys.stderr)
print(max(u[1] for u in used))
PY
)
after_gen=$(rss)
peak=$(awk '/^VmHWM/ {print $2 * 1024}' /proc/$PID/status)
file=$(stat -c %s "$MODEL")
python3 - "$after_load" "$after_gen" "$file" "$kv" "$peak" "$SEQS" <<'PY'
import sys
load, gen, file, kv, peak, seqs = map(int, sys.argv[1:])
mib = lambda b: b / 2**20
budget = file + kv + 64 * 2**20
print(f"model file {mib(file):.1f} MiB, KV cache {mib(kv):.1f} MiB")
print(f"RSS after load:        {mib(load):.1f} MiB (weights are mapped, only touched pages count)")
print(f"RSS after {seqs} sequence(s): {mib(gen):.1f} MiB, peak {mib(peak):.1f} MiB; budget file+KV+64 MiB = {mib(budget):.1f} MiB; ratio {gen / budget:.2f} (peak {peak / budget:.2f})")
PY
