#!/usr/bin/env bash
# Fault test 4 (issue 10): preemption. A run slowed down by SHARDLM_FAULT=slow (it sleeps, the
# numbers are unchanged) is launched three times into one run directory:
#  1. --max-run 6s: the launcher forwards SIGUSR1, the ranks checkpoint and exit 75; launch
#     exits 75 (result max-run in attempts.json) leaving a checkpoint (at 300 ms a step a
#     loaded host that takes 4 s to start the health check and the job still trains a few
#     steps; with 3 s at 150 ms it sometimes reached --max-run before step 1);
#  2. launched again, SIGTERM to the launcher once training advanced: forwarded, exit 75
#     (result preempted), a newer checkpoint;
#  3. launched again: continues to the end, exit 0, final weights byte-equal to an
#     uninterrupted run. No process left after any of them. attempts.json then holds the
#     attempts of all three launches (issue 20 item 6).
# Usage: test_launch_preempt.sh MPIEXEC.
. "$(dirname "$0")/../lib.sh"
MPIEXEC=${1:-$MPIEXEC}
. "$(dirname "$0")/launch_lib.sh"
set +e
slm_ref 2 40 "$W/ref"
RUN=(--nproc 2 "${LA[@]}" --hang-timeout 60 --preempt-grace 30 -- "${TR[@]}" --steps 40 --out "$W/run")
J=$W/run/attempts.json
newest() { sed -n 's/.*step_0*\([0-9][0-9]*\).*/\1/p' "$W/run/checkpoints/latest" 2>/dev/null; }

SHARDLM_FAULT=slow:rank=0:ms=300 "$BIN" launch --max-run 6s "${RUN[@]}" > "$W/1.log" 2>&1
check "--max-run reached: exit 75" 75 $?
[ "$(aj "$J" 'a["result"]')" = max-run ] && [ "$(aj "$J" 'a["exit_code"]')" = 75 ] &&
    ok "attempts.json: result max-run, exit_code 75" || { bad "attempts.json"; cat "$J"; }
s1=$(newest)
[ -n "$s1" ] && [ "$s1" -gt 0 ] && [ "$s1" -lt 40 ] && ok "checkpoint at step $s1" ||
    { bad "no checkpoint after --max-run"; cat "$W/1.log"; }
no_orphans "no process left after --max-run"

SHARDLM_FAULT=slow:rank=0:ms=150 "$BIN" launch "${RUN[@]}" > "$W/2.log" 2>&1 &
P=$!
for _ in $(seq 1 600); do # until the second launch trained two steps past s1 (60 s at most)
    s=$(sed -n 's/.*"step":\([0-9]*\).*"phase":"train".*/\1/p' "$W/run/heartbeat/rank_00000.json" 2>/dev/null)
    [ -n "$s" ] && [ "$s" -ge $((s1 + 2)) ] && break
    kill -0 $P 2>/dev/null || break
    sleep 0.1
done
kill -TERM $P
wait $P
check "SIGTERM to the launcher: exit 75" 75 $?
[ "$(aj "$J" 'a["result"]')" = preempted ] && ok "attempts.json: result preempted" || { bad "result"; cat "$J"; }
s2=$(newest)
[ -n "$s2" ] && [ "$s2" -gt "$s1" ] && [ "$s2" -lt 40 ] && ok "newer checkpoint at step $s2" ||
    { bad "checkpoint after SIGTERM: $s2"; cat "$W/2.log"; }
no_orphans "no process left after SIGTERM"

"$BIN" launch "${RUN[@]}" > "$W/3.log" 2>&1
check "launch again continues to the end" 0 $?
[ "$(aj "$J" 'a["attempts"][-1]["start_step"]')" = "$s2" ] && ok "resumed at step $s2" || bad "start step"
# Each launch appends its attempts (issue 20 item 6): all three launches are in attempts.json,
# numbered, each launch's attempts from 1, and `shardlm report` counts them all.
[ "$(aj "$J" '[(x["launch"], x["attempt"], x["result"]) for x in a["attempts"]]')" = \
    "[(1, 1, 'max-run'), (2, 1, 'preempted'), (3, 1, 'success')]" ] &&
    [ "$(aj "$J" '[(x["launch"], x["result"], x["exit_code"]) for x in a["launches"]]')" = \
    "[(1, 'max-run', 75), (2, 'preempted', 75), (3, 'success', 0)]" ] && [ "$(aj "$J" 'a["launch"]')" = 3 ] &&
    ok "attempts.json keeps the attempts of all three launches, numbered" || { bad "attempts.json history"; cat "$J"; }
"$BIN" report "$W/run" > "$W/report.txt" 2>&1
has "shardlm report counts the attempts of every launch" "$W/report.txt" '^attempts: 3 '
same_weights "final weights equal the uninterrupted run" "$W/run" "$W/ref" 40
no_orphans "no process left"
slm_finish
