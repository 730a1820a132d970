#!/usr/bin/env bash
# --heartbeat-dir failures never hide the run's own error (docs/operations.md "Heartbeat"):
#  1. the directory removed mid-run (the process stops itself before step 2, SHARDLM_FAULT
#     stop, the test removes the directory and continues it), then step 2's loss is NaN
#     (nan-grad; --on-nonfinite abort): exit 1 with the NaN error (before: the message of the
#     failed final heartbeat write replaced it), the heartbeat failure only a warning;
#  2. --heartbeat-dir naming a file: exit 1 naming the directory problem, not a later write.
# Env (CTest): SHARDLM_BIN, SLM_SHARED_DIR.
. "$(dirname "$0")/../lib.sh"
set +e
export OMP_NUM_THREADS=1
unset SHARDLM_FAULT SHARDLM_ATTEMPT
slm_tiny_data "$W/data" 300 40000 || exit 1
slm_tiny_config "$W/config.json" vocab_size=300
TR=(train --data "$W/data" --model "$W/config.json" --batch 2 --seq 16 --steps 4 --threads 1
    --peak-gflops 10)

SHARDLM_FAULT=stop:rank=0:step=2,nan-grad:step=2 "$BIN" "${TR[@]}" --out "$W/a" --heartbeat-dir "$W/hb" \
    > "$W/a.log" 2>&1 &
P=$!
slm_on_exit "kill -CONT $P; kill -KILL $P"
t0=$SECONDS
until [ "$(ps -o stat= -p $P | cut -c1)" = T ] || [ $((SECONDS - t0)) -gt 120 ]; do sleep 0.1; done
[ -f "$W/hb/rank_00000.json" ] && ok "stopped before step 2, the start record written" || bad "no start record"
rm -rf "$W/hb"
kill -CONT $P
wait $P
check "the run fails" 1 $?
has "with its own error (the NaN loss)" "$W/a.log" "shardlm error: train: step 2, micro-batch 0: training loss is nan"
has "the heartbeat failure is a warning" "$W/a.log" "warning: --heartbeat-dir: .*(the final heartbeat record, phase error)"
! grep -q "error: train: --heartbeat-dir" "$W/a.log" && ok "not the error" || bad "the heartbeat write is the error"

echo x > "$W/file"
"$BIN" "${TR[@]}" --out "$W/b" --heartbeat-dir "$W/file" > "$W/b.log" 2>&1
check "--heartbeat-dir naming a file" 1 $?
has "the error names it" "$W/b.log" "error: train: heartbeat: $W/file: exists and is not a directory"
slm_finish
