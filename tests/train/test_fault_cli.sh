#!/usr/bin/env bash
# Fault injection (SHARDLM_FAULT, src/train/fault.c; docs/operations.md "Fault injection"):
#  1. exit:rank=1:step=3 under mpirun -np 2: the job fails, rank 1 says it exits before step 3,
#     and metrics.jsonl (rank 0) holds steps 1 and 2 only;
#  2. the same with SHARDLM_ATTEMPT=2: the fault is off, the run completes all 4 steps; with
#     :always appended it fires on attempt 2 as well;
#  3. kill:rank=0:step=2 (one process): killed by SIGKILL (exit 137) after step 1;
#  4. corrupt-ckpt:step=2 with a checkpoint every step: `shardlm ckpt verify` (an independent
#     XXH64 check of the files) fails on step 2 naming its rank file and passes on steps 1, 3;
#  5. nan-grad:step=2: the default --on-nonfinite behaviour stops with the non-finite loss of
#     step 2;
#  6. a bad SHARDLM_FAULT / SHARDLM_ATTEMPT is a usage error (exit 2) naming the variable.
# Usage: test_fault_cli.sh MPIEXEC. Env (CTest): SHARDLM_BIN, SLM_SHARED_DIR.
. "$(dirname "$0")/../lib.sh"
set +e # the checks read the exit status of commands meant to fail
MPIEXEC=${1:-$MPIEXEC}
export OMP_NUM_THREADS=1
unset SHARDLM_FAULT SHARDLM_ATTEMPT
slm_tiny_data "$W/data" 300 40000 || exit 1
slm_tiny_config "$W/config.json" vocab_size=300
TR=(train --data "$W/data" --model "$W/config.json" --batch 2 --seq 16 --steps 4 --threads 1
    --peak-gflops 10 --collective-timeout 60 --log-every 1)
last_step() { sed -n 's/.*"event":"step","step":\([0-9]*\).*/\1/p' "$1/metrics.jsonl" | tail -1; }

# --- 1. exit:rank=1:step=3 on 2 ranks
SHARDLM_FAULT=exit:rank=1:step=3 slm_mpirun 2 "$BIN" "${TR[@]}" --out "$W/e1" > "$W/e1.log" 2>&1
rc=$?
if [ $rc -ne 0 ] && grep -q "rank 1/2.*exit:rank=1:step=3: exiting with status 1 before step 3" "$W/e1.log" &&
    [ "$(last_step "$W/e1")" = 2 ]; then
    ok "exit:rank=1:step=3: job failed (exit $rc) before step 3, 2 steps logged"
else
    bad "exit:rank=1:step=3: exit $rc, last step $(last_step "$W/e1")"; cat "$W/e1.log"
fi

# --- 2. SHARDLM_ATTEMPT=2 disables it; :always keeps it
SHARDLM_FAULT=exit:rank=1:step=3 SHARDLM_ATTEMPT=2 slm_mpirun 2 "$BIN" "${TR[@]}" --out "$W/e2" \
    > "$W/e2.log" 2>&1
rc=$?
if [ $rc -eq 0 ] && ! grep -q "exiting with status 1" "$W/e2.log" && [ "$(last_step "$W/e2")" = 4 ]; then
    ok "SHARDLM_ATTEMPT=2: the fault does not fire, 4 steps done"
else
    bad "SHARDLM_ATTEMPT=2: exit $rc, last step $(last_step "$W/e2")"; cat "$W/e2.log"
fi
SHARDLM_FAULT=exit:rank=0:step=2:always SHARDLM_ATTEMPT=2 "$BIN" "${TR[@]}" --out "$W/e3" \
    > "$W/e3.log" 2>&1
rc=$?
if [ $rc -eq 1 ] && grep -q "before step 2" "$W/e3.log" && [ "$(last_step "$W/e3")" = 1 ]; then
    ok ":always fires on attempt 2 (exit 1 before step 2)"
else
    bad ":always on attempt 2: exit $rc"; cat "$W/e3.log"
fi

# --- 3. kill
SHARDLM_FAULT=kill:rank=0:step=2 "$BIN" "${TR[@]}" --out "$W/k" > "$W/k.log" 2>&1
check "kill:rank=0:step=2: SIGKILL (128 + 9)" 137 $?
[ "$(last_step "$W/k")" = 1 ] && ok "kill: step 1 was logged, step 2 not" || bad "kill: last step $(last_step "$W/k")"

# --- 4. corrupt-ckpt
SHARDLM_FAULT=corrupt-ckpt:step=2 "$BIN" "${TR[@]}" --steps 3 --ckpt-every-steps 1 --ckpt-sync \
    --out "$W/c" > "$W/c.log" 2>&1
check "corrupt-ckpt run completes" 0 $?
has "corrupt-ckpt: warning names the file" "$W/c.log" "flipped byte [0-9]* of .*step_00000002/rank_00000.bin"
"$BIN" ckpt verify "$W/c/checkpoints/step_00000002" > "$W/v2.log" 2>&1
rc=$?
if [ $rc -ne 0 ] && grep -q "rank_00000.bin" "$W/v2.log"; then
    ok "ckpt verify: step 2 fails (exit $rc) naming rank_00000.bin"
else
    bad "ckpt verify of the corrupted step 2: exit $rc"; cat "$W/v2.log"
fi
"$BIN" ckpt verify "$W/c/checkpoints/step_00000001" > /dev/null 2>&1 &&
    "$BIN" ckpt verify "$W/c/checkpoints/step_00000003" > /dev/null 2>&1 &&
    ok "ckpt verify: steps 1 and 3 intact" || bad "ckpt verify: step 1 or 3 fails"

# --- 5. nan-grad under today's default
SHARDLM_FAULT=nan-grad:step=2 "$BIN" "${TR[@]}" --out "$W/n" > "$W/n.log" 2>&1
rc=$?
if [ $rc -eq 1 ] && grep -q "step 2, micro-batch 0: training loss is nan" "$W/n.log"; then
    ok "nan-grad:step=2: stops with the non-finite loss of step 2 (exit 1)"
else
    bad "nan-grad:step=2: exit $rc"; cat "$W/n.log"
fi

# --- 6. usage errors
SHARDLM_FAULT=kill:rank=1 "$BIN" "${TR[@]}" --out "$W/u" > "$W/u.log" 2>&1
check "bad SHARDLM_FAULT: usage error" 2 $?
has "bad SHARDLM_FAULT: message names the variable and the field" "$W/u.log" \
    'SHARDLM_FAULT item 1 "kill:rank=1": kill needs step='
SHARDLM_FAULT=kill:rank=1:step=2 SHARDLM_ATTEMPT=first "$BIN" "${TR[@]}" --out "$W/u" > "$W/u.log" 2>&1
check "bad SHARDLM_ATTEMPT: usage error" 2 $?
has "bad SHARDLM_ATTEMPT: message names it" "$W/u.log" 'SHARDLM_ATTEMPT "first"'
slm_finish
