#!/usr/bin/env bash
# The training progress line under --max-minutes (issue 20, item 15): the share done is the
# further along of the steps (over --steps) and the time budget spent, so a run that the budget
# ends shows an ETA within the budget and ends at 100% (before: ETA and percentage against the
# step count, e.g. 49:21 for a 13.5-minute run that ended at 66%). Without a budget in reach the
# step count still rules. Figures are read from the plain progress lines (stderr not a terminal).
. "$(dirname "$0")/../lib.sh"
export SHARDLM_PROGRESS_AFTER=0
slm_tiny_data "$W/data" 300
slm_tiny_config "$W/m.json" vocab_size=300
T=(train --data "$W/data" --model "$W/m.json" --batch 2 --seq 16 --threads 1 --peak-gflops 10
   --log-every 0)
# 1. a budget of 6 s far below what --steps 1000000 would take; 2. a budget far beyond --steps
# 40: the step count rules, as without --max-minutes
"$BIN" "${T[@]}" --steps 1000000 --max-minutes 0.1 --out "$W/a" > /dev/null 2> "$W/a.err"
"$BIN" "${T[@]}" --steps 40 --max-minutes 600 --out "$W/b" > /dev/null 2> "$W/b.err"
rc=0
"$PY" - "$W/a.err" "$W/b.err" > "$W/check.txt" 2>&1 <<'PY' || rc=$?
import re, sys
def lines(path, total):
    pat = re.compile(rf"^train: (\d+)%, step (\d+)/{total}, \d+ tok/s, loss \d+\.\d{{4}}, "
                     r"ETA (\d+):(\d\d)$")
    text = open(path).read()
    got = [pat.match(l) for l in text.split("\n") if l.startswith("train: ")]
    assert got and all(got), text
    return [(int(m.group(1)), int(m.group(2)), 60 * int(m.group(3)) + int(m.group(4)))
            for m in got]
a = lines(sys.argv[1], 1000000)
pct, eta = [p for p, _, _ in a], [e for _, _, e in a]
print(f"  budget 6 s: percentages {pct}, ETAs {eta} s")
assert pct == sorted(pct) and pct[-1] == 100 and max(pct[:-1]) >= 80, pct
# ETA = (1 - share) / rate; with the budget ruling, the rate is one budget per run: within it
# (slack for the step in flight), where the step count would say hours
assert max(eta) <= 1.5 * 6 + 1, eta
print("budget ok")
b = lines(sys.argv[2], 40)
assert all(p == round(100 * s / 40) for p, s, _ in b) and b[-1][0] == 100, b
print("steps ok")
PY
cat "$W/check.txt"
grep -qx "budget ok" "$W/check.txt" && ok "budget-bound run: % and ETA follow the budget" ||
    bad "budget-bound progress"
grep -qx "steps ok" "$W/check.txt" && ok "step-bound run: % follows the steps" ||
    bad "step-bound progress"
[ "$rc" = 0 ] || bad "progress lines not as expected (exit $rc)"
slm_finish
