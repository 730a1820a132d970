#!/usr/bin/env bash
# Quick start: train a small Llama on the King James Bible on this machine's CPUs, then compare
# its validation loss with the validation set's unigram entropy and sample a few lines.
#
#   scripts/quickstart.sh [--data DIR] [--minutes M] [--out DIR] [--threads N] [--vocab V]
#
#   (default)     `bible Gen1:1-Rev22:21` (Debian bible-kjv) -> byte-level BPE tokenizer
#                 (vocab 4096, shardlm tokenizer train) -> shardlm prep (5% of chapters to val)
#   --data DIR    use an already prepared dataset instead (any corpus: shardlm prep output)
#   --minutes M   training wall-time budget (default 15)
#   --out DIR     work directory (default runs/quickstart): corpus, tokenizer, data, run/
#   --threads N   OpenMP / BLAS threads (default: all CPUs)
#
# Training takes 90% of the budget (--max-minutes) and its LR schedule follows the time spent
# (--time-schedule), so the cosine decay completes whatever the machine's speed. The target on the
# Bible: validation loss <= 0.65 x unigram entropy (nats/token). Needs a built shardlm
# (build/shardlm, or SHARDLM=path).
set -euo pipefail
cd "$(dirname "$0")/.."
DATA="" MINUTES=15 OUT="runs/quickstart" THREADS="$(nproc)" VOCAB=4096
while [ $# -gt 0 ]; do
    case "$1" in
        --data) DATA="$2"; shift 2 ;;
        --minutes) MINUTES="$2"; shift 2 ;;
        --out) OUT="$2"; shift 2 ;;
        --threads) THREADS="$2"; shift 2 ;;
        --vocab) VOCAB="$2"; shift 2 ;;
        -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
        *) echo "quickstart: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
done
BIN="${SHARDLM:-build/shardlm}"
if [ ! -x "$BIN" ]; then
    echo "== building shardlm"
    cmake -S . -B build -DCMAKE_BUILD_TYPE=Release > /dev/null
    cmake --build build -j"$(nproc)" --target shardlm > /dev/null
    BIN=build/shardlm
fi
export OMP_NUM_THREADS="$THREADS" OPENBLAS_NUM_THREADS="$THREADS"
mkdir -p "$OUT"
t0=$(date +%s)

if [ -z "$DATA" ]; then
    DATA="$OUT/data"
    if [ ! -f "$DATA/manifest.json" ]; then
        command -v bible > /dev/null || { echo "quickstart: 'bible' not found (apt-get install bible-kjv)" >&2; exit 1; }
        echo "== corpus: bible Gen1:1-Rev22:21 (chapters are documents)"
        bible Gen1:1-Rev22:21 > "$OUT/kjv.txt"
        echo "== tokenizer: byte-level BPE, vocab $VOCAB"
        "$BIN" tokenizer train --input "$OUT/kjv.txt" --vocab-size "$VOCAB" \
            --out "$OUT/tokenizer.json" --quiet
        echo "== prep"
        "$BIN" prep --tokenizer "$OUT/tokenizer.json" --input "$OUT/kjv.txt" --out "$DATA" \
            --val-fraction 0.05 --quiet
    fi
fi
[ -f "$DATA/manifest.json" ] || { echo "quickstart: no manifest.json in $DATA; run shardlm prep" >&2; exit 1; }
V=$(sed -n 's/.*"vocab_size":[[:space:]]*\([0-9]*\).*/\1/p' "$DATA/manifest.json" | head -1)

# The model: 4 layers, hidden 256 (about 4M matmul parameters at vocab 4096), context 256.
cat > "$OUT/model.json" <<EOF
{"architectures": ["LlamaForCausalLM"], "vocab_size": $V, "hidden_size": 256,
 "intermediate_size": 688, "num_hidden_layers": 4, "num_attention_heads": 4,
 "num_key_value_heads": 4, "max_position_embeddings": 256, "rms_norm_eps": 1e-5,
 "rope_theta": 10000.0, "tie_word_embeddings": false, "initializer_range": 0.02}
EOF
B=8 T=128
echo "== timing 4 steps (B $B x T $T, $THREADS threads)"
MS=$("$BIN" train --synthetic --model "$OUT/model.json" --batch $B --seq $T --steps 4 \
        --threads "$THREADS" --peak-gflops 1 --log-every 1 2> /dev/null |
     awk '/^step/ && $2 !~ /^1\// { for (i = 1; i <= NF; i++) if ($i == "ms/step") { s += $(i-1); n++ } }
          END { if (n) printf "%.0f", s / n; else print 0 }')
[ "$MS" -gt 0 ] || { echo "quickstart: timing run failed" >&2; exit 1; }
# Steps: 3x what the timing run predicts for 90% of the budget; --time-schedule then runs the
# cosine on whichever is further along (steps or the share of the budget spent), so the decay
# completes on time even when the machine's speed changes (a shared machine), and
# --max-minutes ends training.
EST=$(( MINUTES * 60 * 1000 * 90 / 100 / MS ))
[ "$EST" -ge 20 ] || EST=20
STEPS=$(( EST * 3 ))
WARMUP=$(( EST / 20 + 10 ))
echo "   ${MS} ms/step -> about $EST steps in $MINUTES min (schedule length $STEPS, warmup $WARMUP)"

echo "== train"
"$BIN" train --data "$DATA" --model "$OUT/model.json" --batch $B --seq $T --steps "$STEPS" \
    --lr 2e-3 --min-lr 1e-4 --warmup "$WARMUP" --weight-decay 0.1 --grad-clip 1.0 \
    --eval-every 200 --eval-batches 20 --seed 1337 --threads "$THREADS" \
    --max-minutes "$(awk -v m="$MINUTES" 'BEGIN { print m * 0.9 }')" --time-schedule \
    --log-every 20 --out "$OUT/run"

echo "== evaluate (whole val split)"
EV=$("$BIN" eval --model "$OUT/run" --data "$DATA" --split val --seq $T --batch $B)
HU=$("$BIN" eval --data "$DATA" --split val --unigram-entropy)
LOSS=$(echo "$EV" | awk '$1 == "loss" { print $2 }')
PPL=$(echo "$EV" | awk '$1 == "perplexity" { print $2 }')
H=$(echo "$HU" | awk '$1 == "unigram_entropy" { print $2 }')
awk -v l="$LOSS" -v h="$H" -v p="$PPL" 'BEGIN {
    printf "validation loss   %.4f nats/token (perplexity %.1f)\n", l, p
    printf "unigram entropy   %.4f nats/token\n", h
    printf "ratio             %.3f  (target <= 0.65: %s)\n", l / h, (l / h <= 0.65 ? "met" : "not met") }'

echo "== generate"
for prompt in "In the beginning" "And Jesus said" "The LORD is my"; do
    "$BIN" generate --model "$OUT/run" --prompt "$prompt" --max-new 48 --temperature 0.8 \
        --top-k 40 --seed 7 --threads "$THREADS"
    echo "--"
done
echo "quickstart: done in $(( $(date +%s) - t0 )) s; run directory $OUT/run"
