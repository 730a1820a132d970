#!/usr/bin/env bash
# A run that finishes during a hang teardown is a success (issue 20 item 1). Rank 1 sleeps 2 s
# before the last step (SHARDLM_FAULT=slow:...:step=S) under --hang-timeout 1: the launcher
# declares a hang and sends SIGUSR2, waits 2 s, then SIGTERM; the rank wakes within that wait,
# runs the last step and the job exits 0 with every rank's "end" heartbeat. The attempt must be
# recorded as a success (exit 0, no restart spent, no culprit), not as a hang.
# Usage: test_launch_hangdone.sh MPIEXEC.
. "$(dirname "$0")/../lib.sh"
MPIEXEC=${1:-$MPIEXEC}
. "$(dirname "$0")/launch_lib.sh"
set +e
SHARDLM_FAULT=slow:rank=1:ms=2000:step=12 "$BIN" launch --nproc 2 "${LA[@]}" --hang-timeout 1 \
    --max-restarts 1 -- "${TR[@]}" --steps 12 --ckpt-every-steps 4 --out "$W/run" > "$W/out.log" 2>&1
rc=$?
J=$W/run/attempts.json
# The situation under test: a hang was declared, and the job still finished (the mechanism's
# own evidence: the final checkpoint and the trainer's closing line).
has "the launcher declared a hang" "$W/out.log" 'launch: hang: no heartbeat progress'
grep -q 'step_00000012' "$W/run/checkpoints/latest" && ok "the final checkpoint (step 12) committed" ||
    bad "latest: $(cat "$W/run/checkpoints/latest" 2>/dev/null)"
has "the trainer reported the whole run done" "$W/out.log" '^done: 12 steps'
check "launch exits 0" 0 $rc
[ "$(aj "$J" 'len(a["attempts"])')" = 1 ] && [ "$(aj "$J" 'a["restarts"]')" = 0 ] &&
    ok "one attempt, no restart spent" || bad "attempts / restarts"
[ "$(aj "$J" 'a["attempts"][0]["result"]')" = success ] && [ "$(aj "$J" 'a["result"]')" = success ] &&
    ok "the attempt and the launch: success" || bad "result"
[ "$(aj "$J" 'a["attempts"][0]["culprit_rank"]')" = None ] && ok "no culprit" || bad "culprit named"
has "the reason says it finished during the teardown" "$J" 'finished (exit 0.*during the teardown of a suspected hang'
no_orphans "no process left"
[ "$fails" = 0 ] || { cat "$J"; tail -30 "$W/out.log"; }
slm_finish
