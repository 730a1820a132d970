#!/usr/bin/env bash
# The bitwise baseline of a refactor (issues 21 and 24): a few short training runs whose exported
# weights and per-step losses must hash identically before and after a change that claims to keep
# behaviour. Prints one line per run: NAME  sha256(losses)  sha256(exported weights), then the
# sha256 of all of them (the one figure to compare).
#   fp32-w1      fp32, world of one
#   ac-w1        fp32, world of one, --activation-checkpointing
#   full-w2      FULL_SHARD on 2 ranks
#   noshard-w2   NO_SHARD on 2 ranks
#   bf16p-w2     FULL_SHARD on 2 ranks, --param-dtype bf16 --reduce-dtype bf16
#   lora-w1      LoRA rank 4 on the fp32 run's export (adapter weights hashed)
# Usage: scripts/baseline.sh [SHARDLM_BINARY]   (default build/shardlm; needs mpirun, and
# ../shared/data/tinyshakespeare.txt beside the repository). Threads are fixed at 1 per rank.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
BIN=$(realpath "${1:-$here/build/shardlm}")
TXT="${SLM_SHARED_DIR:-$here/../shared}/data/tinyshakespeare.txt"
[ -f "$TXT" ] || { echo "baseline: $TXT not found" >&2; exit 1; }
W=$(mktemp -d "${TMPDIR:-/tmp}/slm-baseline.XXXXXX")
trap 'rm -rf "$W"' EXIT
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPI=(mpirun -np 2 --oversubscribe --bind-to none)

"$BIN" tokenizer train --input "$TXT" --vocab-size 512 --out "$W/tokenizer.json" > /dev/null
"$BIN" prep --tokenizer "$W/tokenizer.json" --input "$TXT" --out "$W/data" --quiet > /dev/null
COMMON=(--data "$W/data" --model tiny --vocab-size 512 --batch 4 --seq 64 --steps 12 --seed 7 --threads 1
    --quiet --log-every 0)

losses() { # metrics.jsonl -> every step's loss, in step order, as printed
    python3 -c '
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if "loss" in r and "step" in r: print(r["step"], repr(r["loss"]))
' "$1/metrics.jsonl" | sha256sum | cut -c1-16
}
weights() { # export directory -> sha256 of its safetensors files
    cat "$1"/*.safetensors | sha256sum | cut -c1-16
}
run() { # NAME LAUNCHER... -- TRAIN ARGS...
    local name=$1; shift
    local pre=()
    while [ "$1" != "--" ]; do pre+=("$1"); shift; done
    shift
    "${pre[@]}" "$BIN" train "${COMMON[@]}" --out "$W/$name" "$@" > "$W/$name.log" 2>&1 ||
        { cat "$W/$name.log" >&2; echo "baseline: run $name failed" >&2; exit 1; }
    "$BIN" ckpt export "$W/$name" --hf "$W/$name.hf" --quiet > /dev/null 2>&1
    printf '%-12s %s %s\n' "$name" "$(losses "$W/$name")" "$(weights "$W/$name.hf")"
}
{
    run fp32-w1 env --
    run ac-w1 env -- --activation-checkpointing
    run full-w2 "${MPI[@]}" -- --sharding FULL_SHARD
    run noshard-w2 "${MPI[@]}" -- --sharding NO_SHARD
    run bf16p-w2 "${MPI[@]}" -- --param-dtype bf16 --reduce-dtype bf16
    run lora-w1 env -- --init-from-hf "$W/fp32-w1.hf" --lora-rank 4 --lr 1e-3
} | tee "$W/table"
echo "all          $(sha256sum < "$W/table" | cut -c1-16)"
