#!/usr/bin/env bash
# `srun -n 2 --mpi=pmix shardlm train` on a private single-node Slurm (tests/slurm/slurm_lib.sh)
# against `mpirun -np 2` of the same run: both start 2 ranks of one world (every rank logs
# "rank R/2"), and give byte-identical checkpoints (every file of the final step, manifest
# included) and identical losses (metrics.jsonl). Then the clean-up of the library itself: with
# a job step still running, slm_slurm_stop leaves no daemon, slurmstepd or job task behind.
# Env (CTest): SHARDLM_BIN, SLM_SHARED_DIR.
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/slurm_lib.sh"
slm_slurm_start
slm_tiny_data "$W/d" 300 20000
slm_tiny_config "$W/config.json" vocab_size=300
ARGS=(train --data "$W/d" --model "$W/config.json" --seq 16 --batch 4 --steps 6 --warmup 2
      --lr 3e-3 --seed 3 --threads 1 --log-every 0 --ckpt-every-steps 3)
losses() {
    grep '"event":"step"' "$1/metrics.jsonl" | sed -E 's/.*"step":([0-9]+),"loss":([^,]*),.*/\1 \2/'
}

set +e # the exit statuses are checked
slm_mpirun 2 -x OMP_NUM_THREADS=1 "$BIN" "${ARGS[@]}" --out "$W/m" > "$W/m.log" 2>&1
check "mpirun -np 2 train" 0 $?
OMP_NUM_THREADS=1 timeout 120 srun -n 2 --mpi=pmix "$BIN" "${ARGS[@]}" --out "$W/s" \
    > "$W/s.log" 2>&1
rc=$?
set -e
check "srun -n 2 --mpi=pmix train" 0 "$rc"
[ "$rc" = 0 ] || { cat "$W/s.log"; slm_slurm_logs; }
has "srun: rank 0 of a world of 2" "$W/s.log" "rank 0/2\]"
has "srun: rank 1 of a world of 2" "$W/s.log" "rank 1/2\]"
want=$(cd "$W/m/checkpoints/step_00000006" && ls)
got=$(cd "$W/s/checkpoints/step_00000006" 2> /dev/null && ls || true)
if [ "$want" = "$got" ] && [ "$(echo "$want" | grep -c '^rank_')" = 2 ]; then
    ok "srun: the same checkpoint files (2 rank files)"
else
    bad "srun: checkpoint files: [$got], expected [$want]"
fi
same=1
for f in $want; do
    cmp "$W/m/checkpoints/step_00000006/$f" "$W/s/checkpoints/step_00000006/$f" || same=0
done
[ $same = 1 ] && ok "srun == mpirun: step-6 checkpoint byte for byte" ||
    bad "srun == mpirun: step-6 checkpoint differs"
if [ "$(losses "$W/m" | wc -l)" = 6 ] && diff <(losses "$W/m") <(losses "$W/s"); then
    ok "srun == mpirun: losses of steps 1-6"
else
    bad "srun == mpirun: losses"
fi

# clean-up: a step still running when the cluster stops
srun -n 1 sleep 300 > /dev/null 2>&1 &
srun_pid=$!
wait_step() { # until the step's task runs (up to 30 s)
    local i
    for i in $(seq 1 150); do
        [ -n "$(slm_slurm_leftovers_ | grep -v -x -e "${SLM_SLURM_PIDS[0]}" \
            -e "${SLM_SLURM_PIDS[1]}" -e "${SLM_SLURM_PIDS[2]}")" ] && squeue -h | grep -q . &&
            return 0
        sleep 0.2
    done
    return 1
}
wait_step && ok "a step runs (slurmstepd, task found)" || bad "the sleep step did not start"
dir=$SLM_SLURM_DIR
pids=("${SLM_SLURM_PIDS[@]}")
slm_slurm_stop 2> "$W/stop.err"
alive=""
for p in "${pids[@]}"; do kill -0 "$p" 2> /dev/null && alive+=" $p"; done
[ -z "$alive" ] && ok "stop: munged, slurmctld, slurmd gone" || bad "stop: still running:$alive"
SLM_SLURM_DIR=$dir
left=$(slm_slurm_leftovers_)
SLM_SLURM_DIR=""
[ -z "$left" ] && ok "stop: no slurmstepd or job task left" ||
    { ps -o pid,stat,cmd -p $left; bad "stop: left behind: $left"; kill -KILL $left; }
kill -KILL "$srun_pid" 2> /dev/null || true # the client (gone with its step already)
wait "$srun_pid" 2> /dev/null || true
slm_finish
