#!/usr/bin/env bash
# --snapshot-dir safety (docs/operations.md "Snapshots"), one process, 4-step runs:
#  1. a user's non-empty directory as --snapshot-dir is refused (exit 2, naming it) and nothing in
#     it is touched (snapshots delete what they do not keep: before this check a run deleted
#     every file of the directory, at its start and again at its end);
#  2. a directory holding another run's snapshot: run A crashes (disk step 2, snapshot step 3),
#     run B (other --out, other seed) crashes at the same point and resumes with A's
#     --snapshot-dir: B never restores A's state (before: "resuming from the node-local snapshot"
#     of A), is refused naming A's run dir, and A's snapshot is left intact; A itself resumes
#     from its snapshot;
#  3. an empty directory is used, and removed with the snapshots when the run completes;
#  4. snapshots that cannot be written (here: a file where each step's staging directory goes;
#     a full /dev/shm alike) are warnings: the run completes with exit 0 and its disk
#     checkpoints (before: exit 1, "the run's weights are lost"); the directory stays claimed;
#  5. the default /dev/shm directory holding a stale snapshot without a marker (an earlier
#     binary's) is cleared by a fresh run of the same --out (before: kept, and retention kept it instead of
#     the run's own), and removed when the run completes.
# Env (CTest): SHARDLM_BIN, SLM_SHARED_DIR.
. "$(dirname "$0")/../lib.sh"
set +e
export OMP_NUM_THREADS=1
unset SHARDLM_FAULT SHARDLM_ATTEMPT
slm_tiny_data "$W/data" 300 40000 || exit 1
slm_tiny_config "$W/config.json" vocab_size=300
TR=(train --data "$W/data" --model "$W/config.json" --batch 2 --seq 16 --steps 4 --threads 1
    --peak-gflops 10 --ckpt-every-steps 2 --ckpt-sync)

# --- 1. a user's directory
mkdir -p "$W/mine/step_photos"
echo precious > "$W/mine/notes.txt"
echo x > "$W/mine/step_photos/a.jpg"
"$BIN" "${TR[@]}" --snapshot-every-steps 1 --snapshot-dir "$W/mine" --out "$W/r1" > "$W/r1.log" 2>&1
check "non-empty user directory refused" 2 $?
has "the error names the directory" "$W/r1.log" "snapshot-dir $W/mine: not empty and not a shardlm snapshot directory"
[ "$(cat "$W/mine/notes.txt" 2> /dev/null)" = precious ] && [ -f "$W/mine/step_photos/a.jpg" ] &&
    ok "the user's files are untouched" || { bad "the user's files were deleted"; ls -laR "$W/mine"; }

# --- 2. another run's snapshots
S=$W/shm
SHARDLM_FAULT=kill:rank=0:step=4 "$BIN" "${TR[@]}" --snapshot-every-steps 1 --snapshot-dir "$S" \
    --out "$W/a" > "$W/a.log" 2>&1
[ -d "$W/a/checkpoints/step_00000002" ] && [ -d "$S/step_00000003" ] &&
    ok "run A crashed before step 4: disk step 2, snapshot step 3" ||
    { bad "run A after the crash"; ls "$W/a/checkpoints" "$S"; tail -3 "$W/a.log"; }
SHARDLM_FAULT=kill:rank=0:step=4 "$BIN" "${TR[@]}" --seed 7 --out "$W/b" > "$W/b.log" 2>&1
[ -d "$W/b/checkpoints/step_00000002" ] && ok "run B crashed before step 4: disk step 2" ||
    { bad "run B after the crash"; tail -3 "$W/b.log"; }
SHARDLM_ATTEMPT=2 "$BIN" "${TR[@]}" --seed 7 --snapshot-every-steps 1 --snapshot-dir "$S" --out "$W/b" \
    --resume auto > "$W/b2.log" 2>&1
rc=$?
! grep -q "resuming from the node-local snapshot" "$W/b2.log" && ok "B does not restore A's snapshot" ||
    bad "B restored A's snapshot"
check "B with A's --snapshot-dir refused" 2 $rc
has "the error names A's run" "$W/b2.log" "holds the snapshots of another run (--out $W/a"
[ -f "$S/step_00000003/manifest.json" ] && ok "A's snapshot left intact" || { bad "A's snapshot gone"; ls -la "$S"; }
SHARDLM_ATTEMPT=2 "$BIN" "${TR[@]}" --snapshot-every-steps 1 --snapshot-dir "$S" --out "$W/a" \
    --resume auto > "$W/a2.log" 2>&1
check "A resumes" 0 $?
has "A resumed from its own snapshot" "$W/a2.log" "resuming from the node-local snapshot $S/step_00000003"
[ ! -e "$S" ] && ok "A's snapshots removed once it completed" || { bad "$S left"; ls -la "$S"; }

# --- 3. an empty directory
mkdir -p "$W/empty"
"$BIN" "${TR[@]}" --snapshot-every-steps 1 --snapshot-dir "$W/empty" --out "$W/c" > "$W/c.log" 2>&1
check "an empty --snapshot-dir is used" 0 $?
has "snapshots taken" "$W/c.log" "snapshots: 4 taken"
[ ! -e "$W/empty" ] && ok "and removed at the end" || { bad "$W/empty left"; ls -la "$W/empty"; }

# --- 4. snapshots that fail
F=$W/full
mkdir -p "$F"
printf '%s\n' "$W/d" > "$F/.shardlm-snapshots" # this run's directory (its marker)
for i in 1 2 3 4; do echo x > "$F/step_0000000$i.tmp"; done
"$BIN" "${TR[@]}" --snapshot-every-steps 1 --snapshot-dir "$F" --out "$W/d" > "$W/d.log" 2>&1
check "failing snapshots do not fail the run" 0 $?
has "a warning says so" "$W/d.log" "the last snapshot (step 4) under $F was not saved"
[ -f "$W/d/checkpoints/step_00000004/manifest.json" ] && ok "the final disk checkpoint is there" ||
    bad "no final disk checkpoint"
[ -f "$F/.shardlm-snapshots" ] && [ -f "$F/step_00000001.tmp" ] && ok "the directory stays claimed" ||
    { bad "marker or leftovers gone"; ls -la "$F"; }

# --- 5. the default directory with an unmarked stale snapshot
if [ -d /dev/shm ] && [ -w /dev/shm ]; then
    "$BIN" "${TR[@]}" --snapshot-every-steps 1 --out "$W/e" > "$W/e.log" 2>&1
    D=$(sed -n 's/.*snapshots: every 1 steps into \([^ ]*\) .*/\1/p' "$W/e.log" | head -1)
    if [[ "$D" == /dev/shm/shardlm-* ]] && [ ! -e "$D" ]; then
        slm_on_exit "rm -rf '$D'"
        mkdir -p "$D/step_00000010"
        echo stale > "$D/step_00000010/manifest.json"
        rm -rf "$W/e"
        SHARDLM_FAULT=kill:rank=0:step=4 "$BIN" "${TR[@]}" --snapshot-every-steps 1 --out "$W/e" \
            > "$W/e2.log" 2>&1
        [ -d "$D/step_00000003" ] && [ ! -e "$D/step_00000010" ] &&
            ok "a fresh run cleared the stale snapshot (crash before step 4: snapshot step 3)" ||
            { bad "stale snapshot kept"; ls -la "$D"; }
        SHARDLM_ATTEMPT=2 "$BIN" "${TR[@]}" --snapshot-every-steps 1 --out "$W/e" --resume auto \
            > "$W/e3.log" 2>&1
        check "its resume" 0 $?
        has "from its own snapshot" "$W/e3.log" "resuming from the node-local snapshot $D/step_00000003"
        [ ! -e "$D" ] && ok "the directory removed at the end" || { bad "$D left"; ls -laR "$D"; }
    else
        bad "default directory: '$D'"
    fi
fi
slm_finish
