#!/usr/bin/env bash
# Checkpoint benchmark (not a test): save and load bandwidth against the disk's own sequential
# write rate measured in the same run (dd, 512 MiB, fdatasync), and the training-thread stall of
# an asynchronous save against the synchronous save time; world sizes 1 and 2 (mpirun, each rank
# a FULL_SHARD 1/N range of every unit: fp32 params + AdamW m, v of the whole model).
#
#   bench/bench_ckpt.sh [--config small] [--build build] [--dir DIR] [--step-s 0.5]
#
# The asynchronous save is measured as training sees it: save, then the next step's compute
# (a busy loop of --step-s seconds reading the shards), then the fence before the optimizer
# step; stall = time in save + fence wait. A step shorter than the staging copy (~0.2 s for
# 400 MB here) waits for the rest of the copy at the fence.
#
# The driver is tests/ckpt/ckpt_bench.c (built with the tests). Loads are from a cold page cache
# (posix_fadvise DONTNEED on the rank files) and verify every 4 MiB chunk's XXH64.
# Targets (issue 5): save and load >= 70% of the dd rate; async stall <= 10% of a sync save.
set -euo pipefail
cd "$(dirname "$0")/.."
CONFIG=small BUILD=build DIR="" STEP_S=0.5
while [ $# -gt 0 ]; do
    case "$1" in
        --config) CONFIG="$2"; shift 2 ;;
        --build) BUILD="$2"; shift 2 ;;
        --dir) DIR="$2"; shift 2 ;;
        --step-s) STEP_S="$2"; shift 2 ;;
        *) echo "usage: $0 [--config SPEC] [--build DIR] [--dir SCRATCH] [--step-s S]" >&2; exit 2 ;;
    esac
done
TOOL="$BUILD/tests/ckpt/ckpt_bench"
[ -x "$TOOL" ] || cmake --build "$BUILD" --target ckpt_bench >/dev/null
W=$(mktemp -d ${DIR:+-p "$DIR"})
trap 'rm -rf "$W"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1

dd_out=$(dd if=/dev/zero of="$W/dd.bin" bs=1M count=512 conv=fdatasync 2>&1 | tail -1)
rm -f "$W/dd.bin"
# "536870912 bytes (537 MB, 512 MiB) copied, 1.38 s, 390 MB/s"
dd_s=$(echo "$dd_out" | sed -E 's/.*copied, ([0-9.]+) s.*/\1/')
dd_mbps=$(awk -v s="$dd_s" 'BEGIN { printf "%.1f", 536.870912 / s }')
echo "disk: dd 512 MiB conv=fdatasync: $dd_mbps MB/s ($dd_out); model $CONFIG; step $STEP_S s"
printf "| N | bytes | sync save s | save MB/s | save/dd | async stall s | stall/sync | load s | load MB/s | load/dd | bitwise |\n"
printf "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n"
for N in 1 2; do
    rm -rf "$W/ck"
    if [ "$N" = 1 ]; then out=$("$TOOL" "$CONFIG" "$W/ck" "$STEP_S"); else
        out=$(mpirun -n "$N" "$TOOL" "$CONFIG" "$W/ck" "$STEP_S"); fi
    get() { echo "$out" | awk -v k="$1" '{ for (i = 1; i < NF; i++) if ($i == k) print $(i + 1) }'; }
    ss=$(get sync_save_s); smb=$(get MBps | head -1); bytes=$(get bytes)
    st=$(get async_stall_s); ls=$(get load_s); lmb=$(get MBps | tail -1); bw=$(get bitwise)
    awk -v n="$N" -v b="$bytes" -v ss="$ss" -v smb="$smb" -v st="$st" -v ls="$ls" -v lmb="$lmb" \
        -v dd="$dd_mbps" -v bw="$bw" 'BEGIN {
        printf "| %d | %.0f | %.3f | %.1f | %.0f%% | %.4f | %.1f%% | %.3f | %.1f | %.0f%% | %s |\n",
               n, b, ss, smb, 100 * smb / dd, st, 100 * st / ss, ls, lmb, 100 * lmb / dd, bw }'
done

# The same through shardlm train (world of one, synthetic tokens, --model $CONFIG, B 1 x T 64):
# the trainer logs the largest training-thread stall of its checkpoints (sync: the whole save).
BIN="$BUILD/shardlm"
if [ -x "$BIN" ]; then
    for mode in sync async; do
        flag=(); [ $mode = sync ] && flag=(--ckpt-sync)
        rm -rf "$W/run"
        "$BIN" train --synthetic --model "$CONFIG" --batch 1 --seq 64 --steps 4 --threads 2 \
            --peak-gflops 10 --log-every 0 --ckpt-every-steps 2 "${flag[@]}" --out "$W/run" \
            2> "$W/train.err" > /dev/null
        stall=$(sed -nE 's/.*training stall ([0-9.]+) ms max.*/\1/p' "$W/train.err")
        step=$(grep -o '"ms_per_step":[0-9.e+]*' "$W/run/metrics.jsonl" | tail -1 | cut -d: -f2)
        echo "train $mode: max checkpoint stall $stall ms (step $step ms)"
    done
fi
