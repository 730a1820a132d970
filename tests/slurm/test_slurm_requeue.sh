#!/usr/bin/env bash
# A job of the shipped deploy/slurm/train.sbatch interrupted twice mid-run on a private
# single-node Slurm, and its final weights == an uninterrupted `mpirun -np 2` run's, bitwise:
#   1. the time-limit path: once the first periodic checkpoint exists, USR1 to the batch shell
#      (`scancel --signal=USR1 --batch`, what `#SBATCH --signal=B:USR1@120` sends); the script
#      stops the ranks (they checkpoint) and requeues the job itself;
#   2. the Slurm path: in the second start, once it has written a newer checkpoint than the one
#      it resumed from, `scontrol requeue` (TERM to every process of the job, as preemption);
# the third start finishes. Checked: Restarts=2 and COMPLETED with exit 0; every later start
# resumed from a checkpoint ("resumed from"); every step's loss of every start equals the
# uninterrupted run's at that step, all 60 steps are covered; the final checkpoint's files are
# byte-identical. SHARDLM_FAULT=slow keeps each step >= 15 ms so the run is still going when an
# interruption arrives. Env (CTest): SHARDLM_BIN, SLM_SHARED_DIR.
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/slurm_lib.sh"
slm_slurm_start
slm_tiny_data "$W/d" 300 20000
slm_tiny_config "$W/config.json" vocab_size=300
STEPS=200
ARGS=(--data "$W/d" --model "$W/config.json" --seq 16 --batch 4 --steps $STEPS --warmup 2
      --lr 3e-3 --seed 7 --threads 1 --log-every 0 --ckpt-every-steps 20)
export SHARDLM_FAULT=slow:rank=0:ms=15
losses() { grep '"event":"step"' "$1" | sed -E 's/.*"step":([0-9]+),"loss":([^,]*),.*/\1 \2/'; }
newest() { # the newest step directory of the run (0 if none)
    local s
    s=$(ls "$W/run/checkpoints" 2> /dev/null | sed -n 's/^step_0*\([0-9][0-9]*\)$/\1/p' | sort -n |
        tail -1)
    echo "${s:-0}"
}
wait_for() { # wait_for SECONDS WHAT COMMAND...: polls COMMAND every 0.1 s
    local n=$(($1 * 10)) what=$2 i
    shift 2
    for i in $(seq 1 "$n"); do
        "$@" && return 0
        sleep 0.1
    done
    echo "timed out after $n00 ms waiting for $what" >&2
    return 1
}
restarts_is() { [ "$(slm_slurm_job_field "$job" Restarts)" = "$1" ]; }
running_is() { # running_is RESTARTS: that start is RUNNING
    restarts_is "$1" && [ "$(slm_slurm_job_field "$job" JobState)" = RUNNING ]
}
newer_than() { [ "$(newest)" -gt "$1" ]; }

set +e # the exit statuses are checked
slm_mpirun 2 -x OMP_NUM_THREADS=1 "$BIN" train "${ARGS[@]}" --out "$W/m" > "$W/m.log" 2>&1
check "uninterrupted mpirun -np 2 train" 0 $?
job=$(SHARDLM="$BIN" SHARDLM_RUN_DIR="$W/run" sbatch --parsable -n 2 -c 1 --time 10 \
    -o "$W/job.out" "$SRC/deploy/slurm/train.sbatch" "${ARGS[@]}")
check "sbatch train.sbatch" 0 $?

# 1. the time-limit warning once step 20's checkpoint exists
wait_for 60 "the first checkpoint" newer_than 19
check "start 1 wrote a checkpoint" 0 $?
scancel --signal=USR1 --batch "$job"
wait_for 30 "the job to requeue itself" restarts_is 1
check "USR1: the script requeued the job" 0 $?
s1=$(newest)
echo "start 1 stopped at step $s1 (newest checkpoint)"
[ "$s1" -lt $STEPS ] && ok "start 1 stopped before the end (step $s1)" ||
    bad "start 1 ran to the end before the signal came"

# 2. scontrol requeue once the second start has a newer checkpoint
wait_for 60 "the second start" running_is 1
check "start 2 running" 0 $?
wait_for 60 "a checkpoint of start 2" newer_than "$s1"
check "start 2 wrote a newer checkpoint" 0 $?
scontrol requeue "$job"
check "scontrol requeue" 0 $?
wait_for 30 "the requeue" restarts_is 2
s2=$(newest)
echo "start 2 stopped at step $s2 (newest checkpoint)"
[ "$s2" -lt $STEPS ] && ok "start 2 stopped before the end (step $s2)" ||
    bad "start 2 ran to the end before the requeue came"

slm_slurm_wait_job "$job" COMPLETED 90
check "job COMPLETED after 2 requeues" 0 $?
set -e
check "Restarts" 2 "$(slm_slurm_job_field "$job" Restarts)"
check "job exit code" 0:0 "$(slm_slurm_job_field "$job" ExitCode)"
has "start 3 logged" "$W/job.out" "job $job start 3 "
has "the script requeued itself on USR1" "$W/job.out" "requeueing job $job"
n=$(grep -c "resumed from" "$W/job.out" || true)
[ "$n" -ge 2 ] && ok "starts 2 and 3 resumed from a checkpoint ($n resume lines)" ||
    { cat "$W/job.out"; bad "resumed from: $n lines, expected >= 2"; }
# every loss logged by any start equals the uninterrupted run's at that step
losses "$W/m/metrics.jsonl" > "$W/ref.txt"
losses "$W/run/metrics.jsonl" > "$W/got.txt"
# awk: ref[step] = loss of the uninterrupted run; every logged (step, loss) must match it
if awk -v n=$STEPS 'NR == FNR { ref[$1] = $2; nref++; next }
        { if (!($1 in ref) || ref[$1] != $2) { print "step " $1 ": " $2 " vs " ref[$1]; bad++ }
          seen[$1] = 1 }
        END { for (k in seen) ns++; exit !(nref == n && ns == n && bad == 0) }' \
        "$W/ref.txt" "$W/got.txt"; then
    ok "losses of every start == uninterrupted run's, steps 1-$STEPS covered ($(wc -l < "$W/got.txt") lines)"
else
    bad "losses differ from the uninterrupted run's or steps missing"
fi
final=$(printf 'step_%08d' $STEPS)
same=1
for f in $(cd "$W/m/checkpoints/$final" && ls); do
    cmp "$W/m/checkpoints/$final/$f" "$W/run/checkpoints/$final/$f" || same=0
done
[ $same = 1 ] && ok "requeued job == uninterrupted run: $final byte for byte" ||
    { tail -30 "$W/job.out"; bad "requeued job: $final differs"; }
slm_finish
