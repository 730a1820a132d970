#!/usr/bin/env bash
# Fault test 3 (issue 10): the newest checkpoint is corrupted. SHARDLM_FAULT flips a byte of
# step 6's rank file once it is committed, and rank 1 is killed before step 8: the restart
# resumes with --verify-on-resume (added by the launcher to every restart), which skips step 6
# with a warning naming the bad file and resumes step 4; the job finishes with the
# uninterrupted run's weights after exactly one restart (no restart loop).
# Usage: test_launch_corrupt.sh MPIEXEC.
. "$(dirname "$0")/../lib.sh"
MPIEXEC=${1:-$MPIEXEC}
. "$(dirname "$0")/launch_lib.sh"
set +e
slm_ref 2 10 "$W/ref" --ckpt-sync
SHARDLM_FAULT=corrupt-ckpt:step=6,kill:rank=1:step=8 "$BIN" launch --nproc 2 "${LA[@]}" \
    --hang-timeout 60 -- "${TR[@]}" --ckpt-sync --steps 10 --out "$W/run" > "$W/out.log" 2> "$W/err.log"
check "launch with a corrupt newest checkpoint exits 0" 0 $?
J=$W/run/attempts.json
[ "$(aj "$J" 'len(a["attempts"])')" = 2 ] && [ "$(aj "$J" 'a["restarts"]')" = 1 ] &&
    ok "exactly one restart (no loop)" || { bad "attempts"; cat "$J"; }
[ "$(aj "$J" 'a["attempts"][1]["start_step"]')" = 4 ] && ok "attempt 2 resumed step 4 (step 6 skipped)" ||
    { bad "start step of attempt 2"; cat "$J"; }
has "warning names the corrupt file" "$W/err.log" 'step_00000006.*rank_0000[01]\.bin\|rank_0000[01]\.bin.*step_00000006'
has "the restart verified its checkpoint" "$W/err.log" 'train .*--verify-on-resume'
same_weights "final weights equal the uninterrupted run" "$W/run" "$W/ref" 10
no_orphans "no process of the job left"
slm_finish
