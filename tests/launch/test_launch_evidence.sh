#!/usr/bin/env bash
# The culprit, the reason and the flight verdict of a failed attempt agree with the evidence
# (/proc, heartbeats, Open MPI's report, flight dumps) (issue 20 item 4). 2 ranks, --max-restarts 0:
#  A. rank 1 stops itself (SIGSTOP) before step 5 and rank 0 times out in the collective after
#     --collective-timeout 5 (it dumps and calls MPI_Abort, so it is the first to die): the
#     culprit is rank 1, the reason says rank 1 (its heartbeat's pid) is stopped, the flight
#     verdict names rank 1 (before: culprit rank 0, "rank 0 called MPI_Abort" alone);
#  B. rank 1 sleeps 30 s before step 5 (hung outside MPI, not stopped), --hang-timeout 3: a hang
#     whose culprit is the verdict's rank 1, and the reason names it too (before: the reason
#     named nobody);
#  C. rank 1 exits (status 1) before step 5: culprit rank 1, the reason names rank 1, and no
#     verdict names another rank.
# Usage: test_launch_evidence.sh MPIEXEC.
. "$(dirname "$0")/../lib.sh"
MPIEXEC=${1:-$MPIEXEC}
. "$(dirname "$0")/launch_lib.sh"
set +e
T=("${TR[@]}")
for i in "${!T[@]}"; do [ "${T[$i]}" = --collective-timeout ] && T[$((i + 1))]=5; done
agree() { # agree NAME RUN: culprit 1; reason and (non-empty) verdict name rank 1, no other rank
    local J=$2/attempts.json c r v
    c=$(aj "$J" 'a["attempts"][0]["culprit_rank"]')
    r=$(aj "$J" 'a["attempts"][0]["reason"]')
    v=$(aj "$J" 'a["attempts"][0]["flight_verdict"]')
    [ "$c" = 1 ] && ok "$1: culprit rank 1" || bad "$1: culprit $c ($r)"
    case "$r" in *"rank 1 "*) ok "$1: the reason names rank 1: $r" ;; *) bad "$1: reason: $r" ;; esac
    case "$v" in "" | "flight recorder: rank 1 never entered"*) ok "$1: the verdict agrees" ;;
    *) bad "$1: verdict: $v" ;; esac
}
SHARDLM_FAULT=stop:rank=1:step=5 "$BIN" launch --nproc 2 "${LA[@]}" --hang-timeout 60 \
    --max-restarts 0 -- "${T[@]}" --steps 10 --out "$W/a" > "$W/a.log" 2>&1
check "A: stopped rank, collective timeout: exit 1" 1 $?
agree A "$W/a"
p=$(hb_pid "$W/a" 1)
has "A: the reason names rank 1's pid and that it is stopped" "$W/a/attempts.json" "rank 1 (pid $p on [^)]*) is stopped"
has "A: the verdict has it never entering the collective" "$W/a/attempts.json" '"flight recorder: rank 1 never entered'

SHARDLM_FAULT=slow:rank=1:ms=30000:step=5 "$BIN" launch --nproc 2 "${LA[@]}" --hang-timeout 3 \
    --max-restarts 0 -- "${TR[@]}" --steps 10 --out "$W/b" > "$W/b.log" 2>&1
check "B: a rank hung outside MPI: exit 1" 1 $?
[ "$(aj "$W/b/attempts.json" 'a["attempts"][0]["result"]')" = hang ] && ok "B: a hang" || bad "B: not a hang"
agree B "$W/b"
has "B: the verdict names rank 1" "$W/b/attempts.json" '"flight recorder: rank 1 never entered'

SHARDLM_FAULT=exit:rank=1:step=5 "$BIN" launch --nproc 2 "${LA[@]}" --hang-timeout 60 \
    --max-restarts 0 -- "${TR[@]}" --steps 10 --out "$W/c" > "$W/c.log" 2>&1
check "C: a rank exits early: exit 1" 1 $?
agree C "$W/c"
no_orphans "no process left"
[ "$fails" = 0 ] || cat "$W/a/attempts.json" "$W/b/attempts.json" "$W/c/attempts.json"
slm_finish
