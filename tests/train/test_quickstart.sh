#!/usr/bin/env bash
# scripts/quickstart.sh (issue 9 item 8): the model is sized from the measured speed, and a rerun
# into the same --out works.
#  - On the issue's slow machine (AVX2-only, 2 cores, a quarter of the reference's 7400 tok/s on
#    the d256 model: 1024 / 1850 = 553 ms/step; the smaller rungs at the cost ratios measured
#    beside it, 0.70 and 0.40) the old model is not trained: its 13.5 min give 1.5M tokens, which
#    ended at ratio 0.669. A smaller rung whose prediction covers its need is planned instead.
#  - At the reference machine's speed (138 ms/step) the d256 model is kept.
#  - A machine too slow for every rung gets a warning naming the --minutes it would need.
#  - --minutes 0 / junk is a usage error (exit 2).
#  - Two real (tiny, seconds) runs into one --out: both succeed, each in its own run-* directory,
#    the first run's checkpoints are untouched, OUT/latest names the second.
#  - The timing runs take the median step time (a stand-in binary prints a loaded machine's steps).
# QUICKSTART_MS_PER_STEP replaces the timing runs, so the plans do not depend on this CPU.
# Env (CTest): SHARDLM_BIN, SLM_SHARED_DIR, SLM_SOURCE_DIR.
set -uo pipefail
BIN="${SHARDLM_BIN:?}"
QS="${SLM_SOURCE_DIR:?}/scripts/quickstart.sh"
CORPUS="${SLM_SHARED_DIR:?}/data/tinyshakespeare.txt"
W=$(mktemp -d /tmp/slm_qs.XXXXXX)
trap 'rm -rf "$W"' EXIT
fails=0
ok() { echo "[ ok ] $1"; }
bad() { echo "[FAIL] $1"; fails=$((fails + 1)); }
t() { if eval "$2"; then ok "$1"; else bad "$1"; tail -6 "${3:-/dev/null}"; fi; }
export SHARDLM="$BIN"

"$BIN" tokenizer train --input "$CORPUS" --vocab-size 512 --out "$W/tok.json" --quiet &&
"$BIN" prep --tokenizer "$W/tok.json" --input "$CORPUS" --out "$W/data" --val-fraction 0.02 \
    --quiet || { echo "[FAIL] dataset prep"; exit 1; }
plan() { # ms-list minutes log
    QUICKSTART_MS_PER_STEP="$1" "$QS" --data "$W/data" --out "$W/plan" --threads 1 \
        --minutes "$2" --plan > "$3" 2>&1
}

plan "553 387 221" 15 "$W/slow"; rc=$?
t "slow machine: plan exits 0" '[ $rc = 0 ]' "$W/slow"
t "slow machine: d256-L4 is short (1.5M tokens predicted)" \
  'grep -q "d256-L4 .*1.50M tokens.*short" "$W/slow"' "$W/slow"
t "slow machine: a smaller rung that fits is trained, no warning" \
  'grep -q "^   model d1[29][28]-L4" "$W/slow" && grep -q "fits" "$W/slow" && ! grep -q warning "$W/slow"' "$W/slow"

plan "138 97 55" 15 "$W/fast"; rc=$?
t "reference machine: d256-L4 fits and is trained" \
  '[ $rc = 0 ] && grep -q "d256-L4 .*fits" "$W/fast" && grep -q "^   model d256-L4" "$W/fast"' "$W/fast"

plan "9000 8000 7000" 15 "$W/tooslow"; rc=$?
t "too slow: smallest rung, warning names --minutes" \
  '[ $rc = 0 ] && grep -q "^   model d128-L4" "$W/tooslow" && grep -q "warning: .*--minutes [0-9]" "$W/tooslow"' "$W/tooslow"

for m in 0 x; do
    plan "553 387 221" "$m" "$W/bad"; rc=$?
    t "--minutes $m: usage error" '[ $rc = 2 ] && grep -q "minutes must be" "$W/bad"' "$W/bad"
done

# Two real runs into one --out (a few seconds of training each, the smallest rung).
run() { QUICKSTART_MS_PER_STEP="99999 99999 99999" "$QS" --data "$W/data" --out "$W/qs" \
            --threads 1 --minutes 0.04 > "$1" 2>&1; }
run "$W/run1"; rc=$?
t "first run succeeds and evaluates" '[ $rc = 0 ] && grep -q "^ratio " "$W/run1"' "$W/run1"
R1=$(ls -d "$W"/qs/run-* 2>/dev/null | head -1)
t "first run has its own run dir with a checkpoint" '[ -n "$R1" ] && [ -s "$R1/checkpoints/latest" ]'
sums() { [ -n "$1" ] && (cd "$1" && find checkpoints metrics.jsonl -type f | sort | xargs -r sha256sum); }
sum1=$(sums "$R1")
sleep 1
run "$W/run2"; rc=$?
t "rerun into the same --out succeeds" '[ $rc = 0 ] && grep -q "^ratio " "$W/run2"' "$W/run2"
n=$(ls -d "$W"/qs/run-* | wc -l)
t "rerun trained into a second run dir" '[ "$n" = 2 ]'
sum1b=$(sums "$R1")
t "first run's checkpoints and metrics untouched" '[ -n "$sum1" ] && [ "$sum1" = "$sum1b" ]'
R2=$(ls -d "$W"/qs/run-* 2>/dev/null | grep -v "^$R1\$")
t "OUT/latest names the second run" '[ -n "$R2" ] && [ "$(readlink "$W/qs/latest")" = "$(basename "$R2")" ]'

# The timing runs themselves (issue 20 item 15), through a stand-in binary that prints the step
# lines of a loaded machine: steps 1-3 slowed by other jobs (5000, 3000, 2500 ms), then 400 ms.
# The median of steps 2-9 is 400 ms/step; the old 4-step mean of steps 2-4 said 1967.
cat > "$W/fake" << 'FAKE'
#!/usr/bin/env bash
n=4
while [ $# -gt 0 ]; do [ "$1" = --steps ] && n=$2; shift; done
for ((i = 1; i <= n; i++)); do
    case $i in 1) ms=5000 ;; 2) ms=3000 ;; 3) ms=2500 ;; *) ms=400 ;; esac
    echo "step      $i/$n | loss 5.0000 | lr 1.000e-03 | grad norm 1.000 | 1000 tok/s | MFU 1.0% | $ms.0 ms/step"
done
FAKE
chmod +x "$W/fake"
SHARDLM="$W/fake" "$QS" --data "$W/data" --out "$W/plan" --threads 1 --minutes 15 --plan \
    > "$W/timed" 2>&1; rc=$?
t "timing: the median step time of a loaded machine (400 ms/step), not a slowed mean" \
  '[ $rc = 0 ] && grep -q "d256-L4 .*:   400 ms/step" "$W/timed"' "$W/timed"

[ $fails = 0 ] && echo "all passed" || { echo "$fails failed"; exit 1; }
