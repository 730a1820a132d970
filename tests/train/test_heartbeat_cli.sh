#!/usr/bin/env bash
# --heartbeat-dir (issue 10 contract, docs/operations.md "Heartbeat"): under mpirun -np 2 every
# rank keeps DIR/rank_RRRRR.json, read here with Python's json module (an independent parser):
#  1. a 2-step run: both files say phase "end", step 2, the rank, a live pid's host name
#     (= hostname), a time between the test's clock before and after the run, and the loss of
#     step 2 as metrics.jsonl has it;
#  2. the run resumed to step 4 with SHARDLM_FAULT=stop:rank=1:step=3 (rank 1 stops itself
#     before its first step): while it is stopped its file says phase "start", step 2 (the
#     start step) with the stopped process's pid, and rank 0's record is no older than step 2;
#     after SIGCONT the run finishes and both files say "end", step 4; no temporary file is left.
# Usage: test_heartbeat_cli.sh MPIEXEC. Env (CTest): SHARDLM_BIN, SLM_SHARED_DIR, SLM_PYTHON.
. "$(dirname "$0")/../lib.sh"
set +e
MPIEXEC=${1:-$MPIEXEC}
export OMP_NUM_THREADS=1
unset SHARDLM_FAULT SHARDLM_ATTEMPT
slm_tiny_data "$W/data" 300 40000 || exit 1
slm_tiny_config "$W/config.json" vocab_size=300
TR=(train --data "$W/data" --model "$W/config.json" --batch 2 --seq 16 --threads 1
    --peak-gflops 10 --collective-timeout 120 --out "$W/run" --heartbeat-dir "$W/run/heartbeat")
# hb FILE FIELD: one field of a heartbeat record, as Python's json reads it
hb() { "$PY" -c 'import json,sys; v=json.load(open(sys.argv[1]))[sys.argv[2]]; print("null" if v is None else v)' "$1" "$2"; }

t0=$(date +%s.%N)
slm_mpirun 2 "$BIN" "${TR[@]}" --steps 2 > "$W/a.log" 2>&1
check "2-step run with --heartbeat-dir" 0 $?
t1=$(date +%s.%N)
loss2=$(sed -n 's/.*"event":"step","step":2,"loss":\([^,]*\),.*/\1/p' "$W/run/metrics.jsonl")
for r in 0 1; do
    f=$W/run/heartbeat/rank_0000$r.json
    if [ -f "$f" ] && [ "$(hb "$f" rank)" = $r ] && [ "$(hb "$f" step)" = 2 ] &&
        [ "$(hb "$f" phase)" = end ] && [ "$(hb "$f" host)" = "$(hostname)" ] &&
        "$PY" -c 'import sys; a,b,c=map(float,sys.argv[1:]); sys.exit(not (a <= b <= c))' "$t0" "$(hb "$f" time)" "$t1" &&
        "$PY" -c 'import sys; a,b=map(float,sys.argv[1:]); sys.exit(not abs(a-b) <= 1e-6*abs(b))' "$(hb "$f" loss)" "$loss2" &&
        [[ "$(hb "$f" pid)" =~ ^[0-9]+$ ]]; then
        ok "rank $r: end record at step 2 (loss $(hb "$f" loss) = metrics.jsonl $loss2, host, time in the run)"
    else
        bad "rank $r heartbeat after the run:"; cat "$f"; echo "metrics loss: $loss2"
    fi
done

SHARDLM_FAULT=stop:rank=1:step=3 slm_mpirun 2 "$BIN" "${TR[@]}" --steps 4 --resume auto \
    > "$W/b.log" 2>&1 &
P=$!
f1=$W/run/heartbeat/rank_00001.json
stopped=
for _ in $(seq 1 1200); do # up to 120 s for rank 1 to stop itself
    if grep -q '"phase":"start"' "$f1" 2>/dev/null; then
        pid=$(hb "$f1" pid)
        if [ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" = T ]; then stopped=$pid; break; fi
    fi
    kill -0 $P 2>/dev/null || break
    sleep 0.1
done
if [ -n "$stopped" ]; then
    slm_on_exit "kill -CONT $stopped"
    s0=$(hb "$W/run/heartbeat/rank_00000.json" step)
    if [ "$(hb "$f1" step)" = 2 ] && [ "$(hb "$f1" loss)" = null ] && [ "$s0" -ge 2 ]; then
        ok "stopped rank 1 (pid $stopped): its heartbeat stays at phase start, step 2; rank 0 at step $s0"
    else
        bad "stopped rank 1's heartbeat:"; cat "$f1"
    fi
    kill -CONT "$stopped"
else
    bad "rank 1 did not stop itself with a start record"; cat "$f1" "$W/b.log"
fi
wait $P
check "resumed run finishes after SIGCONT" 0 $?
for r in 0 1; do
    f=$W/run/heartbeat/rank_0000$r.json
    [ "$(hb "$f" phase)" = end ] && [ "$(hb "$f" step)" = 4 ] &&
        ok "rank $r: end record at step 4" || { bad "rank $r final heartbeat:"; cat "$f"; }
done
n=$(ls -A "$W/run/heartbeat" | wc -l)
[ "$n" = 2 ] && ok "heartbeat dir holds the two rank files only" || { bad "heartbeat dir:"; ls -A "$W/run/heartbeat"; }
slm_finish
