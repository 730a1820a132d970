#!/usr/bin/env bash
# Preemption (issue 10; docs/operations.md "Preemption"): SIGTERM / SIGUSR1 finish the current
# micro-batch, commit a checkpoint of the last whole step and exit 75; --resume auto then runs
# to the end with final weights (every rank file of the last checkpoint: params, AdamW m, v)
# byte-identical to an uninterrupted run's.
#  1. one process, SIGTERM inside step 2 of 3;
#  2. mpirun -np 2, SIGTERM to both ranks;
#  3. mpirun -np 2, SIGUSR1 to rank 1 only: rank 0 learns of it through the stop all-reduce,
#     both stop at the same micro-batch, no collective timeout;
#  4. SIGUSR1 to mpirun itself (Open MPI forwards it to every rank): exit 75 as well;
#  5. --preempt-grace smaller than any save: the log says the save took longer than the grace.
# Usage: test_preempt_cli.sh MPIEXEC. Env (CTest): SHARDLM_BIN, SLM_SHARED_DIR.
. "$(dirname "$0")/../lib.sh"
set +e
MPIEXEC=${1:-$MPIEXEC}
export OMP_NUM_THREADS=1
unset SHARDLM_FAULT SHARDLM_ATTEMPT
slm_tiny_data "$W/data" 300 40000 || exit 1
slm_tiny_config "$W/config.json" vocab_size=300 max_position_embeddings=16
TR=(train --data "$W/data" --model "$W/config.json" --batch 2 --seq 16 --steps 3 --threads 1
    --peak-gflops 10 --collective-timeout 120)
# same_final A B: the step-3 checkpoints of two runs have byte-identical rank files
same_final() {
    local f n=0
    for f in "$1"/checkpoints/step_00000003/rank_*.bin; do
        [ -f "$f" ] && cmp -s "$f" "$2/checkpoints/step_00000003/${f##*/}" || return 1
        n=$((n + 1))
    done
    [ $n -gt 0 ] && [ $n -eq "$(ls "$2"/checkpoints/step_00000003/rank_*.bin | wc -l)" ]
}
wait_for() { # wait_for FILE PATTERN PID: until PATTERN is in FILE (0), PID gone or 120 s (1)
    local t0=$SECONDS
    while ! grep -q "$2" "$1" 2>/dev/null; do
        kill -0 "$3" 2>/dev/null || return 1
        [ $((SECONDS - t0)) -lt 120 ] || return 1
        sleep 0.05
    done
}
# preempted_ok NAME RC LOG RUN: exit 75, "preempted ... after step N", latest names step_N
preempted_ok() {
    local n
    n=$(sed -n 's/.*preempted (SIGTERM \/ SIGUSR1) after step \([0-9]*\).*/\1/p' "$3" | head -1)
    if [ "$2" -eq 75 ] && [ -n "$n" ] && [ "$n" -lt 3 ] &&
        [ "$(cat "$4/checkpoints/latest" 2>/dev/null)" = "$(printf 'step_%08d' "$n")" ] &&
        "$BIN" ckpt verify "$4/checkpoints/step_$(printf %08d "$n")" > /dev/null 2>&1 &&
        ! grep -q "timed out" "$3"; then
        ok "$1: exit 75 after step $n, its checkpoint committed and verified"
    else
        bad "$1: exit $2, step '$n', latest $(cat "$4/checkpoints/latest" 2>/dev/null)"; cat "$3"
    fi
}
resume_ok() { # resume_ok NAME NP RUN REF
    if [ "$2" = 1 ]; then
        "$BIN" "${TR[@]}" --grad-accum $K --out "$3" --resume auto > "$3.resume.log" 2>&1
    else
        slm_mpirun "$2" "$BIN" "${TR[@]}" --grad-accum $K --out "$3" --resume auto > "$3.resume.log" 2>&1
    fi
    local rc=$?
    if [ $rc -eq 0 ] && same_final "$3" "$4"; then
        ok "$1: --resume auto to step 3 == the uninterrupted run, bitwise"
    else
        bad "$1: resume exit $rc or final checkpoint differs"; tail -5 "$3.resume.log"
    fi
}

# --- 1. one process
K=3000
"$BIN" "${TR[@]}" --grad-accum $K --out "$W/ref1" > "$W/ref1.log" 2>&1 || { bad "reference run"; cat "$W/ref1.log"; }
"$BIN" "${TR[@]}" --grad-accum $K --out "$W/a" > "$W/a.log" 2>&1 &
P=$!
if wait_for "$W/a.log" "step *1/3" $P; then
    kill -TERM $P; wait $P; rc=$?
    preempted_ok "1 rank, SIGTERM" $rc "$W/a.log" "$W/a"
    has "1 rank: the save's time is reported against the grace" "$W/a.log" "committed .* s after the signal (--preempt-grace 60 s)"
    resume_ok "1 rank" 1 "$W/a" "$W/ref1"
else
    bad "1 rank: no step 1 line"; cat "$W/a.log"
fi

# --- 2.-4. two ranks
K=1500
slm_mpirun 2 "$BIN" "${TR[@]}" --grad-accum $K --out "$W/ref2" > "$W/ref2.log" 2>&1 || { bad "np 2 reference run"; tail "$W/ref2.log"; }
run2() { # run2 RUN [extra train args]: mpirun in the background ($P its pid), rank pids in RUN.pid.R
    local run=$1
    shift
    rm -f "$run".pid.*
    "$MPIEXEC" --oversubscribe -np 2 sh -c 'echo $$ > "$0.pid.$OMPI_COMM_WORLD_RANK"; exec "$@"' "$run" \
        "$BIN" "${TR[@]}" --grad-accum $K --out "$run" "$@" > "$run.log" 2>&1 &
    P=$!
    wait_for "$run.log" "step *1/3" $P && [ -s "$run.pid.0" ] && [ -s "$run.pid.1" ]
}
if run2 "$W/b"; then
    kill -TERM "$(cat "$W/b.pid.0")" "$(cat "$W/b.pid.1")"; wait $P; rc=$?
    preempted_ok "np 2, SIGTERM to both ranks" $rc "$W/b.log" "$W/b"
    resume_ok "np 2 (SIGTERM)" 2 "$W/b" "$W/ref2"
else
    bad "np 2 (b): no step 1 line"; cat "$W/b.log"; kill $P
fi
if run2 "$W/c"; then
    kill -USR1 "$(cat "$W/c.pid.1")"; wait $P; rc=$?
    preempted_ok "np 2, SIGUSR1 to rank 1 only" $rc "$W/c.log" "$W/c"
    n=$(grep -c "preempted (SIGTERM / SIGUSR1) after step" "$W/c.log")
    [ "$n" -ge 1 ] && grep -q "committed .* s after the agreed stop\|committed .* s after the signal" "$W/c.log" &&
        ok "np 2: the preemption reported by rank 0 (which got no signal)" ||
        { bad "np 2: no preemption report"; cat "$W/c.log"; }
    resume_ok "np 2 (SIGUSR1 to rank 1)" 2 "$W/c" "$W/ref2"
else
    bad "np 2 (c): no step 1 line"; cat "$W/c.log"; kill $P
fi
if run2 "$W/d"; then
    kill -USR1 $P; wait $P; rc=$?
    preempted_ok "np 2, SIGUSR1 to mpirun" $rc "$W/d.log" "$W/d"
else
    bad "np 2 (d): no step 1 line"; cat "$W/d.log"; kill $P
fi

# --- 5. a grace shorter than any save
"$BIN" "${TR[@]}" --grad-accum 3000 --preempt-grace 1e-9 --out "$W/g" > "$W/g.log" 2>&1 &
P=$!
if wait_for "$W/g.log" "step *1/3" $P; then
    kill -TERM $P; wait $P; rc=$?
    check "--preempt-grace 1e-9: still exit 75" 75 $rc
    has "--preempt-grace 1e-9: the late save is a warning" "$W/g.log" "beyond --preempt-grace 1e-09 s"
else
    bad "grace run: no step 1 line"; cat "$W/g.log"
fi
slm_finish
