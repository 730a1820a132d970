#!/usr/bin/env bash
# Metrics overhead benchmark (issue 11; not a test): training tokens/s of the same run without
# metrics and with /metrics served (--metrics-addr 127.0.0.1:0) and scraped every second (curl),
# side by side: the two variants alternate, --reps times each, on synthetic tokens (no disk).
# Prints every run and the ratio of the medians (target: within 1%).
#
#   bench/bench_metrics.sh [--build build] [--reps 5] [--steps 300] [--model tiny]
#                          [--batch 4] [--seq 64] [--threads 1]
#
# tokens/s is the trainer's own figure (the "done:" line: tokens over the wall time of every
# step after the first). Run it on an idle machine: on a shared one the spread between runs
# of one variant exceeds the 1% being measured (the script prints that spread too). The CPU
# time of the training process (user + system, /usr/bin/time; the server's thread included,
# the scraper's curl processes not) is printed as well: both variants train the same tokens, so
# it compares the work done even when wall-clock rates are too noisy.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=build REPS=5 STEPS=300 MODEL=tiny BATCH=4 SEQ=64 THREADS=1
while [ $# -gt 0 ]; do
    case "$1" in
        --build) BUILD="$2"; shift 2 ;;
        --reps) REPS="$2"; shift 2 ;;
        --steps) STEPS="$2"; shift 2 ;;
        --model) MODEL="$2"; shift 2 ;;
        --batch) BATCH="$2"; shift 2 ;;
        --seq) SEQ="$2"; shift 2 ;;
        --threads) THREADS="$2"; shift 2 ;;
        *) echo "usage: $0 [--build DIR] [--reps N] [--steps N] [--model SPEC] [--batch B] [--seq T] [--threads N]" >&2; exit 2 ;;
    esac
done
BIN="$BUILD/shardlm"
W=$(mktemp -d "${TMPDIR:-/tmp}/bench_metrics.XXXXXX")
SCRAPER=""
cleanup() { [ -n "$SCRAPER" ] && kill "$SCRAPER" 2>/dev/null; rm -rf "$W"; }
trap cleanup EXIT
ARGS=(train --synthetic --model "$MODEL" --batch "$BATCH" --seq "$SEQ" --steps "$STEPS"
      --threads "$THREADS" --peak-gflops 100 --log-every 0)
tps() { grep -o '[0-9.]* tok/s' "$1" | tail -1 | cut -d' ' -f1; }

cpu() { awk '{printf "%.2f", $1 + $2}' "$W/time"; }
run_plain() {
    /usr/bin/time -f "%U %S" -o "$W/time" "$BIN" "${ARGS[@]}" > "$W/out" 2> "$W/err"
    echo "$(tps "$W/out") $(cpu)"
}
run_metrics() {
    /usr/bin/time -f "%U %S" -o "$W/time" "$BIN" "${ARGS[@]}" --metrics-addr 127.0.0.1:0 \
        > "$W/out" 2> "$W/err" &
    local pid=$! port="" n=0
    for _ in $(seq 200); do
        port=$(grep -o 'serving http://127.0.0.1:[0-9]*' "$W/err" 2>/dev/null | grep -o '[0-9]*$' || true)
        [ -n "$port" ] && break
        kill -0 $pid 2>/dev/null || break
        sleep 0.05
    done
    ( while kill -0 $pid 2>/dev/null; do
          curl -s -o /dev/null --max-time 5 "http://127.0.0.1:$port/metrics" && echo >> "$W/scrapes"
          sleep 1
      done ) &
    SCRAPER=$!
    : > "$W/scrapes"
    wait $pid
    wait "$SCRAPER" 2>/dev/null || true
    SCRAPER=""
    n=$(wc -l < "$W/scrapes")
    echo "$(tps "$W/out") $n $(cpu)"
}

echo "model $MODEL, batch $BATCH x seq $SEQ, $STEPS steps, $THREADS thread(s), $REPS reps each"
plain=() served=() cpa=() cpb=()
for r in $(seq "$REPS"); do
    read -r a ca < <(run_plain)
    read -r b n cb < <(run_metrics)
    plain+=("$a") served+=("$b") cpa+=("$ca") cpb+=("$cb")
    printf "rep %d: without metrics %8s tok/s, %6s CPU s | served + scraped every 1 s %8s tok/s, %6s CPU s (%d scrapes)\n" \
        "$r" "$a" "$ca" "$b" "$cb" "$n"
done
python3 - "${plain[*]}" "${served[*]}" "${cpa[*]}" "${cpb[*]}" <<'PY'
import statistics, sys
a, b, ca, cb = ([float(x) for x in v.split()] for v in sys.argv[1:5])
ma, mb = statistics.median(a), statistics.median(b)
spread = lambda v: (max(v) - min(v)) / statistics.median(v) * 100
print(f"median without {ma:.0f} tok/s, with metrics {mb:.0f} tok/s: ratio {mb / ma:.4f} "
      f"({(mb / ma - 1) * 100:+.2f}%); run-to-run spread without {spread(a):.1f}%, with {spread(b):.1f}%")
mca, mcb = statistics.median(ca), statistics.median(cb)
print(f"median CPU time without {mca:.2f} s, with metrics {mcb:.2f} s: ratio {mcb / mca:.4f} "
      f"({(mcb / mca - 1) * 100:+.2f}%)")
PY
