#!/usr/bin/env bash
# The final checkpoint's failed upload is not reported as success (issue 20 item 8), against a
# real S3 server (SeaweedFS) frozen with SIGSTOP after step_20's upload of a 30-step run
# (checkpoints every 10 steps), so the final upload (step_30) times out:
#  - train: exits 1 naming step_30 and the remote latest (step_20), not 0;
#  - train --resume auto again (already complete locally), the server still frozen: exits 1, not
#    "nothing trained" with exit 0;
#  - the same, the server back: uploads step_30 (remote latest step_30, `ckpt verify` of the
#    remote copy passes), then "already complete", exit 0;
#  - shardlm launch of the whole sequence: attempt 1 fails, the restart uploads step_30, exit 0
#    with the remote latest at step_30 (before: exit 0 with the remote latest at step_20).
# Args: MPIEXEC S3_TOOL
. "$(dirname "$0")/../lib.sh"
MPIEXEC=${1:-$MPIEXEC}
export S3TOOL=$2
. "$(dirname "$0")/lib.sh"
slm_s3_start "$W/s3"
B=$S3_BUCKET
slm_s3_tiny_run 30 10
# a frozen server fails a request in a few seconds (2 attempts of at most 2 s without a byte)
export SHARDLM_S3_MAX_ATTEMPTS=2 SHARDLM_S3_RETRY_BUDGET_S=3 SHARDLM_S3_STALL_S=2
slm_on_exit 'kill -CONT $S3_PID 2>/dev/null'
remote_latest() { # remote_latest RUN: what s3://B/runs/RUN/checkpoints/latest names
    rm -f "$W/rl"
    "$S3TOOL" get "$B" "runs/$1/checkpoints/latest" "$W/rl" > /dev/null 2>&1 && tr -d '\n' < "$W/rl"
}
# waits (bounded) until the shell condition $1 holds; $2 seconds at most
wait_for() { local t0=$SECONDS; until eval "$1"; do [ $((SECONDS - t0)) -gt "$2" ] && return 1; sleep 0.1; done; }
set +e

# --- train: the server frozen once step_20 is on S3
SHARDLM_FAULT=slow:rank=0:ms=400:always "$BIN" train "${TR[@]}" --out "$W/a" \
    --ckpt-uri "s3://$B/runs/a/" > "$W/a1.log" 2>&1 &
tpid=$!
slm_on_exit "kill -9 $tpid 2>/dev/null"
wait_for '[ "$(remote_latest a)" = step_00000020 ]' 120 || bad "no remote step_20 within 120 s"
kill -STOP "$S3_PID"
wait_for '! kill -0 $tpid 2>/dev/null' 120
wait $tpid
rc=$?
check "final upload timed out: train exits 1" 1 $rc
check "local latest" step_00000030 "$(cat "$W/a/checkpoints/latest")"
has "the error names step_30 and the remote latest" "$W/a1.log" \
    "step_00000030 (committed locally) is not on S3, whose latest names step_00000020"

"$BIN" train "${TR[@]}" --resume auto --out "$W/a" --ckpt-uri "s3://$B/runs/a/" > "$W/a2.log" 2>&1
rc=$?
check "already complete, server still frozen: exit 1" 1 $rc
grep -q "nothing trained" "$W/a2.log" && bad "said 'nothing trained' with the remote behind" ||
    ok "no 'nothing trained' with the remote behind"

kill -CONT "$S3_PID"
check "remote latest still step_20" step_00000020 "$(remote_latest a)"
"$BIN" train "${TR[@]}" --resume auto --out "$W/a" --ckpt-uri "s3://$B/runs/a/" > "$W/a3.log" 2>&1
rc=$?
[ $rc = 0 ] || tail -20 "$W/a3.log"
check "already complete, server back: exit 0" 0 $rc
has "uploads the local step_30" "$W/a3.log" "local step_00000030 is newer than the remote latest"
has "then says complete" "$W/a3.log" "the run is already complete at step 30"
check "remote latest now step_30" step_00000030 "$(remote_latest a)"
if "$BIN" ckpt verify "s3://$B/runs/a/checkpoints/step_00000030" > "$W/av.log" 2>&1; then ok "remote step_30 verifies"
else cat "$W/av.log"; bad "remote step_30 does not verify"; fi
"$S3TOOL" get "$B" runs/a/checkpoints/step_00000030/host_00000.bin "$W/h30" > /dev/null
cmp -s "$W/a/checkpoints/step_00000030/rank_00000.bin" "$W/h30" &&
    ok "remote step_30 object equals the local rank file" || bad "remote step_30 object differs"

# --- shardlm launch: the server frozen during the final upload of attempt 1, back once it failed
SHARDLM_FAULT=slow:rank=0:ms=400:always "$BIN" launch "${LA[@]}" --max-restarts 3 \
    -- "${TR[@]}" \
    --resume auto --out "$W/l" --ckpt-uri "s3://$B/runs/l/" > "$W/l.log" 2> "$W/l.err" &
lpid=$!
slm_on_exit "kill -9 $lpid 2>/dev/null"
wait_for '[ "$(remote_latest l)" = step_00000020 ]' 120 || bad "launch: no remote step_20 within 120 s"
kill -STOP "$S3_PID"
# back once attempt 1 ended (its error; before the fix there is none: back after 60 s at most)
wait_for 'grep -q "is not on S3" "$W/l.err" || ! kill -0 $lpid 2>/dev/null' 60
kill -CONT "$S3_PID"
wait_for '! kill -0 $lpid 2>/dev/null' 180
wait $lpid
rc=$?
[ $rc = 0 ] || tail -30 "$W/l.err"
check "launch exits 0" 0 $rc
check "launch: remote latest step_30 (the final checkpoint)" step_00000030 "$(remote_latest l)"
has "launch: attempt 1 failed naming the remote latest" "$W/l.err" \
    "step_00000030 (committed locally) is not on S3, whose latest names step_00000020"
has "launch: the restart uploaded step_30" "$W/l.err" "local step_00000030 is newer than the remote latest"
slm_finish
