#!/usr/bin/env bash
# The job dies with its supervisor (issue 20 item 2):
#  1. `kill -9` of `shardlm launch` while its 2 ranks train (400 steps of >= 0.3 s): within
#     60 s no process of the job is left (mpirun and both ranks; before the fix they trained on
#     unsupervised). Their pids are read from /proc (the launcher's child) and the heartbeats;
#  2. launching again continues the run to its end: one attempt, no restart, no culprit;
#  3. a launch into a run directory whose run lock a live `shardlm train` holds says so up front
#     (exit 1 naming the holder's pid) without a health check, an attempt, a restart or a
#     culprit, and writes nothing into that directory; the holder trains on.
# Usage: test_launch_orphan.sh MPIEXEC.
. "$(dirname "$0")/../lib.sh"
MPIEXEC=${1:-$MPIEXEC}
. "$(dirname "$0")/launch_lib.sh"
set +e
alive() { [ -d "/proc/$1" ] && ! grep -q '^State:.*Z' "/proc/$1/status" 2>/dev/null; }

SHARDLM_FAULT=slow:rank=0:ms=300 "$BIN" launch --nproc 2 "${LA[@]}" --hang-timeout 60 -- \
    "${TR[@]}" --steps 400 --out "$W/run" > "$W/1.log" 2>&1 &
L=$!
slm_on_exit "kill -9 $L"
for _ in $(seq 1 600); do # until both ranks trained a step (60 s at most)
    p0=$(hb_pid "$W/run" 0) p1=$(hb_pid "$W/run" 1)
    [ -n "$p0" ] && [ -n "$p1" ] && grep -q '"phase":"train"' "$W/run/heartbeat/rank_00001.json" && break
    sleep 0.1
done
M=$(ps -o pid= --ppid "$L" | tr -d ' ' | head -1)
[ -n "$M" ] && [ -n "$p0" ] && [ -n "$p1" ] && alive "$M" && alive "$p0" && alive "$p1" &&
    ok "training: mpirun $M, ranks $p0 and $p1" || { bad "the job did not start"; cat "$W/1.log"; }
slm_on_exit "kill -9 $M $p0 $p1"
kill -9 "$L"
wait "$L" 2>/dev/null
left=""
for _ in $(seq 1 600); do # 60 s at most
    left=""
    for p in $M $p0 $p1; do alive "$p" && left="$left $p"; done
    [ -z "$left" ] && break
    sleep 0.1
done
[ -z "$left" ] && ok "kill -9 of the launcher: mpirun and both ranks are gone" ||
    { bad "still running 60 s after the launcher was killed:$left"; ps -o pid,ppid,stat,args -p "${left# }" 2>/dev/null; }
no_orphans "no process naming the run is left"
echo "checkpoint left by the ranks: $(cat "$W/run/checkpoints/latest" 2>/dev/null) (printed, not checked)"

"$BIN" launch --nproc 2 "${LA[@]}" -- "${TR[@]}" --steps 400 --out "$W/run" > "$W/2.log" 2>&1
check "launching again finishes the run" 0 $?
J=$W/run/attempts.json
[ "$(aj "$J" 'a["restarts"]')" = 0 ] && [ "$(aj "$J" '[x["result"] for x in a["attempts"]][-1]')" = success ] &&
    [ "$(aj "$J" 'a["attempts"][-1]["culprit_rank"]')" = None ] &&
    ok "no restart, the last attempt a success without a culprit" || { bad "attempts.json"; cat "$J"; }

# 3. a live lock holder
mkdir -p "$W/held"
SHARDLM_FAULT=slow:rank=0:ms=300 "$BIN" train "${TR[@]}" --steps 400 --out "$W/held" > "$W/h.log" 2>&1 &
H=$!
slm_on_exit "kill -9 $H"
for _ in $(seq 1 600); do grep -q "pid $H " "$W/held/run.lock" 2>/dev/null && break; sleep 0.1; done
ls "$W/held" > "$W/held.before"
"$BIN" launch --nproc 2 "${LA[@]}" --max-restarts 3 -- "${TR[@]}" --steps 400 --out "$W/held" > "$W/3.log" 2>&1
check "a live lock holder: exit 1" 1 $?
has "it names the holder's pid" "$W/3.log" "in use by a live training run (pid $H on host"
! grep -q "health check on\|attempt 1:\|restart 1" "$W/3.log" && ok "no health check, no attempt, no restart" ||
    { bad "something was started:"; cat "$W/3.log"; }
ls "$W/held" > "$W/held.after"
cmp -s "$W/held.before" "$W/held.after" && [ ! -e "$W/held/attempts.json" ] &&
    ok "nothing written into its directory" || { bad "the directory changed:"; diff "$W/held.before" "$W/held.after"; }
alive "$H" && ok "the holder trains on" || bad "the holder died"
kill "$H"
wait "$H" 2>/dev/null
no_orphans "no process left"
slm_finish
