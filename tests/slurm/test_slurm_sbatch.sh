#!/usr/bin/env bash
# `sbatch deploy/slurm/train.sbatch` (the shipped script, pointed at a tiny run through its
# environment variables) with SHARDLM_LAUNCHER=srun (the ranks straight under srun; the default,
# shardlm launch, is test_slurm_launch) on a private single-node Slurm: the job is COMPLETED
# with exit code 0, its output names 2 ranks, and the run directory's final checkpoint is
# byte-identical to `mpirun -np 2` of the same training arguments. Without SHARDLM_RUN_DIR, and
# with an unknown SHARDLM_LAUNCHER, the job fails with a message naming the variable.
# Env (CTest): SHARDLM_BIN, SLM_SHARED_DIR.
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/slurm_lib.sh"
slm_slurm_start
slm_tiny_data "$W/d" 300 20000
slm_tiny_config "$W/config.json" vocab_size=300
ARGS=(--data "$W/d" --model "$W/config.json" --seq 16 --batch 4 --steps 8 --warmup 2 --lr 3e-3
      --seed 5 --threads 1 --log-every 0 --ckpt-every-steps 4)
SCRIPT="$SRC/deploy/slurm/train.sbatch"

set +e # the exit statuses are checked
slm_mpirun 2 -x OMP_NUM_THREADS=1 "$BIN" train "${ARGS[@]}" --out "$W/m" > "$W/m.log" 2>&1
check "mpirun -np 2 train" 0 $?
job=$(SHARDLM="$BIN" SHARDLM_RUN_DIR="$W/run" SHARDLM_LAUNCHER=srun sbatch --parsable -n 2 -c 1 \
    --time 5 -o "$W/job.out" "$SCRIPT" "${ARGS[@]}")
check "sbatch train.sbatch" 0 $?
slm_slurm_wait_job "$job" COMPLETED 90
check "job $job COMPLETED" 0 $?
set -e
check "job exit code" 0:0 "$(slm_slurm_job_field "$job" ExitCode)"
has "job output: 2 ranks" "$W/job.out" "2 ranks, run dir $W/run"
has "job output: shardlm exit 0" "$W/job.out" "shardlm exit 0"
same=1
for f in $(cd "$W/m/checkpoints/step_00000008" && ls); do
    cmp "$W/m/checkpoints/step_00000008/$f" "$W/run/checkpoints/step_00000008/$f" || same=0
done
[ $same = 1 ] && ok "sbatch run == mpirun: step-8 checkpoint byte for byte" ||
    { cat "$W/job.out"; bad "sbatch run == mpirun: step-8 checkpoint"; }

# the run directory is required: the job fails at once, saying so
set +e
job=$(env -u SHARDLM_RUN_DIR SHARDLM="$BIN" sbatch --parsable -n 1 -o "$W/bad.out" "$SCRIPT" \
    "${ARGS[@]}")
slm_slurm_wait_job "$job" FAILED 60
check "no SHARDLM_RUN_DIR: job FAILED" 0 $?
set -e
has "no SHARDLM_RUN_DIR: message" "$W/bad.out" "set SHARDLM_RUN_DIR"
set +e
job=$(SHARDLM="$BIN" SHARDLM_RUN_DIR="$W/run2" SHARDLM_LAUNCHER=mpirun sbatch --parsable -n 1 \
    -o "$W/bad2.out" "$SCRIPT" "${ARGS[@]}")
slm_slurm_wait_job "$job" FAILED 60
check "SHARDLM_LAUNCHER=mpirun: job FAILED" 0 $?
set -e
check "SHARDLM_LAUNCHER=mpirun: exit code 2" 2:0 "$(slm_slurm_job_field "$job" ExitCode)"
has "SHARDLM_LAUNCHER=mpirun: message" "$W/bad2.out" \
    "SHARDLM_LAUNCHER=mpirun: expected launch or srun"
[ ! -e "$W/run2" ] && ok "SHARDLM_LAUNCHER=mpirun: no run directory made" ||
    bad "SHARDLM_LAUNCHER=mpirun: $W/run2 was created"
slm_finish
