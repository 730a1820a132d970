#!/usr/bin/env bash
# Training-step benchmark: shardlm train vs PyTorch 2.x from PyPI (bench/setup_torch.sh installs
# it into bench/.venv-torch; driver bench/bench_torch2.py), same configs, shapes and machine,
# AdamW step and clipping 1.0 included, uniform random tokens (shardlm train --synthetic). One
# run per row, all in the same run; not a test. Measure on an idle machine.
#
#   bench/bench_train.sh [--threads N] [--steps S] [--configs "tiny small gqa"] [--no-dist]
#                        [--debian-torch] [--no-bf16] [--before BINARY]
#
# Rows per config (B x T is the global batch):
#   1 x N     shardlm, PyTorch 2.x eager, PyTorch 2.x torch.compile (one process, N threads)
#   2 x 1     (unless --no-dist) shardlm `mpirun -np 2 ... --threads 1` NO_SHARD and FULL_SHARD,
#             PyTorch 2.x DDP and FSDP2 (fully_shard per decoder block), gloo, 2 ranks x 1 thread
#   bf16      (unless --no-bf16) shardlm --compute-dtype bf16 and PyTorch eager / torch.compile
#             under autocast(bfloat16), 1 x N; their MFU column is against the measured bf16 GEMM
#             peak (`shardlm bench-peak --bf16`, oneDNN), the fp32 rows' against the sgemm peak;
#             the header names the ISA oneDNN reports (AVX512-BF16 / AMX, or none)
#   --before  adds, after each shardlm 1 x N row (fp32, and bf16 unless --no-bf16), the same run
#             on BINARY (another build of shardlm, e.g. of the commit before a refactor) with the
#             ratio new / before in the tokens/s and RSS columns: "not slower than before",
#             measured in the same run on the same machine
#   --debian-torch adds the old reference (bench/bench_train_torch.py on .venv/bin/python, i.e.
#             Debian's torch 1.13, whose OpenBLAS falls back to generic kernels on this CPU) as
#             a labelled extra row; it is never the comparison.
# Configs: tiny (8192/288/6/6/6/768, T 256, B 8), small (8192/512/8/8/8/1376, T 512, B 4),
# gqa (32000/512/8/8/2/1376, T 256, B 4). Columns: tokens/s (global, mean over the steps after
# the first), achieved GFLOP/s (tokens/s x (6N + 12 L C T)), MFU against `shardlm bench-peak
# --threads N` (the whole core budget, also for the 2 x 1 rows), peak RSS per rank (MiB; the
# largest rank's for 2 x 1), and the ratio shardlm / that row for tokens/s and RSS (against the
# shardlm row of the same layout: 1 x N; NO_SHARD for DDP; FULL_SHARD for FSDP2); then shardlm's
# peak RSS with --activation-checkpointing. PyTorch uses F.scaled_dot_product_attention and fused
# AdamW (foreach where fused is unavailable; the optimizer column says which).
# Writes the table to stdout and bench/out/bench_train.md.
set -euo pipefail
cd "$(dirname "$0")/.."
THREADS=2 STEPS=6 CONFIGS="tiny small gqa" DIST=1 DEBIAN=0 BF16=1 BEFORE=
while [ $# -gt 0 ]; do
    case "$1" in
        --threads) THREADS="$2"; shift 2 ;;
        --steps) STEPS="$2"; shift 2 ;;
        --configs) CONFIGS="$2"; shift 2 ;;
        --no-dist) DIST=0; shift ;;
        --debian-torch) DEBIAN=1; shift ;;
        --no-bf16) BF16=0; shift ;;
        --before) BEFORE="$2"; shift 2 ;;
        *) echo "usage: $0 [--threads N] [--steps S] [--configs LIST] [--no-dist] [--debian-torch] [--no-bf16] [--before BINARY]" >&2
           exit 2 ;;
    esac
done
BIN="${SHARDLM:-build/shardlm}"
PY="${SLM_PYTHON:-.venv/bin/python}"
TPY="${SLM_TORCH_PYTHON:-bench/.venv-torch/bin/python}"
[ -x "$BIN" ] || { echo "$BIN not built (cmake --build build)" >&2; exit 2; }
[ -z "$BEFORE" ] || [ -x "$BEFORE" ] || { echo "--before $BEFORE: not an executable" >&2; exit 2; }
[ -x "$TPY" ] || { echo "$TPY missing: run bench/setup_torch.sh (PyTorch 2.x from PyPI)" >&2; exit 2; }
TV=$("$TPY" -c 'import torch; print(torch.__version__)')
export OMP_NUM_THREADS="$THREADS" OPENBLAS_NUM_THREADS="$THREADS"
# inductor compiles on this process instead of a pool of workers (shared machines)
export TORCHINDUCTOR_COMPILE_THREADS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
OUT=bench/out
mkdir -p "$OUT"
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT

"$BIN" bench-peak --threads "$THREADS" --n 2048 --reps 5 --bf16 > "$W/peak.txt"
PEAK=$(awk '/^sgemm peak/ {print $3}' "$W/peak.txt")
PEAK16=$(awk '/^bf16 GEMM peak/ {print $4}' "$W/peak.txt")
ISA16=$(sed -n 's/.*oneDNN ISA \(.*\))$/\1/p' "$W/peak.txt")
rss_kb() { awk '/Maximum resident set size/ {print $6}' "$@" | sort -n | tail -1; }
kv() { awk -v k="$1" '$1 == k {print $2}' "$2"; }
slm_tps() { awk '/^done:/ { for (i = 1; i <= NF; i++) if ($i == "tok/s") print $(i-1) }' "$1"; }
# row CONFIG BT IMPL TPS RSS_KB FPT [REF_TPS REF_RSS_KB]: one table line (MFU against $PK)
PK=$PEAK
row() {
    awk -v c="$1" -v bt="$2" -v im="$3" -v t="$4" -v r="$5" -v f="$6" -v pk="$PK" \
        -v rt="${7:-}" -v rr="${8:-}" 'BEGIN {
        rat = (rt != "" && t > 0) ? sprintf("%.2fx", rt / t) : ""
        rar = (rr != "" && r > 0) ? sprintf("%.2fx", rr / r) : ""
        printf "| %s | %s | %s | %.0f | %.1f | %.1f%% | %.0f | %s | %s |\n", c, bt, im, t,
               t * f / 1e9, 100 * t * f / 1e9 / pk, r / 1024, rat, rar }'
}
# before CONFIG B T LABEL TPS RSS [ARGS...]: the same shardlm 1 x N run on $BEFORE (if given),
# as a row whose ratio columns are this build / before
before() {
    [ -n "$BEFORE" ] || return 0
    local c=$1 b=$2 t=$3 label=$4 tps=$5 rss=$6
    shift 6
    /usr/bin/time -v "$BEFORE" train --synthetic --model "$c" --batch "$b" --seq "$t" \
        --steps "$STEPS" --threads "$THREADS" --log-every 0 --out "$(mktemp -d -p "$W")/run" "$@" \
        > "$W/before.out" 2> "$W/before.time"
    row "$c" "$b x $t" "before: $label" "$(slm_tps "$W/before.out")" "$(rss_kb "$W/before.time")" \
        "$FPT" "$tps" "$rss"
}
# torch2 MODE CONFIG.json B T THREADS [WORLD] -> $W/pt.out, $W/pt.time
torch2() {
    "$TPY" bench/bench_torch2.py --mode "$1" --config "$2" --batch "$3" --seq "$4" \
        --steps "$STEPS" --threads "$5" --world "${6:-2}" --autocast "${AUTOCAST:-off}" \
        > "$W/pt.out" 2> "$W/pt.err" \
        || { cat "$W/pt.err" >&2; echo "bench_torch2.py --mode $1 failed" >&2; exit 1; }
}

{
echo "machine: $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')),"\
     "sgemm peak $PEAK GFLOP/s, bf16 GEMM peak ${PEAK16:-?} GFLOP/s (oneDNN: ${ISA16:-?})"\
     "($THREADS threads), $STEPS steps (first excluded), PyTorch $TV"
echo
echo "| config | B x T | impl (ranks x threads) | tokens/s | GFLOP/s | MFU | peak RSS MiB/rank | shardlm / this, tok/s | shardlm / this, RSS |"
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
    S_TPS=$(slm_tps "$W/slm.out")
    S_RSS=$(rss_kb "$W/slm.time")
    FPT=$(sed -n 's/.*"flops_per_token":\([0-9.e+]*\).*/\1/p' "$run/metrics.jsonl")
    {
    row "$cfg" "$B x $T" "shardlm (1 x $THREADS)" "$S_TPS" "$S_RSS" "$FPT"
    before "$cfg" $B $T "$BEFORE (1 x $THREADS)" "$S_TPS" "$S_RSS" --peak-gflops "$PEAK"
    for mode in eager compile; do
        torch2 $mode "$run/config.json" $B $T "$THREADS" 1
        [ $mode = eager ] && kv rss_mib_import "$W/pt.out" > "$W/import_rss"
        name="PyTorch $TV eager"
        [ $mode = compile ] && name="PyTorch $TV torch.compile"
        row "$cfg" "$B x $T" "$name, AdamW $(kv optimizer "$W/pt.out") (1 x $THREADS)" \
            "$(kv tokens_per_s "$W/pt.out")" "$(bc <<<"$(kv rss_mib_max "$W/pt.out") * 1024")" \
            "$FPT" "$S_TPS" "$S_RSS"
    done
    if [ "$BF16" = 1 ]; then # bf16 compute rows, MFU against the bf16 GEMM peak
        PK=$PEAK16
        /usr/bin/time -v "$BIN" train --synthetic --model "$cfg" --batch $B --seq $T \
            --steps "$STEPS" --threads "$THREADS" --peak-gflops "$PEAK16" --log-every 0 \
            --compute-dtype bf16 > "$W/slm16.out" 2> "$W/slm16.time"
        B_TPS=$(slm_tps "$W/slm16.out") B_RSS=$(rss_kb "$W/slm16.time")
        row "$cfg" "$B x $T" "shardlm --compute-dtype bf16 (1 x $THREADS)" "$B_TPS" "$B_RSS" "$FPT" \
            "$S_TPS" "$S_RSS"
        before "$cfg" $B $T "$BEFORE --compute-dtype bf16 (1 x $THREADS)" "$B_TPS" "$B_RSS" \
            --peak-gflops "$PEAK16" --compute-dtype bf16
        for mode in eager compile; do
            AUTOCAST=bf16 torch2 $mode "$run/config.json" $B $T "$THREADS" 1
            name="PyTorch $TV eager, autocast bf16"
            [ $mode = compile ] && name="PyTorch $TV torch.compile, autocast bf16"
            row "$cfg" "$B x $T" "$name (1 x $THREADS)" "$(kv tokens_per_s "$W/pt.out")" \
                "$(bc <<<"$(kv rss_mib_max "$W/pt.out") * 1024")" "$FPT" "$B_TPS" "$B_RSS"
        done
        PK=$PEAK
    fi
    if [ "$DIST" = 1 ] && [ $((B % 2)) = 0 ]; then
        for s in NO_SHARD FULL_SHARD; do
            mpirun -np 2 --oversubscribe -x OMP_NUM_THREADS=1 -x OPENBLAS_NUM_THREADS=1 \
                bash -c 'exec /usr/bin/time -v -o "$0.$OMPI_COMM_WORLD_RANK" "$@"' "$W/d.time" \
                "$BIN" train --synthetic --model "$cfg" --batch $((B / 2)) --seq $T \
                --steps "$STEPS" --threads 1 --peak-gflops "$PEAK" --log-every 0 --sharding $s \
                > "$W/d.out" 2> "$W/d.err" || { cat "$W/d.err" >&2; exit 1; }
            tps=$(slm_tps "$W/d.out") rss=$(rss_kb "$W"/d.time.*)
            rm -f "$W"/d.time.*
            eval "D_${s}_TPS=$tps D_${s}_RSS=$rss"
            row "$cfg" "$B x $T" "shardlm $s (2 x 1)" "$tps" "$rss" "$FPT"
        done
        for mode in ddp fsdp2; do
            torch2 $mode "$run/config.json" $B $T 1 2
            if [ $mode = ddp ]; then name="PyTorch $TV DDP" rt=$D_NO_SHARD_TPS rr=$D_NO_SHARD_RSS
            else name="PyTorch $TV FSDP2" rt=$D_FULL_SHARD_TPS rr=$D_FULL_SHARD_RSS; fi
            row "$cfg" "$B x $T" "$name, AdamW $(kv optimizer "$W/pt.out") (2 x 1)" \
                "$(kv tokens_per_s "$W/pt.out")" "$(bc <<<"$(kv rss_mib_max "$W/pt.out") * 1024")" \
                "$FPT" "$rt" "$rr"
        done
    fi
    if [ "$DEBIAN" = 1 ]; then
        /usr/bin/time -v "$PY" bench/bench_train_torch.py "$run/config.json" $B $T "$STEPS" \
            "$THREADS" > "$W/deb.out" 2> "$W/deb.time"
        row "$cfg" "$B x $T" "extra: Debian torch $("$PY" -c 'import torch; print(torch.__version__)') eager, not the reference (1 x $THREADS)" \
            "$(kv tokens_per_s "$W/deb.out")" "$(rss_kb "$W/deb.time")" "$FPT" "$S_TPS" "$S_RSS"
    fi
    /usr/bin/time -v "$BIN" train --synthetic --model "$cfg" --batch $B --seq $T --steps 2 \
        --threads "$THREADS" --peak-gflops "$PEAK" --log-every 0 --activation-checkpointing \
        > /dev/null 2> "$W/ac.time"
    A_RSS=$(rss_kb "$W/ac.time")
    awk -v c="$cfg" -v bt="$B x $T" -v sr="$S_RSS" -v ar="$A_RSS" -v th="$THREADS" 'BEGIN {
        printf "| %s | %s | shardlm --activation-checkpointing (1 x %s) | | | | %.0f | | %.2fx of no-ckpt |\n",
               c, bt, th, ar / 1024, ar / sr }'
    } | tee -a "$OUT/bench_train.md"
done
echo | tee -a "$OUT/bench_train.md"
echo "PyTorch's peak RSS includes $(cat "$W/import_rss") MiB held right after \`import torch\`" \
     "in the eager run (the PyPI Linux wheel maps its CUDA libraries also on CPU)." | tee -a "$OUT/bench_train.md"
