#!/usr/bin/env bash
# Prefill and decode tokens/s on the demo model, mtplx-lite side by side with llama.cpp's
# llama-bench on the same GGUF and thread counts, in one run; prints the ratios.
#
#   LLAMA_BENCH=/path/to/llama-bench bash benches/decode_vs_llama_cpp.sh
#
# llama-bench comes from the llama.cpp sources vendored in the PyPI sdist of llama-cpp-python:
#   pip download --no-deps --no-binary llama-cpp-python llama-cpp-python==0.3.36 && tar xzf llama_cpp_python-0.3.36.tar.gz
#   cmake -S llama_cpp_python-0.3.36/vendor/llama.cpp -B build -DLLAMA_CURL=OFF && cmake --build build --target llama-bench -j2
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL="${MTPLX_DEMO_MODEL:-${XDG_CACHE_HOME:-$HOME/.cache}/mtplx-lite/SmolLM2-135M-Instruct.Q4_1.gguf}"
LLAMA_BENCH="${LLAMA_BENCH:?set LLAMA_BENCH to a llama-bench binary}"
THREADS="${THREADS:-$(nproc)}"
cargo build --release --quiet
BIN="${CARGO_TARGET_DIR:-target}/release/mtplx-lite"
out=$(mktemp -d)
for t in 1 "$THREADS"; do
  "$LLAMA_BENCH" -m "$MODEL" -t "$t" -p 512 -n 128 -r 3 -o csv > "$out/llama-$t.csv" 2>/dev/null
  "$BIN" --model "$MODEL" --threads "$t" bench --prompt 512 --generate 128 --sequences 4 > "$out/ours-$t.md"
done
python3 - "$out" "$THREADS" <<'PY'
import csv, sys, re
out, threads = sys.argv[1], sys.argv[2]
print("| threads | test | llama.cpp t/s | mtplx-lite t/s | ratio |")
print("|---:|---|---:|---:|---:|")
for t in sorted({"1", threads}, key=int):
    ref = {}
    for row in csv.DictReader(open(f"{out}/llama-{t}.csv")):
        test = f"pp{row['n_prompt']}" if int(row["n_prompt"]) > 0 else f"tg{row['n_gen']}"
        ref[test] = float(row["avg_ts"])
    ours = {}
    for line in open(f"{out}/ours-{t}.md"):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[1] == t:
            ours[cells[2]] = float(cells[3])
    for test in ("pp512", "tg128"):
        if test in ref and test in ours:
            print(f"| {t} | {test} | {ref[test]:.1f} | {ours[test]:.1f} | {ours[test] / ref[test]:.2f}x |")
    agg = [v for k, v in ours.items() if "x4" in k]
    if agg and "tg128" in ours:
        print(f"| {t} | 4 sequences aggregate vs 1 stream (ours) | | {agg[0]:.1f} | {agg[0] / ours['tg128']:.2f}x |")
PY
