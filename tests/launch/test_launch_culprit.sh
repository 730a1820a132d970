#!/usr/bin/env bash
# The culprit of an error every rank agreed on (issue 20 item 3) is the rank whose error it is,
# the attempt's `error` is the fatal line (never a non-fatal "not saved ... (training
# continues ...)" one) and `steps_lost` counts the steps past the newest committed checkpoint.
#  A. (root: a 9 MiB tmpfs) 2 ranks x 40 steps, a checkpoint every 5: from about step 20 the
#     rank files no longer fit (ENOSPC), every save fails and the run ends on "the final
#     checkpoint (step 40) was not saved". Expected culprit: the rank whose own write failed,
#     read from the failing file's name (rank R writes rank_R.bin); steps_lost = 40 - the step
#     `latest` names.
#  B. The same end as mpirun shows it when the ranks exit in the other order (an mpirun stand-in
#     replays the lines: the failing rank 0's fatal line, rank 1's "rank 0 failed: ..." copy,
#     then Open MPI naming rank 1 as the first to exit non-zero), and the same for a final
#     checkpoint upload that failed on rank 0 (S3): culprit rank 0 both times.
# Usage: test_launch_culprit.sh MPIEXEC.
. "$(dirname "$0")/../lib.sh"
MPIEXEC=${1:-$MPIEXEC}
. "$(dirname "$0")/launch_lib.sh"
set +e

# --- A: a real run out of disk space
mkdir -p "$W/fs"
if [ "$(id -u)" = 0 ] && mount -t tmpfs -o size=9m tmpfs "$W/fs" 2>/dev/null; then
    slm_on_exit "umount '$W/fs'"
    slm_tiny_config "$W/c96.json" vocab_size=300 hidden_size=96 intermediate_size=192 \
        num_hidden_layers=2
    "$BIN" launch --nproc 2 "${LA[@]}" --max-restarts 0 -- "${TR[@]}" --model "$W/c96.json" \
        --steps 40 --ckpt-every-steps 5 --out "$W/fs/run" > "$W/a.log" 2>&1
    check "out of space: gave up, exit 1" 1 $?
    J=$W/fs/run/attempts.json
    who=$(sed -n 's/.*rank_0000\([0-9]\)\.bin: write failed: No space left on device.*/\1/p' "$W/a.log" | head -1)
    latest=$(sed -n 's/^step_0*\([0-9][0-9]*\)$/\1/p' "$W/fs/run/checkpoints/latest")
    [ -n "$who" ] && [ -n "$latest" ] && [ "$latest" -lt 40 ] &&
        ok "rank $who's write failed (ENOSPC); latest is step $latest" ||
        { bad "the set-up did not run out of space (who '$who', latest '$latest')"; tail -20 "$W/a.log"; }
    [ "$(aj "$J" 'a["attempts"][0]["culprit_rank"]')" = "$who" ] && ok "culprit: rank $who" ||
        bad "culprit $(aj "$J" 'a["attempts"][0]["culprit_rank"]'), expected $who"
    err=$(aj "$J" 'a["attempts"][0]["error"]')
    case "$err" in
    *"training continues"*) bad "error is a non-fatal line: $err" ;;
    "error: train: "*"final checkpoint (step 40) was not saved"*"No space left on device"*)
        ok "error: the fatal line, with its cause" ;;
    *) bad "error: $err" ;;
    esac
    [ "$(aj "$J" 'a["attempts"][0]["steps_lost"]')" = $((40 - latest)) ] &&
        ok "steps_lost $((40 - latest)) (40 - $latest)" || bad "steps_lost $(aj "$J" 'a["attempts"][0]["steps_lost"]')"
    [ "$fails" = 0 ] || cat "$J"
else
    echo "[skip] A: needs root to mount a tmpfs"
fi

# --- B: mpirun naming the rank that exited first, not the one whose error it is
replay() { # replay NAME FATAL0 FATAL1: an mpirun stand-in printing those lines, then exit 1
    cat > "$W/$1" <<SH
#!/usr/bin/env bash
cat >&2 <<'TXT'
shardlm[rank 1/2] error: checkpoint step 20 not saved (the previous one stays \`latest\`): rank 0 failed: /r/checkpoints/step_00000020.tmp/rank_00000.bin: write failed: No space left on device (training continues: --on-ckpt-error continue)
shardlm[rank 1/2] error: train: $3
shardlm[rank 0/2] error: train: $2
shardlm[rank 1/2 on vm, forwarded] error: train: $3
--------------------------------------------------------------------------
mpirun detected that one or more processes exited with non-zero status, thus causing
the job to be terminated. The first process to do so was:

  Process name: [[4242,1],1]
  Exit code:    1
--------------------------------------------------------------------------
TXT
exit 1
SH
    chmod +x "$W/$1"
}
F="/r/checkpoints: the final checkpoint (step 40) was not saved; the newest committed one is step_00000015; the failure: checkpoint step 40 not saved"
replay enospc "$F: /r/rank_00000.bin: write failed: No space left on device" \
    "$F: rank 0 failed: /r/rank_00000.bin: write failed: No space left on device"
U="checkpoint upload to s3://b/run: step_00000040/host_00000.bin: PUT failed: HTTP 500"
replay upload "$U" "rank 0 failed: $U"
# Earlier launches' attempts.json (issue 20 item 6): one written before launches were numbered
# (its attempts become launch 1's) and one that is not JSON (kept aside as attempts.json.bad).
mkdir -p "$W/upload.run" "$W/enospc.run"
echo '{"nproc": 2, "restarts": 1, "result": "failed", "exit_code": 1, "start": 1.7e9, "end": 1.7e9,
 "attempts": [{"attempt": 1, "result": "failed"}, {"attempt": 2, "result": "failed"}]}' > "$W/upload.run/attempts.json"
echo 'not json' > "$W/enospc.run/attempts.json"
for k in enospc upload; do
    "$BIN" launch --nproc 2 --mpirun "$W/$k" --no-health-check --max-restarts 0 -- "${TR[@]}" \
        --steps 40 --out "$W/$k.run" > "$W/$k.log" 2>&1
    check "$k: exit 1" 1 $?
    J=$W/$k.run/attempts.json
    [ "$(aj "$J" 'a["attempts"][-1]["culprit_rank"]')" = 0 ] && ok "$k: culprit rank 0" ||
        { bad "$k: culprit $(aj "$J" 'a["attempts"][-1]["culprit_rank"]')"; cat "$J"; }
    [ "$(aj "$J" 'a["attempts"][-1]["error"].startswith("error: train: ")')" = True ] &&
        ok "$k: error is the fatal line" || bad "$k: error $(aj "$J" 'a["attempts"][-1]["error"]')"
    [ "$(aj "$J" '"rank 1" not in a["attempts"][-1]["reason"]')" = True ] &&
        ok "$k: the reason does not blame rank 1" || bad "$k: reason $(aj "$J" 'a["attempts"][-1]["reason"]')"
done
J=$W/upload.run/attempts.json
[ "$(aj "$J" '[(x["launch"], x["attempt"]) for x in a["attempts"]]')" = "[(1, 1), (1, 2), (2, 1)]" ] &&
    [ "$(aj "$J" '[(x["launch"], x["result"], x["restarts"], x["attempts"]) for x in a["launches"]]')" = \
    "[(1, 'failed', 1, 2), (2, 'failed', 0, 1)]" ] &&
    ok "an attempts.json from before launches were numbered: its attempts kept as launch 1's" ||
    { bad "history"; cat "$J"; }
grep -qx 'not json' "$W/enospc.run/attempts.json.bad" && [ "$(aj "$W/enospc.run/attempts.json" 'a["launch"]')" = 1 ] &&
    has "an unreadable attempts.json is kept aside, with a warning" "$W/enospc.log" 'kept as .*attempts.json.bad' ||
    bad "attempts.json.bad"

no_orphans "no process left"
slm_finish
