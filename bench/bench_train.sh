#!/usr/bin/env bash
# Training-step benchmark: shardlm train vs the PyTorch reference (tests/reference/llama_ref.py +
# torch.optim.AdamW), same configs, shapes, thread count and machine, AdamW step and clipping
# included, uniform random tokens (shardlm train --synthetic). One run per row; not a test.
#
#   bench/bench_train.sh [--threads N] [--steps S] [--configs "tiny small gqa"]
#
# Rows: tiny (8192/288/6/6/6/768, T 256, B 8), small (8192/512/8/8/8/1376, T 512, B 4),
# gqa (32000/512/8/8/2/1376, T 256, B 4). Columns: tokens/s (mean over the steps after the first),
# achieved GFLOP/s (tokens/s x (6N + 12 L C T)), MFU against `shardlm bench-peak`, peak RSS
# (/usr/bin/time -v), and shardlm/PyTorch ratios; then shardlm's peak RSS with
# --activation-checkpointing. Writes the table to stdout and bench/out/bench_train.md.
set -euo pipefail
cd "$(dirname "$0")/.."
THREADS=2 STEPS=6 CONFIGS="tiny small gqa"
while [ $# -gt 0 ]; do
    case "$1" in
        --threads) THREADS="$2"; shift 2 ;;
        --steps) STEPS="$2"; shift 2 ;;
        --configs) CONFIGS="$2"; shift 2 ;;
        *) echo "usage: $0 [--threads N] [--steps S] [--configs LIST]" >&2; exit 2 ;;
    esac
done
BIN="${SHARDLM:-build/shardlm}"
PY="${SLM_PYTHON:-.venv/bin/python}"
export OMP_NUM_THREADS="$THREADS" OPENBLAS_NUM_THREADS="$THREADS"
OUT=bench/out
mkdir -p "$OUT"
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT

PEAK=$("$BIN" bench-peak --threads "$THREADS" --n 2048 --reps 5 | awk '{print $3}')
rss_kb() { awk '/Maximum resident set size/ {print $6}' "$1"; }

{
echo "machine: $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')),"\
     "threads $THREADS, sgemm peak $PEAK GFLOP/s, $STEPS steps (first excluded)"
echo
echo "| config | B x T | impl | tokens/s | GFLOP/s | MFU | peak RSS MiB | ratio tok/s | ratio RSS |"
echo "|---|---|---|---:|---:|---:|---:|---:|---:|"
} | tee "$OUT/bench_train.md"

for cfg in $CONFIGS; do
    case $cfg in
        tiny) B=8 T=256 ;;
        small) B=4 T=512 ;;
        gqa) B=4 T=256 ;;
        *) echo "unknown config $cfg" >&2; exit 2 ;;
    esac
    run="$W/$cfg"
    /usr/bin/time -v "$BIN" train --synthetic --model "$cfg" --batch $B --seq $T --steps "$STEPS" \
        --threads "$THREADS" --peak-gflops "$PEAK" --log-every 0 --out "$run" \
        > "$W/slm.out" 2> "$W/slm.time"
    S_TPS=$(awk '/^done:/ { for (i = 1; i <= NF; i++) if ($i == "tok/s") print $(i-1) }' "$W/slm.out")
    S_RSS=$(rss_kb "$W/slm.time")
    FPT=$(sed -n 's/.*"flops_per_token":\([0-9.e+]*\).*/\1/p' "$run/metrics.jsonl")
    /usr/bin/time -v "$PY" bench/bench_train_torch.py "$run/config.json" $B $T "$STEPS" "$THREADS" \
        > "$W/pt.out" 2> "$W/pt.time"
    P_TPS=$(awk '$1 == "tokens_per_s" {print $2}' "$W/pt.out")
    P_RSS=$(rss_kb "$W/pt.time")
    # Debian's torch runs on the same OpenBLAS 0.3.21, which does not know this CPU model and
    # falls back to its generic SSE3 sgemm (shardlm switches it to the AVX-512 kernels, see
    # src/kernels/blas.c). The second PyTorch row forces the same kernels for torch, so the
    # ratio against it measures everything but the BLAS choice.
    OPENBLAS_CORETYPE=SkylakeX "$PY" bench/bench_train_torch.py "$run/config.json" $B $T \
        "$STEPS" "$THREADS" > "$W/pt2.out" 2> /dev/null || true
    P2_TPS=$(awk '$1 == "tokens_per_s" {print $2}' "$W/pt2.out")
    [ -n "$P2_TPS" ] || P2_TPS=0
    /usr/bin/time -v "$BIN" train --synthetic --model "$cfg" --batch $B --seq $T --steps 2 \
        --threads "$THREADS" --peak-gflops "$PEAK" --log-every 0 --activation-checkpointing \
        > /dev/null 2> "$W/ac.time"
    A_RSS=$(rss_kb "$W/ac.time")
    awk -v c="$cfg" -v bt="$B x $T" -v st="$S_TPS" -v pt="$P_TPS" -v sr="$S_RSS" -v pr="$P_RSS" \
        -v ar="$A_RSS" -v f="$FPT" -v pk="$PEAK" -v p2="$P2_TPS" 'BEGIN {
        printf "| %s | %s | shardlm | %.0f | %.1f | %.1f%% | %.0f | %.2fx | %.2fx |\n", c, bt, st,
               st * f / 1e9, 100 * st * f / 1e9 / pk, sr / 1024, st / pt, sr / pr
        printf "| %s | %s | PyTorch | %.0f | %.1f | %.1f%% | %.0f | | |\n", c, bt, pt,
               pt * f / 1e9, 100 * pt * f / 1e9 / pk, pr / 1024
        if (p2 > 0)
            printf "| %s | %s | PyTorch, OPENBLAS_CORETYPE=SkylakeX | %.0f | %.1f | %.1f%% | | %.2fx | |\n",
                   c, bt, p2, p2 * f / 1e9, 100 * p2 * f / 1e9 / pk, st / p2
        printf "| %s | %s | shardlm --activation-checkpointing | | | | %.0f | | %.2fx of no-ckpt |\n",
               c, bt, ar / 1024, ar / sr }' | tee -a "$OUT/bench_train.md"
done
