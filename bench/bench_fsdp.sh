#!/usr/bin/env bash
# FSDP memory / speed benchmark (not a test). Uses build/bench/bench_fsdp (bench/bench_fsdp.c):
# the tiny preset (15M parameters), uniform random tokens, global batch 8 x 256 tokens split over
# the ranks, AdamW + clipping included.
#
#   bench/bench_fsdp.sh [--steps S] [--build DIR]
#
# Table 1: per-rank bytes of fp32 params + grads + AdamW state held (the shards), the peak with
#   gathered parameters / full gradients added, and peak RSS, for N = 1, 2, 4 and each strategy
#   (1 thread per rank). The issue's bar: FULL_SHARD at N = 4 holds <= 30% of N = 1's state.
# Table 2: 2 ranks x 1 thread vs 1 rank x 2 threads, global tokens/s ratio for NO_SHARD and
#   FULL_SHARD (target >= 0.9; PyTorch DDP on gloo: 0.62), exposed comm time per step, with and
#   without prefetch and with the MPI progress thread (--progress-thread 100), best of REPS (default 3) runs each. Also the all-gather / reduce-scatter
#   bandwidth (bench_collectives). On a busy machine the 2-thread run suffers most (OpenMP
#   barriers wait for a descheduled thread): run it on an idle machine.
# Writes the tables to stdout and bench/out/bench_fsdp.md.
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=5 BUILD=build
while [ $# -gt 0 ]; do
    case "$1" in
        --steps) STEPS="$2"; shift 2 ;;
        --build) BUILD="$2"; shift 2 ;;
        *) echo "usage: $0 [--steps S] [--build DIR]" >&2; exit 2 ;;
    esac
done
BIN="$BUILD/bench/bench_fsdp"
[ -x "$BIN" ] || { echo "$BIN not built (cmake --build $BUILD --target bench_fsdp)" >&2; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
OUT=bench/out
mkdir -p "$OUT"
GB=8 T=256

run() { # N THREADS ARGS...
    local n=$1 th=$2; shift 2
    if [ "$n" = 1 ]; then
        OMP_NUM_THREADS=$th "$BIN" --threads "$th" --steps "$STEPS" --seq $T "$@"
    else
        mpirun -np "$n" --oversubscribe -x OMP_NUM_THREADS="$th" "$BIN" --threads "$th" \
            --steps "$STEPS" --seq $T "$@"
    fi
}
field() { sed -n "s/.*\b$1=\([^ ]*\).*/\1/p" <<<"$2"; }

{
echo "machine: $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), $(mpirun --version | head -1)"
echo
echo "| strategy | N | state MiB/rank | % of N=1 | peak MiB/rank (state + gathered) | peak RSS MiB | tokens/s | exposed comm ms/step | comm MiB/step/rank |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
} | tee "$OUT/bench_fsdp.md"
base=""
for cfg in "NO_SHARD 1" "FULL_SHARD 2" "FULL_SHARD 4" "SHARD_GRAD_OP 2" "SHARD_GRAD_OP 4" \
           "NO_SHARD 2" "NO_SHARD 4" "HYBRID_SHARD 4"; do
    set -- $cfg
    s=$1 n=$2
    extra=()
    [ "$s" = HYBRID_SHARD ] && extra=(--shard-group-size 2)
    line=$(run "$n" 1 --sharding "$s" --batch $((GB / n)) "${extra[@]}")
    st=$(field state_bytes "$line")
    [ -z "$base" ] && base=$st
    name=$s; [ "$s" = HYBRID_SHARD ] && name="HYBRID_SHARD (G=2)"
    [ "$n" = 1 ] && name="single process (any strategy)"
    printf "| %s | %d | %.1f | %.0f%% | %.1f | %s | %s | %s | %s |\n" "$name" "$n" \
        "$(bc -l <<<"$st/1048576")" "$(bc -l <<<"100*$st/$base")" \
        "$(bc -l <<<"$(field peak_bytes "$line")/1048576")" "$(field rss_mib "$line")" \
        "$(field tok_s "$line")" "$(field exposed_ms "$line")" "$(field comm_mib "$line")" \
        | tee -a "$OUT/bench_fsdp.md"
done

{
echo
echo "| config | strategy | prefetch | tokens/s | ratio vs 1x2 | step ms | exposed comm ms/step |"
echo "|---|---|---|---:|---:|---:|---:|"
} | tee -a "$OUT/bench_fsdp.md"
# The machine may be shared: every throughput row is the best of REPS runs (alternating).
REPS=${REPS:-3}
best() { # ARGS... -> the line with the highest tok_s of REPS runs
    local b="" l
    for _ in $(seq "$REPS"); do
        l=$(run "$@")
        if [ -z "$b" ] || [ "$(bc -l <<<"$(field tok_s "$l") > $(field tok_s "$b")")" = 1 ]; then b=$l; fi
    done
    echo "$b"
}
one=$(best 1 2 --sharding NO_SHARD --batch $GB)
ref=$(field tok_s "$one")
printf "| 1 rank x 2 threads | - | - | %s | 1.00 | %s | 0 |\n" "$ref" "$(field step_ms "$one")" \
    | tee -a "$OUT/bench_fsdp.md"
for s in NO_SHARD FULL_SHARD; do
    for pf in on off "on + progress thread"; do
        args=(--sharding "$s" --batch $((GB / 2)))
        [ "$pf" = off ] && args+=(--no-prefetch)
        [ "$pf" = "on + progress thread" ] && args+=(--progress-thread 100)
        line=$(best 2 1 "${args[@]}")
        printf "| 2 ranks x 1 thread | %s | %s | %s | %.2f | %s | %s |\n" "$s" "$pf" \
            "$(field tok_s "$line")" "$(bc -l <<<"$(field tok_s "$line")/$ref")" \
            "$(field step_ms "$line")" "$(field exposed_ms "$line")" | tee -a "$OUT/bench_fsdp.md"
    done
done

BC="$BUILD/bench/bench_collectives"
if [ -x "$BC" ]; then
    echo | tee -a "$OUT/bench_fsdp.md"
    mpirun -np 2 --oversubscribe "$BC" 64 3 | tee -a "$OUT/bench_fsdp.md"
fi
