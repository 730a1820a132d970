#!/usr/bin/env bash
# Fault test 1 (issue 10): SIGKILL of rank 1 before step 5 of a 4-rank run under
# `shardlm launch`: the failure is detected (mpirun's report names rank 1 and signal 9), the
# job restarts once from the newest checkpoint, finishes with exit 0, its final weights are
# byte-equal to an uninterrupted 4-rank run, attempts.json records both attempts, and no process
# of the job is left. Functional assertions only; the detection time is printed, not checked.
# Usage: test_launch_kill.sh MPIEXEC.
. "$(dirname "$0")/../lib.sh"
MPIEXEC=${1:-$MPIEXEC}
. "$(dirname "$0")/launch_lib.sh"
set +e
slm_ref 4 10 "$W/ref"
SHARDLM_FAULT=kill:rank=1:step=5 "$BIN" launch --nproc 4 "${LA[@]}" --hang-timeout 60 -- \
    "${TR[@]}" --steps 10 --out "$W/run" > "$W/out.log" 2> "$W/err.log"
check "launch after a killed rank exits 0" 0 $?
J=$W/run/attempts.json
[ "$(aj "$J" 'len(a["attempts"])')" = 2 ] && ok "two attempts" || { bad "attempts:"; cat "$J"; }
[ "$(aj "$J" 'a["attempts"][0]["result"]')" = failed ] && ok "attempt 1 failed" || bad "attempt 1 result"
[ "$(aj "$J" 'a["attempts"][0]["culprit_rank"]')" = 1 ] && ok "culprit rank 1 named" ||
    { bad "culprit"; cat "$J"; }
has "reason names signal 9 (mpirun) or the dead pid (launcher)" "$J" 'exited on signal 9\|rank 1 (pid [0-9]* on .*) died'
[ "$(aj "$J" 'a["attempts"][1]["result"]')" = success ] && ok "attempt 2 succeeded" || bad "attempt 2"
[ "$(aj "$J" 'a["restarts"]')" = 1 ] && [ "$(aj "$J" 'a["exit_code"]')" = 0 ] &&
    ok "restarts 1, exit_code 0 in attempts.json" || bad "restarts / exit_code"
[ "$(aj "$J" 'a["attempts"][1]["start_step"] <= 4')" = True ] && ok "resumed from a checkpoint <= 4" ||
    bad "start step of attempt 2"
has "summary printed" "$W/out.log" 'launch summary: success'
has "transport logged" "$W/err.log" 'MPI transport: pml'
has "attempt 1 warns that the fault is active" "$W/err.log" 'fault injection active: SHARDLM_FAULT=kill:rank=1:step=5 (attempt 1)'
has "attempt 2 says the first-attempt fault is inert" "$W/err.log" 'fault injection inert: SHARDLM_FAULT=kill:rank=1:step=5 fires on attempt 1 only (this is attempt 2'
echo "detection: $(aj "$J" 'round(a["attempts"][0]["detected"] - a["attempts"][0]["last_progress"], 2)') s after the last heartbeat (printed, not checked)"
same_weights "final weights equal the uninterrupted run" "$W/run" "$W/ref" 10
no_orphans "no process of the job left"
[ "$fails" = 0 ] || { cat "$J"; tail -30 "$W/err.log"; }
slm_finish
