#!/usr/bin/env bash
# The GPU backend's figures on a machine with a GPU and no network, against the CPU backend on
# the same machine in the same run, printed as one table. It needs only a release binary built
# elsewhere (BIN, default target/release/mtplx-lite): the models are generated here by
# `mtplx-lite synth` (random weights in a real model's shape), since only a small tree can be
# carried to such a machine.
#
#   bash benches/gpu_device.sh                       # 1b q4_k, 7b q4_k, 7b q8_0
#   MODELS="tiny:q4_k" bash benches/gpu_device.sh    # a quick check (lavapipe: minutes)
#
# Per model: prefill (pp, PROMPT tokens) and decode (tg, GENERATE tokens) tokens/s on each
# backend; on the GPU also the decode's weight traffic as a fraction of the bandwidth a copy
# kernel measures in the same run, a 2-, 4- and 8-row pass against a 1-row pass (what a
# speculative verify or a batch costs), and the dispatches, submits and bytes read back per
# decoded token. The CPU runs shorter (CPU_PROMPT, CPU_GENERATE): it is the reference, not the
# subject.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="${BIN:-target/release/mtplx-lite}"
MODELS="${MODELS:-1b:q4_k 7b:q4_k 7b:q8_0}"
PROMPT="${PROMPT:-512}"
GENERATE="${GENERATE:-128}"
CPU_PROMPT="${CPU_PROMPT:-64}"
CPU_GENERATE="${CPU_GENERATE:-16}"
ROWS="${ROWS:-1,2,4,8}"
WORK="${WORK:-$(mktemp -d)}"
[ -x "$BIN" ] || { echo "no binary at $BIN (build with cargo build --release, or set BIN)" >&2; exit 1; }
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
# The value of a bench table row: `| model | threads | TEST | VALUE |`.
cell() { awk -F'|' -v t="$2" '$4 ~ "^ *"t" *$" { gsub(/ /, "", $5); print $5; exit }' "$1"; }
rows=()
for m in $MODELS; do
  shape="${m%%:*}"; dtype="${m##*:}"
  model="$WORK/synthetic-$shape-$dtype.gguf"
  [ -f "$model" ] || "$BIN" synth --shape "$shape" --dtype "$dtype" --out "$model" >&2
  g="$WORK/gpu-$shape-$dtype.txt"; r="$WORK/rows-$shape-$dtype.txt"; c="$WORK/cpu-$shape-$dtype.txt"
  "$BIN" --backend gpu --model "$model" bench --prompt "$PROMPT" --generate "$GENERATE" --sequences 1 > "$g" 2>&1
  "$BIN" --backend gpu --model "$model" bench --rows "$ROWS" --reps 10 > "$r" 2>&1
  "$BIN" --backend cpu --model "$model" bench --prompt "$CPU_PROMPT" --generate "$CPU_GENERATE" --sequences 1 > "$c" 2>&1
  adapter=$(sed -n 's/^backend gpu: //p' "$g" | head -1)
  fraction=$(sed -n 's/.* GB\/s, \([0-9.]*\) of it/\1/p' "$g" | head -1)
  copy=$(sed -n 's/^bandwidth: copy kernel \([0-9.]*\) GB\/s.*/\1/p' "$g" | head -1)
  work=$(sed -n 's/^device work per decoded token: //p' "$g" | head -1)
  # The k-row ratios: `| model | threads | k | ms | RATIO | ...`.
  ratios=$(awk -F'|' '$4 ~ /^ *[0-9]+ *$/ && $4+0 > 1 { gsub(/ /, "", $4); gsub(/ /, "", $6); printf "%s%s rows %s", sep, $4, $6; sep=", " }' "$r")
  cpu_tg=$(awk -F'|' -v t="tg$CPU_GENERATE" '$4 ~ "^ *"t" *$" { gsub(/ /, "", $5); v=$5 } END { print v }' "$c")
  rows+=("| $shape $dtype | gpu | $(cell "$g" "pp$PROMPT") | $(cell "$g" "tg$GENERATE") | $fraction of $copy GB/s | $ratios | $work |")
  rows+=("| $shape $dtype | cpu | $(cell "$c" "pp$CPU_PROMPT") | $cpu_tg | | | |")
done
echo
echo "GPU: ${adapter:-none found}; models in $WORK"
echo
echo "| model | backend | pp t/s | tg t/s | decode's weight traffic / copy bandwidth | k-row pass vs 1 row | device work per decoded token |"
echo "| --- | --- | ---: | ---: | --- | --- | --- |"
printf '%s\n' "${rows[@]}"
