#!/usr/bin/env bash
# Preemption and outages against a real S3 server (SeaweedFS) through shardlm train (1 rank):
#  - the server frozen (SIGSTOP: accepts nothing, answers nothing) during an upload, the trainer
#    stalls on the next checkpoint; SIGTERM: it commits its final checkpoint locally and exits 75
#    within --preempt-grace (the upload abandoned, not waited out for the ~150 s retry budget);
#    the remote latest is a complete checkpoint older than the local final one;
#  - the next run (--resume auto, server back) uploads the local checkpoint the remote lacked;
#  - the server killed when a checkpoint commits: its failed upload is retried after the server
#    is back (before the next checkpoint), so remote is never more than one checkpoint behind.
# Args: S3_TOOL
. "$(dirname "$0")/../lib.sh"
export S3TOOL=$1
. "$(dirname "$0")/lib.sh"
slm_s3_start "$W/s3"
B=$S3_BUCKET
cat > "$W/config.json" <<JSON
{"vocab_size": 128, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
 "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 32}
JSON
COMMON=(train --synthetic --seq 16 --batch 4 --warmup 2 --lr 3e-3 --seed 4 --model "$W/config.json"
        --threads 1 --peak-gflops 10 --log-every 0)
latest() { cat "$1/checkpoints/latest" 2>/dev/null; }
# waits (bounded) until the shell condition $1 holds; $2 seconds at most
wait_for() { local t0=$SECONDS; until eval "$1"; do [ $((SECONDS - t0)) -gt "$2" ] && return 1; sleep 0.1; done; }
set +e

# --- 1. SIGTERM while training waits for an upload to a frozen server
U="s3://$B/runs/p/"
GRACE=6
SHARDLM_FAULT=slow:rank=0:ms=20 "$BIN" "${COMMON[@]}" --steps 100000 --ckpt-every-steps 4 \
    --preempt-grace $GRACE --out "$W/p" --ckpt-uri "$U" > "$W/p.log" 2>&1 &
tpid=$!
slm_on_exit "kill -9 $tpid 2>/dev/null"
slm_on_exit 'kill -CONT $S3_PID 2>/dev/null'
wait_for '"$S3TOOL" get "$B" runs/p/checkpoints/latest "$W/pl0" > /dev/null 2>&1' 120 ||
    bad "no remote latest within 120 s"
kill -STOP "$S3_PID"
# training goes on until a checkpoint commits while the previous upload hangs: local latest
# stops moving (the stall)
prev="" same=0
for i in $(seq 1 300); do
    cur=$(latest "$W/p")
    if [ "$cur" = "$prev" ]; then same=$((same + 1)); else same=0; prev=$cur; fi
    [ $same -ge 20 ] && break
    sleep 0.1
done
[ $same -ge 20 ] && ok "training stalls on the frozen server's upload (local latest $prev)" ||
    bad "local latest kept moving with the server frozen"
stalled=$prev
t0=$SECONDS
kill -TERM $tpid
wait_for '! kill -0 $tpid 2>/dev/null' $((GRACE + 20))
dt=$((SECONDS - t0))
kill -0 $tpid 2>/dev/null && { kill -9 $tpid; bad "still running $dt s after SIGTERM (--preempt-grace $GRACE)"; }
wait $tpid
rc=$?
[ $rc = 75 ] || tail -15 "$W/p.log"
check "exit 75 (preempted) with the server frozen" 75 $rc
ok "stopped $dt s after SIGTERM (--preempt-grace $GRACE; functional bound $((GRACE + 20)) s)"
final=$(latest "$W/p")
fstep=$((10#${final#step_}))
[ "$fstep" -gt "$((10#${stalled#step_}))" ] && ok "final checkpoint committed locally ($final)" ||
    bad "final checkpoint $final not newer than $stalled"
[ -f "$W/p/checkpoints/$final/manifest.json" ] || bad "local $final has no manifest"
has "upload abandoned (logged)" "$W/p.log" "abandoned"
kill -CONT "$S3_PID"
"$S3TOOL" get "$B" runs/p/checkpoints/latest "$W/pl1" > /dev/null
rl=$(cat "$W/pl1")
[ "$((10#${rl#step_}))" -lt "$fstep" ] && ok "remote latest ($rl) stays older than the local final ($final)" ||
    bad "remote latest $rl vs local final $final"
if "$BIN" ckpt verify "$U" > "$W/pv.log" 2>&1; then ok "remote latest is complete"
else cat "$W/pv.log"; bad "remote latest incomplete"; fi
"$S3TOOL" ls "$B" runs/p/checkpoints/$final/ > "$W/pls" 2>&1
grep -q manifest.json "$W/pls" && bad "remote has the abandoned $final's manifest" ||
    ok "no manifest for $final remotely"

# --- 2. the next run (server back) resumes from the newest (local) and uploads it
next=$((fstep + 1))
"$BIN" "${COMMON[@]}" --steps $next --ckpt-every-steps 100000 --resume auto --out "$W/p" \
    --ckpt-uri "$U" > "$W/p2.log" 2>&1
check "resumed run" 0 $?
has "resumed from the local $final" "$W/p2.log" "$final"
"$S3TOOL" ls "$B" runs/p/checkpoints/$final/ > "$W/pls2" 2>&1
has "the local $final uploaded by the next run" "$W/pls2" "$final/manifest.json"
"$S3TOOL" get "$B" runs/p/checkpoints/latest "$W/pl2" > /dev/null
check "remote latest after the next run" "$(printf 'step_%08d' $next)" "$(cat "$W/pl2")"
if "$BIN" ckpt verify "s3://$B/runs/p/checkpoints/$final" > "$W/pv2.log" 2>&1; then ok "uploaded $final verifies"
else cat "$W/pv2.log"; bad "uploaded $final does not verify"; fi

# --- 3. a failed upload is retried once the server is back (not only the next checkpoint)
U3="s3://$B/runs/r/"
export SHARDLM_S3_MAX_ATTEMPTS=2 SHARDLM_S3_RETRY_BUDGET_S=2 SHARDLM_S3_STALL_S=2
SHARDLM_FAULT=slow:rank=0:ms=150 "$BIN" "${COMMON[@]}" --steps 100000 --ckpt-every-steps 100 \
    --out "$W/r" --ckpt-uri "$U3" > "$W/r.log" 2>&1 &
rpid=$!
slm_on_exit "kill -9 $rpid 2>/dev/null"
wait_for 'grep -q "uploading\|^step\|tok/s" "$W/r.log" || [ -d "$W/r/checkpoints" ]' 60
sleep 1
slm_s3_kill
wait_for '[ "$(latest "$W/r")" = step_00000100 ]' 120 || bad "no local step 100"
wait_for 'grep -q "step_00000100 was not uploaded" "$W/r.log"' 30 &&
    ok "upload of step 100 failed with the server down" || bad "no failed upload logged"
slm_s3_restart
wait_for '"$S3TOOL" ls "$B" runs/r/checkpoints/step_00000100/ 2>/dev/null | grep -q manifest.json' 120
still=$(latest "$W/r")
"$S3TOOL" ls "$B" runs/r/checkpoints/step_00000100/ > "$W/rls" 2>&1
has "failed step 100 uploaded after the server came back" "$W/rls" "step_00000100/manifest.json"
has "by a retry" "$W/r.log" "retrying step_00000100" || tail -20 "$W/r.log"
[ "$still" = step_00000100 ] && ok "retried before the next checkpoint" || echo "note: local latest $still by then"
kill -TERM $rpid
wait_for '! kill -0 $rpid 2>/dev/null' 60
wait $rpid
check "exit 75 with the server up" 75 $?
"$S3TOOL" get "$B" runs/r/checkpoints/latest "$W/rl" > /dev/null
check "final checkpoint uploaded within the grace (server up)" "$(latest "$W/r")" "$(cat "$W/rl")"
unset SHARDLM_S3_MAX_ATTEMPTS SHARDLM_S3_RETRY_BUDGET_S SHARDLM_S3_STALL_S
slm_finish
