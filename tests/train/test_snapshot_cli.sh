#!/usr/bin/env bash
# Node-local snapshots (--snapshot-every-steps; issue 10, docs/operations.md "Snapshots"),
# mpirun -np 2 on one host, 8 steps, disk checkpoints every 4, snapshots every step into a
# directory of this test:
#  1. rank 1 killed before step 7 (SHARDLM_FAULT): the disk holds step 4, the snapshot step 6;
#     --resume auto resumes from the snapshot (step 6) and the final checkpoint's rank files
#     equal an uninterrupted run's bitwise (2 steps lost instead of 2 + 2);
#  2. the same crash with a byte of the snapshot's rank file flipped: the full XXH64 check
#     rejects it with a warning naming the file, the run resumes from the disk's step 4 and
#     still ends bitwise equal;
#  3. a run that completes removes its snapshots (the default /dev/shm directory too).
# Usage: test_snapshot_cli.sh MPIEXEC. Env (CTest): SHARDLM_BIN, SLM_SHARED_DIR.
. "$(dirname "$0")/../lib.sh"
set +e
MPIEXEC=${1:-$MPIEXEC}
export OMP_NUM_THREADS=1
unset SHARDLM_FAULT SHARDLM_ATTEMPT
slm_tiny_data "$W/data" 300 40000 || exit 1
slm_tiny_config "$W/config.json" vocab_size=300
TR=(train --data "$W/data" --model "$W/config.json" --batch 2 --seq 16 --steps 8 --threads 1
    --peak-gflops 10 --collective-timeout 120 --ckpt-every-steps 4 --ckpt-sync)
same_final() {
    local f n=0
    for f in "$1"/checkpoints/step_00000008/rank_*.bin; do
        [ -f "$f" ] && cmp -s "$f" "$2/checkpoints/step_00000008/${f##*/}" || return 1
        n=$((n + 1))
    done
    [ $n -gt 0 ]
}
slm_mpirun 2 "$BIN" "${TR[@]}" --out "$W/ref" > "$W/ref.log" 2>&1 || { bad "reference run"; tail "$W/ref.log"; }

for case in clean corrupt; do
    run=$W/$case shm=$W/shm_$case
    SHARDLM_FAULT=kill:rank=1:step=7 slm_mpirun 2 "$BIN" "${TR[@]}" --snapshot-every-steps 1 \
        --snapshot-dir "$shm" --out "$run" > "$run.log" 2>&1
    if [ -d "$run/checkpoints/step_00000004" ] && [ ! -d "$run/checkpoints/step_00000008" ] &&
        [ -d "$shm/step_00000006" ] && [ "$(ls -d "$shm"/step_* | wc -l)" = 1 ]; then
        ok "$case: crash before step 7: disk step 4, snapshot step 6 (the newest only)"
    else
        bad "$case: after the crash"; ls "$run/checkpoints" "$shm"; tail -5 "$run.log"
    fi
    if [ $case = corrupt ]; then
        printf '\x5a' | dd of="$shm/step_00000006/rank_00001.bin" bs=1 seek=200 conv=notrunc 2> /dev/null
    fi
    SHARDLM_ATTEMPT=2 slm_mpirun 2 "$BIN" "${TR[@]}" --snapshot-every-steps 1 --snapshot-dir "$shm" \
        --out "$run" --resume auto > "$run.resume.log" 2>&1
    rc=$?
    if [ $case = clean ]; then
        grep -q "resuming from the node-local snapshot $shm/step_00000006 (step 6" "$run.resume.log" &&
            ok "clean: resumed from the snapshot of step 6" || { bad "clean: not resumed from the snapshot"; cat "$run.resume.log"; }
    else
        grep -q "rank_00001.bin" "$run.resume.log" && grep -q "resumed from .*checkpoints/step_00000004" "$run.resume.log" &&
            ! grep -q "node-local snapshot" "$run.resume.log" &&
            ok "corrupt: the snapshot is rejected naming rank_00001.bin; resumed from the disk's step 4" ||
            { bad "corrupt: fallback"; cat "$run.resume.log"; }
    fi
    [ $rc -eq 0 ] && same_final "$run" "$W/ref" && ok "$case: final weights == uninterrupted run, bitwise" ||
        { bad "$case: resume exit $rc or final weights differ"; tail -5 "$run.resume.log"; }
    [ ! -e "$shm" ] && ok "$case: snapshots removed after the run completed" || { bad "$case: $shm left"; ls -R "$shm"; }
done

# --- 3. the default directory under /dev/shm is removed at the end
if [ -d /dev/shm ] && [ -w /dev/shm ]; then
    slm_mpirun 2 "$BIN" "${TR[@]}" --snapshot-every-steps 2 --out "$W/dflt" > "$W/dflt.log" 2>&1
    rc=$?
    d=$(sed -n 's/.*snapshots: every 2 steps into \([^ ]*\) .*/\1/p' "$W/dflt.log" | head -1)
    grep "snapshots: [0-9]* taken" "$W/dflt.log" | head -1
    if [ $rc -eq 0 ] && [[ "$d" == /dev/shm/shardlm-* ]] && [ ! -e "$d" ]; then
        ok "default snapshot dir $d used and removed at the end"
    else
        bad "default dir: exit $rc, dir '$d'"; tail -5 "$W/dflt.log"; [ -n "$d" ] && rm -rf "$d"
    fi
fi
slm_finish
