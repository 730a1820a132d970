#!/usr/bin/env bash
# `shardlm launch -- train ... --train-from-scratch` over an earlier run's checkpoints (adversarial
# tester break3): attempt 1 moves them aside once (the launcher adds no --resume auto to it, which
# the trainer refuses with --train-from-scratch); a restart after a crash resumes attempt 1's own
# checkpoint (--resume auto, without --train-from-scratch, which would move attempt 1's work aside
# and start over). The final weights equal an uninterrupted run from a seeded init (the earlier
# run: same seed and options). Usage: test_launch_scratch.sh MPIEXEC.
. "$(dirname "$0")/../lib.sh"
MPIEXEC=${1:-$MPIEXEC}
. "$(dirname "$0")/launch_lib.sh"
set +e
T1=("${TR[@]}" --ckpt-sync) # the step-2 save committed before the kill before step 4
slm_ref 1 4 "$W/ref" --ckpt-sync
cp -a "$W/ref" "$W/run"
SHARDLM_FAULT=kill:rank=0:step=4 "$BIN" launch --nproc 1 "${LA[@]}" --no-health-check -- \
    "${T1[@]}" --steps 4 --out "$W/run" --train-from-scratch > "$W/out.log" 2> "$W/err.log"
check "launch --train-from-scratch with a crash exits 0" 0 $?
J=$W/run/attempts.json
a=$(aj "$J" '[(x["start_step"], x["result"]) for x in a["attempts"]][1:]')
[ "$a" = "[(2, 'success')]" ] && ok "the restart resumed attempt 1's step 2: $a" ||
    { bad "restart attempts: $a"; cat "$W/err.log"; }
n=$(ls -d "$W"/run/checkpoints.replaced-* 2>/dev/null | wc -l)
[ "$n" = 1 ] && ok "the earlier run's checkpoints moved aside once" || { bad "$n moved-aside dirs"; ls "$W/run"; }
m=$(ls -d "$W"/run/checkpoints.replaced-* 2>/dev/null | head -1)
[ -n "$m" ] && cmp -s "$m/step_00000004/rank_00000.bin" "$W/ref/checkpoints/step_00000004/rank_00000.bin" &&
    ok "the moved-aside checkpoints are the earlier run's" || bad "moved-aside checkpoints"
same_weights "final weights equal an uninterrupted run from a seeded init" "$W/run" "$W/ref" 4
no_orphans "no process left"
slm_finish
