#!/usr/bin/env bash
# Fault test 2 (issue 10): rank 2 of 4 stops itself (SIGSTOP) before step 5: no heartbeat moves,
# the launcher detects the hang after --hang-timeout 10, names rank 2 (found stopped in /proc,
# and the flight-recorder verdict of `shardlm flight` after SIGUSR2 names it too), terminates
# the job (the stopped process included), restarts and finishes with the uninterrupted run's
# weights. Usage: test_launch_stop.sh MPIEXEC.
. "$(dirname "$0")/../lib.sh"
MPIEXEC=${1:-$MPIEXEC}
. "$(dirname "$0")/launch_lib.sh"
set +e
slm_ref 4 10 "$W/ref"
SHARDLM_FAULT=stop:rank=2:step=5 "$BIN" launch --nproc 4 "${LA[@]}" --hang-timeout 10 -- \
    "${TR[@]}" --steps 10 --out "$W/run" > "$W/out.log" 2> "$W/err.log"
check "launch after a stopped rank exits 0" 0 $?
J=$W/run/attempts.json
[ "$(aj "$J" 'a["attempts"][0]["result"]')" = hang ] && ok "attempt 1: hang detected" ||
    { bad "attempt 1 result"; cat "$J"; }
[ "$(aj "$J" 'a["attempts"][0]["culprit_rank"]')" = 2 ] && ok "culprit: rank 2" || bad "culprit"
has "reason: rank 2 is stopped" "$J" 'rank 2 (pid [0-9]* on .*) is stopped'
v=$(aj "$J" 'a["attempts"][0]["flight_verdict"]')
case "$v" in *"rank 2 never entered"*) ok "flight verdict names rank 2: $v" ;; *) bad "flight verdict: $v" ;; esac
[ "$(aj "$J" 'len(a["attempts"])')" = 2 ] && [ "$(aj "$J" 'a["attempts"][1]["result"]')" = success ] &&
    ok "attempt 2 finished" || bad "attempt 2"
echo "hang detected $(aj "$J" 'round(a["attempts"][0]["detected"] - a["attempts"][0]["last_progress"], 2)') s after the last heartbeat (printed, not checked)"
same_weights "final weights equal the uninterrupted run" "$W/run" "$W/ref" 10
no_orphans "no process of the job left (the stopped rank killed)"
slm_finish
