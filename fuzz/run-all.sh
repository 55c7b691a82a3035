#!/usr/bin/env bash
# Runs every fuzz target for DURATION seconds, two at a time, with AddressSanitizer, and appends
# one row per target (executions, crashes) to the log table at the end of fuzz/README.md.
#
#   fuzz/run-all.sh DURATION [--sanitizer none] [--jobs N] [--seeds-only] [--no-log] [TARGET...]
#
# --seeds-only  start from the committed seed-* files in a scratch directory instead of the local
#               corpus (the smoke: the same start on every machine, nothing left behind)
# --no-log      do not touch README.md
# Exit status: 0 if no target crashed, 1 otherwise. Crash inputs are kept in
# fuzz/artifacts/<target>/ (with --seeds-only too).
set -euo pipefail
cd "$(dirname "$0")"

usage() { sed -n '2,11s/^# \{0,1\}//p' "$0" >&2; exit 2; }
[[ $# -ge 1 && $1 =~ ^[0-9]+$ ]] || usage
duration=$1; shift
sanitizer=address jobs=2 seeds_only=0 log=1 targets=()
while [[ $# -gt 0 ]]; do
    case $1 in
        --sanitizer) sanitizer=$2; shift 2 ;;
        --jobs) jobs=$2; shift 2 ;;
        --seeds-only) seeds_only=1; shift ;;
        --no-log) log=0; shift ;;
        -*) usage ;;
        *) targets+=("$1"); shift ;;
    esac
done
[[ ${#targets[@]} -gt 0 ]] || mapfile -t targets < <(cargo fuzz list)

# One build for all targets, so that the time given to each is spent fuzzing.
build_start=$SECONDS
cargo fuzz build --sanitizer "$sanitizer"
echo "run-all: built ${#targets[@]} targets in $((SECONDS - build_start)) s (sanitizer $sanitizer)"

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

run_one() {
    local t=$1 corpus=corpus/$1 out=$scratch/$1.log
    mkdir -p "corpus/$t" "artifacts/$t"
    if [[ $seeds_only == 1 ]]; then
        corpus=$scratch/corpus-$t
        mkdir -p "$corpus"
        cp corpus/"$t"/seed-* "$corpus"/ 2>/dev/null || true
    fi
    local start=$SECONDS status=0
    cargo fuzz run --sanitizer "$sanitizer" "$t" "$corpus" -- \
        -max_total_time="$duration" -timeout=10 -print_final_stats=1 >"$out" 2>&1 || status=$?
    local execs
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$out" | tail -1)
    [[ -n $execs ]] || execs=$(grep -o '^#[0-9]*' "$out" | tail -1 | tr -d '#')
    local crash
    crash=$(grep -o 'artifacts/[^ ]*' "$out" | grep -E '/(crash|leak|timeout|oom|slow-unit)-' | tail -1 || true)
    echo "$t ${execs:-0} $((SECONDS - start)) $status ${crash:--}" >"$scratch/$t.result"
    if [[ $status != 0 ]]; then
        echo "run-all: $t FAILED (exit $status); last lines of its output:" >&2
        tail -25 "$out" >&2
    else
        echo "run-all: $t ${execs:-?} executions in $((SECONDS - start)) s"
    fi
}

for t in "${targets[@]}"; do
    while [[ $(jobs -rp | wc -l) -ge $jobs ]]; do wait -n || true; done
    run_one "$t" &
done
wait

# 1234567 -> 1,234,567
group() { sed ':a;s/\B[0-9]\{3\}\>/,&/;ta' <<<"$1"; }

failed=0 rows=""
when=$(date -u '+%Y-%m-%d %H:%M')
for t in "${targets[@]}"; do
    read -r _ execs secs status crash <"$scratch/$t.result"
    if [[ $status == 0 ]]; then
        crashes="0 / 0"
    else
        failed=1
        crashes="1 / 0: \`$crash\` (exit $status)"
    fi
    mode="run-all, $sanitizer"
    [[ $seeds_only == 1 ]] && mode="$mode, seeds only"
    rows+=$(printf '| %s | `%s` | %s | %s s | %s | %s |' "$when" "$t" \
        "$(group "$execs")" "$secs" "$crashes" "$mode")$'\n'
done
printf '%s' "$rows"
if [[ $log == 1 ]]; then
    printf '%s' "$rows" >>README.md
    echo "run-all: appended ${#targets[@]} rows to fuzz/README.md"
fi
exit $failed
