#!/usr/bin/env bash
# Jobs of the shipped deploy/slurm/train.sbatch interrupted twice mid-run on a private
# single-node Slurm, and their final weights == an uninterrupted `mpirun -np 2` run's, bitwise.
# Two jobs side by side (sbatch -O: both fit on any machine), one per way the script starts the
# ranks: L with shardlm launch (the default; --no-health-check, test_slurm_launch covers it),
# S with SHARDLM_LAUNCHER=srun. Each job is interrupted
#   1. the time-limit way: once it has a periodic checkpoint, USR1 to its batch shell
#      (`scancel --signal=USR1 --batch`, what `#SBATCH --signal=B:USR1@120` sends); the script
#      stops the ranks (L: through shardlm launch; S: scancel --signal=TERM to the steps), they
#      checkpoint and exit 75, and the script requeues the job itself;
#   2. the Slurm way: in its second start, once that has written a newer checkpoint than the one
#      it resumed from, `scontrol requeue` (TERM to every process of the job, as preemption);
# and its third start finishes. Checked per job: Restarts=2, COMPLETED with exit 0, the script's
# requeue line (after exit 75), the second start's ranks exiting 75 on Slurm's TERM (the script
# waits for them), starts 2 and 3 resumed from a checkpoint, every step's loss of every start equal
# to the uninterrupted run's at that step with all steps covered, and the final checkpoint's
# files byte-identical. SHARDLM_FAULT=slow keeps each step >= 15 ms so a run is still going when
# an interruption arrives. Env (CTest): SHARDLM_BIN, SLM_SHARED_DIR.
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
newest() { # newest TAG: the newest step directory of job TAG's run (0 if none)
    local s
    s=$(ls "$W/run$1/checkpoints" 2> /dev/null | sed -n 's/^step_0*\([0-9][0-9]*\)$/\1/p' |
        sort -n | tail -1)
    echo "${s:-0}"
}
wait_for() { # wait_for SECONDS WHAT COMMAND...: polls COMMAND every 0.1 s
    local n=$(($1 * 10)) what=$2 i
    shift 2
    for i in $(seq 1 "$n"); do
        "$@" && return 0
        sleep 0.1
    done
    echo "timed out after $1 s waiting for $what" >&2
    return 1
}
declare -A job s1
restarts_is() { [ "$(slm_slurm_job_field "${job[$1]}" Restarts)" = "$2" ]; } # TAG N
running_is() { # running_is TAG RESTARTS: that start of the job is RUNNING
    restarts_is "$1" "$2" && [ "$(slm_slurm_job_field "${job[$1]}" JobState)" = RUNNING ]
}
newer_than() { [ "$(newest "$1")" -gt "$2" ]; } # TAG STEP

set +e # the exit statuses are checked
slm_mpirun 2 -x OMP_NUM_THREADS=1 "$BIN" train "${ARGS[@]}" --out "$W/m" > "$W/m.log" 2>&1
check "uninterrupted mpirun -np 2 train" 0 $?
for t in L S; do
    launcher=launch
    [ $t = S ] && launcher=srun
    job[$t]=$(SHARDLM="$BIN" SHARDLM_RUN_DIR="$W/run$t" SHARDLM_LAUNCHER=$launcher \
        SHARDLM_LAUNCH_ARGS=--no-health-check sbatch --parsable -n 2 -O --time 10 \
        -o "$W/job$t.out" "$SRC/deploy/slurm/train.sbatch" "${ARGS[@]}")
    check "$t: sbatch train.sbatch (SHARDLM_LAUNCHER=$launcher)" 0 $?
done

# 1. the time-limit warning once step 20's checkpoint exists
for t in L S; do
    wait_for 60 "$t: the first checkpoint" newer_than $t 19
    check "$t: start 1 wrote a checkpoint" 0 $?
    scancel --signal=USR1 --batch "${job[$t]}"
done
for t in L S; do
    wait_for 30 "$t: the job to requeue itself" restarts_is $t 1
    check "$t: USR1: the script requeued the job" 0 $?
    s1[$t]=$(newest $t)
    [ "${s1[$t]}" -lt $STEPS ] && ok "$t: start 1 stopped before the end (step ${s1[$t]})" ||
        bad "$t: start 1 ran to the end before the signal came"
done

# 2. scontrol requeue once the second start has a newer checkpoint
for t in L S; do
    wait_for 60 "$t: the second start" running_is $t 1
    check "$t: start 2 running" 0 $?
    wait_for 60 "$t: a checkpoint of start 2" newer_than $t "${s1[$t]}"
    check "$t: start 2 wrote a newer checkpoint" 0 $?
    scontrol requeue "${job[$t]}"
    check "$t: scontrol requeue" 0 $?
done
for t in L S; do
    wait_for 30 "$t: the requeue" restarts_is $t 2
    s=$(newest $t)
    [ "$s" -lt $STEPS ] && ok "$t: start 2 stopped before the end (step $s)" ||
        bad "$t: start 2 ran to the end before the requeue came"
done

for t in L S; do
    slm_slurm_wait_job "${job[$t]}" COMPLETED 90
    check "$t: job COMPLETED after 2 requeues" 0 $?
done
set -e
final=$(printf 'step_%08d' $STEPS)
losses "$W/m/metrics.jsonl" > "$W/ref.txt"
for t in L S; do
    j=${job[$t]}
    check "$t: Restarts" 2 "$(slm_slurm_job_field "$j" Restarts)"
    check "$t: job exit code" 0:0 "$(slm_slurm_job_field "$j" ExitCode)"
    has "$t: start 3 logged" "$W/job$t.out" "job $j start 3 "
    has "$t: the script requeued itself on USR1" "$W/job$t.out" "exit 75); requeueing job $j"
    has "$t: scontrol requeue: the ranks checkpointed (exit 75)" "$W/job$t.out" "shardlm exit 75"
    n=$(grep -c "resumed from" "$W/job$t.out" || true)
    [ "$n" -ge 2 ] && ok "$t: starts 2 and 3 resumed from a checkpoint ($n resume lines)" ||
        { cat "$W/job$t.out"; bad "$t: resumed from: $n lines, expected >= 2"; }
    # every loss logged by any start equals the uninterrupted run's at that step
    losses "$W/run$t/metrics.jsonl" > "$W/got$t.txt"
    if awk -v n=$STEPS 'NR == FNR { ref[$1] = $2; nref++; next }
            { if (!($1 in ref) || ref[$1] != $2) { print "step " $1 ": " $2 " vs " ref[$1]; bad++ }
              seen[$1] = 1 }
            END { for (k in seen) ns++; exit !(nref == n && ns == n && bad == 0) }' \
            "$W/ref.txt" "$W/got$t.txt"; then
        ok "$t: losses of every start == uninterrupted run's, steps 1-$STEPS covered"
    else
        bad "$t: losses differ from the uninterrupted run's or steps missing"
    fi
    same=1
    for f in $(cd "$W/m/checkpoints/$final" && ls); do
        cmp "$W/m/checkpoints/$final/$f" "$W/run$t/checkpoints/$final/$f" || same=0
    done
    [ $same = 1 ] && ok "$t: requeued job == uninterrupted run: $final byte for byte" ||
        { tail -30 "$W/job$t.out"; bad "$t: requeued job: $final differs"; }
done
slm_finish
