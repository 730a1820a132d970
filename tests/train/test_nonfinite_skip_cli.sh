#!/usr/bin/env bash
# --on-nonfinite skip|abort and the loss-spike detector (issue 10; docs/operations.md
# "Non-finite steps"). A non-finite step is made with SHARDLM_FAULT=nan-grad:step=S:rank=R
# (rank R's loss and gradients of step S are NaN).
#  1. mpirun -np 2, NaN on rank 1 at step 3, --on-nonfinite skip, a checkpoint every step: the
#     run completes; both ranks' files (params, AdamW m, v after the 64-byte header) of step 3 equal
#     step 2's and step 4's differ; the step-3 manifest says optimizer step 2 (AdamW t did not
#     advance) and LR step 3; metrics.jsonl marks step 3 skipped; the log names step 3;
#  2. the same run killed before step 4 (kill fault) and resumed from its step-3 checkpoint
#     ends bitwise equal to run 1 (AdamW t and the skipped step survive a restart);
#  3. without --on-nonfinite (today's default, abort) the run stops at step 3 (exit 1);
#  4. --max-nonfinite-skips 1 with NaN at steps 2 and 3: exit 1 naming 2 steps in a row; with
#     --max-nonfinite-skips 0 the first one stops the run;
#  5. the loss-spike detector against a Python re-computation of the z-scores from the logged
#     losses (window 4, threshold 0.5): the flagged steps agree.
# Usage: test_nonfinite_skip_cli.sh MPIEXEC. Env (CTest): SHARDLM_BIN, SLM_SHARED_DIR, SLM_PYTHON.
. "$(dirname "$0")/../lib.sh"
set +e
MPIEXEC=${1:-$MPIEXEC}
export OMP_NUM_THREADS=1
unset SHARDLM_FAULT SHARDLM_ATTEMPT
slm_tiny_data "$W/data" 300 40000 || exit 1
slm_tiny_config "$W/config.json" vocab_size=300
TR=(train --data "$W/data" --model "$W/config.json" --batch 2 --seq 16 --steps 5 --threads 1
    --peak-gflops 10 --collective-timeout 120 --ckpt-every-steps 1 --ckpt-sync --log-every 1)
ck() { printf '%s/checkpoints/step_%08d' "$1" "$2"; }
same_files() { # same_files DIR_A DIR_B [SKIP]: every rank file identical after SKIP bytes
    local f n=0
    for f in "$1"/rank_*.bin; do
        [ -f "$f" ] && cmp -s -i "${3:-0}" "$f" "$2/${f##*/}" || return 1
        n=$((n + 1))
    done
    [ $n -gt 0 ]
}
# (a rank file is a 64-byte header naming its step, then params, m, v: docs/formats.md)

# --- 1.
SHARDLM_FAULT=nan-grad:step=3:rank=1 slm_mpirun 2 "$BIN" "${TR[@]}" --on-nonfinite skip \
    --out "$W/a" > "$W/a.log" 2>&1
check "skip run completes" 0 $?
has "the log names the skipped step" "$W/a.log" "step 3: non-finite loss .*update skipped on every rank"
if same_files "$(ck "$W/a" 2)" "$(ck "$W/a" 3)" 64 && ! same_files "$(ck "$W/a" 3)" "$(ck "$W/a" 4)" 64; then
    ok "step 3's rank files (params, m, v after the header) == step 2's bytes; step 4 moved on"
else
    bad "skipped step changed the state (or step 4 did not)"; ls -l "$(ck "$W/a" 2)" "$(ck "$W/a" 3)"
fi
m=$("$PY" -c 'import json,sys; m=json.load(open(sys.argv[1])); print(m["optimizer"]["step"], m["lr_schedule"]["step"])' "$(ck "$W/a" 3)/manifest.json")
[ "$m" = "2 3" ] && ok "step-3 manifest: optimizer step 2, LR step 3" || bad "step-3 manifest: optimizer / LR step $m"
has "metrics.jsonl marks step 3 skipped" "$W/a/metrics.jsonl" '"step":3,.*"skipped":true,"nonfinite_skips":1'
[ "$(grep -c '"skipped":true' "$W/a/metrics.jsonl")" = 1 ] && ok "only step 3 is marked skipped" || bad "skipped count"

# --- 2. killed before step 4, resumed
SHARDLM_FAULT=nan-grad:step=3:rank=1,kill:rank=0:step=4 slm_mpirun 2 "$BIN" "${TR[@]}" \
    --on-nonfinite skip --out "$W/b" > "$W/b.log" 2>&1
[ $? -ne 0 ] && [ -d "$(ck "$W/b" 3)" ] && ok "run killed before step 4 with step 3 committed" || bad "kill run"
SHARDLM_ATTEMPT=2 slm_mpirun 2 "$BIN" "${TR[@]}" --on-nonfinite skip --out "$W/b" --resume auto \
    > "$W/b2.log" 2>&1
check "resume after the skipped step" 0 $?
same_files "$(ck "$W/a" 5)" "$(ck "$W/b" 5)" && ok "resumed run's step 5 == uninterrupted skip run's, bitwise" ||
    { bad "resumed run differs"; tail -5 "$W/b2.log"; }

# --- 3. the default aborts
SHARDLM_FAULT=nan-grad:step=3:rank=1 slm_mpirun 2 "$BIN" "${TR[@]}" --out "$W/c" > "$W/c.log" 2>&1
check "default (abort): exit 1" 1 $?
has "default: names step 3" "$W/c.log" "step 3.*training loss is nan"

# --- 4. K in a row
SHARDLM_FAULT=nan-grad:step=2,nan-grad:step=3 "$BIN" "${TR[@]}" --on-nonfinite skip \
    --max-nonfinite-skips 1 --out "$W/d" > "$W/d.log" 2>&1
check "--max-nonfinite-skips 1, two in a row: exit 1" 1 $?
has "two in a row: message" "$W/d.log" "step 3: non-finite loss .* in 2 steps in a row, more than --max-nonfinite-skips 1"
SHARDLM_FAULT=nan-grad:step=2 "$BIN" "${TR[@]}" --on-nonfinite skip --max-nonfinite-skips 0 \
    --out "$W/e" > "$W/e.log" 2>&1
check "--max-nonfinite-skips 0: the first non-finite step stops the run" 1 $?

# --- 5. loss spikes against Python's z-scores
"$BIN" train --data "$W/data" --model "$W/config.json" --batch 2 --seq 16 --steps 40 --threads 1 \
    --peak-gflops 10 --lr 3e-3 --loss-spike-window 8 --loss-spike-z 0.5 --out "$W/s" > "$W/s.log" 2>&1
check "spike run" 0 $?
"$PY" - "$W/s/metrics.jsonl" "$W/s.log" > "$W/s.cmp" 2>&1 <<'PYEOF'
import json, math, re, sys
steps = [json.loads(l) for l in open(sys.argv[1]) if '"event":"step"' in l]
loss = [s["loss"] for s in steps]
flag_trainer = {s["step"] for s in steps if "loss_spike_z" in s}
flag_log = {int(m) for m in re.findall(r"loss spike at step (\d+)", open(sys.argv[2]).read())}
w, z0, expect, unsure = 8, 0.5, set(), set()
for i in range(w, len(loss)):
    win = loss[i - w:i]
    mu = sum(win) / w
    sd = math.sqrt(sum((x - mu) ** 2 for x in win) / w)
    if sd == 0:
        continue
    z = (loss[i] - mu) / sd
    if abs(z - z0) < 1e-3:  # too close to the threshold for printed losses to decide
        unsure.add(steps[i]["step"])
    elif z > z0:
        expect.add(steps[i]["step"])
ok = flag_trainer - unsure == expect and flag_log == flag_trainer and len(expect) > 0
print("python", sorted(expect), "trainer", sorted(flag_trainer), "log", sorted(flag_log), "unsure", sorted(unsure))
sys.exit(0 if ok else 1)
PYEOF
[ $? -eq 0 ] && ok "loss spikes: trainer == Python z-scores ($(cat "$W/s.cmp"))" || { bad "loss spikes"; cat "$W/s.cmp"; }
slm_finish
