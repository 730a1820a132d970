#!/usr/bin/env bash
# `shardlm launch` inside a Slurm allocation: `sbatch deploy/slurm/train.sbatch` with its
# default launcher (shardlm launch --nproc $SLURM_NTASKS) on a private single-node Slurm. The
# launcher must start its health check and the ranks as srun job steps, not with mpirun:
# slurmd's log shows the job's steps 0 (health check) and 1 (training) launched, and an
# `mpirun` put first on the job's PATH that only records its call is never run. The job is
# COMPLETED with exit code 0, attempts.json reports one successful attempt, and the final
# checkpoint is byte-identical to `mpirun -np 2 shardlm train` of the same arguments.
# Env (CTest): SHARDLM_BIN, SLM_SHARED_DIR.
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/slurm_lib.sh"
slm_slurm_start
slm_tiny_data "$W/d" 300 20000
slm_tiny_config "$W/config.json" vocab_size=300
ARGS=(--data "$W/d" --model "$W/config.json" --seq 16 --batch 4 --steps 8 --warmup 2 --lr 3e-3
      --seed 5 --threads 1 --log-every 0 --ckpt-every-steps 4)
mkdir "$W/bin"
printf '#!/bin/sh\necho "mpirun $*" >> %s/mpirun.called\nexit 1\n' "$W" > "$W/bin/mpirun"
chmod +x "$W/bin/mpirun"

set +e # the exit statuses are checked
slm_mpirun 2 -x OMP_NUM_THREADS=1 "$BIN" train "${ARGS[@]}" --out "$W/m" > "$W/m.log" 2>&1
check "mpirun -np 2 train" 0 $?
job=$(PATH="$W/bin:$PATH" SHARDLM="$BIN" SHARDLM_RUN_DIR="$W/run" sbatch --parsable -n 2 -c 1 \
    --time 5 -o "$W/job.out" "$SRC/deploy/slurm/train.sbatch" "${ARGS[@]}")
check "sbatch train.sbatch" 0 $?
slm_slurm_wait_job "$job" COMPLETED 120
check "job $job COMPLETED" 0 $?
set -e
check "job exit code" 0:0 "$(slm_slurm_job_field "$job" ExitCode)"
has "the script ran shardlm launch" "$W/job.out" "launch summary: success"
has "slurmd launched step 0 (health check)" "$W/slurm/log/slurmd.log" \
    "launch task StepId=$job.0 request"
has "slurmd launched step 1 (training)" "$W/slurm/log/slurmd.log" \
    "launch task StepId=$job.1 request"
[ ! -e "$W/mpirun.called" ] && ok "mpirun was not run" ||
    bad "mpirun was run: $(cat "$W/mpirun.called")"
if "$PY" - "$W/run/attempts.json" << 'PYEOF'; then
import json, sys
a = json.load(open(sys.argv[1]))
att = a["attempts"] if isinstance(a, dict) else a
assert len(att) == 1, att
assert att[0]["result"] == "success" and att[0]["world"] == 2, att[0]
# the hosts come from the allocation (SLURM_JOB_NODELIST through scontrol): the node slm1
assert "slm1" in str(att[0].get("hosts", "")), att[0]
PYEOF
    ok "attempts.json: one attempt, success, world 2, on the allocation's node slm1"
else
    bad "attempts.json"
fi
has "health check passed on 2 ranks" "$W/job.out" "health check passed on 2 rank"
same=1
for f in $(cd "$W/m/checkpoints/step_00000008" && ls); do
    cmp "$W/m/checkpoints/step_00000008/$f" "$W/run/checkpoints/step_00000008/$f" || same=0
done
[ $same = 1 ] && ok "launch under Slurm == mpirun: step-8 checkpoint byte for byte" ||
    { cat "$W/job.out"; bad "launch under Slurm == mpirun: step-8 checkpoint"; }
slm_finish
