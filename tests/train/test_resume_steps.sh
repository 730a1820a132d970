#!/usr/bin/env bash
# Resuming with another --steps re-stretches the cosine LR schedule (issue 20, item 17): allowed,
# but a warning names the old and new --steps and the LR at the resumed step under both; the
# figures are checked against the schedule's formula (warmup, then cosine to --min-lr, computed
# here) and against the LR the resumed run's first step used (metrics.jsonl). The same --steps
# warns nothing.
. "$(dirname "$0")/../lib.sh"
slm_tiny_data "$W/data" 300
slm_tiny_config "$W/m.json" vocab_size=300
T=(train --data "$W/data" --model "$W/m.json" --batch 2 --seq 16 --lr 1e-2 --min-lr 1e-4
   --warmup 2 --threads 2 --peak-gflops 10 --log-every 1 --out "$W/run")
"$BIN" "${T[@]}" --steps 4 > "$W/a.log" 2>&1 || { cat "$W/a.log"; bad "first run"; slm_finish; }
"$BIN" "${T[@]}" --steps 4 --resume auto > "$W/same.log" 2>&1
if grep -q "re-stretched" "$W/same.log"; then bad "same --steps: warned"; cat "$W/same.log"; else
    ok "same --steps: no warning"; fi
"$BIN" "${T[@]}" --steps 10 --resume auto > "$W/b.log" 2>&1 || { cat "$W/b.log"; bad "resume"; }
grep "re-stretched" "$W/b.log" || true
"$PY" - "$W/b.log" "$W/run/metrics.jsonl" <<'PY' && ok "warning: steps and LRs" || bad "warning: steps and LRs"
import json, math, re, sys
log = open(sys.argv[1]).read()
def lr_at(step, warmup, total, peak=1e-2, lo=1e-4):  # warmup, then cosine to lo; lo past total
    if step < warmup:
        return peak * (step + 1) / warmup
    if step >= total:
        return lo
    return lo + 0.5 * (1 + math.cos(math.pi * (step - warmup) / (total - warmup))) * (peak - lo)
m = re.search(r"warning: --steps 10 differs from the 4 steps checkpoint \S+ \(step 4\) was "
              r"scheduled for: the LR schedule is re-stretched to --steps 10; the LR at the "
              r"resumed step is (\S+) \((\S+) under --steps 4\), where that run's cosine had ended",
              log)
assert m, "no warning of the expected form"
now, was = float(m.group(1)), float(m.group(2))
print(f"  printed {now:.3e} / {was:.3e}, formula {lr_at(4, 2, 10):.3e} / {lr_at(4, 2, 4):.3e}")
assert abs(now - lr_at(4, 2, 10)) <= 5e-4 * now and abs(was - lr_at(4, 2, 4)) <= 5e-4 * was
steps = [j for j in map(json.loads, open(sys.argv[2])) if j.get("event") == "step"]
first = [j for j in steps if j["step"] == 5][-1]
print(f"  resumed step 5 used lr {first['lr']:.6e}")
assert abs(first["lr"] - now) <= 5e-4 * now
PY
slm_finish
