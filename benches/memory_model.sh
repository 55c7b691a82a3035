#!/usr/bin/env bash
# Resident memory of the server on the demo model: after load, and after a 128-token
# completion, against the budget "model file size + KV cache + 64 MiB" (issue 3).
#   bash benches/memory_model.sh
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
kv=$(curl -s "http://$ADDR/v1/completions" -H 'Content-Type: application/json' \
  -d '{"prompt":"Once upon a time","max_tokens":128,"temperature":0}' |
  python3 -c "import json,sys; print(json.load(sys.stdin)['mtplx_stats']['session_postcommit_snapshot']['used_bytes'])")
after_gen=$(rss)
file=$(stat -c %s "$MODEL")
python3 - "$after_load" "$after_gen" "$file" "$kv" <<'PY'
import sys
load, gen, file, kv = map(int, sys.argv[1:])
mib = lambda b: b / 2**20
budget = file + kv + 64 * 2**20
print(f"model file {mib(file):.1f} MiB, KV cache {mib(kv):.1f} MiB")
print(f"RSS after load:        {mib(load):.1f} MiB (weights are mapped, only touched pages count)")
print(f"RSS after 128 tokens:  {mib(gen):.1f} MiB; budget file+KV+64 MiB = {mib(budget):.1f} MiB; ratio {gen / budget:.2f}")
PY
