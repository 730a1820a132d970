#!/usr/bin/env bash
# Quick start: train a small Llama on the King James Bible on this machine's CPUs, then compare
# its validation loss with the validation set's unigram entropy and sample a few lines.
#
#   scripts/quickstart.sh [--data DIR] [--minutes M] [--out DIR] [--threads N] [--vocab V] [--plan]
#
#   (default)     `bible Gen1:1-Rev22:21` (Debian bible-kjv) -> byte-level BPE tokenizer
#                 (vocab 4096, shardlm tokenizer train) -> shardlm prep (5% of chapters to val)
#   --data DIR    use an already prepared dataset instead (any corpus: shardlm prep output)
#   --minutes M   training wall-time budget (default 15; fractions allowed)
#   --out DIR     work directory (default runs/quickstart): corpus, tokenizer, data, run-*/
#   --threads N   OpenMP / BLAS threads (default: all CPUs)
#   --plan        time the model ladder, print the chosen model and step count, and stop
#
# The model is sized from this machine's measured speed: a ladder of models, largest first, each
# with the number of training tokens it needed to reach the target on the Bible (measured, see
# README). A 9-step timing run of each rung (the median of its steps 2-9) predicts how many
# tokens 90% of the budget trains; the first rung whose prediction is at least 1.3x its need is
# trained. If none is, the smallest rung is trained and the minutes it would need are printed.
# Training takes 90% of the budget (--max-minutes) and its LR schedule follows the time spent
# (--time-schedule), so the cosine decay completes whatever the machine's speed. The target on the Bible: validation loss
# <= 0.65 x unigram entropy (nats/token). On a fresh Debian 12 machine it first installs the
# run-time packages (scripts/setup.sh --no-build, when one is missing) and builds build/shardlm
# (when missing; SHARDLM=path uses another binary).
#
# Reruns: every run trains into a fresh run directory, OUT/run-YYYYmmdd-HHMMSS (UTC), and
# OUT/latest links to the newest; corpus, tokenizer and data are reused. Not --train-from-scratch
# into one fixed run dir: that moves the earlier checkpoints aside but reuses the directory, so
# one run's metrics.jsonl, config and final weights would be replaced by the next; with a
# directory per run nothing is moved or overwritten and runs can be compared side by side.
# (Continuing a run is `shardlm train ... --out OUT/run-... --resume auto`.)
#
# QUICKSTART_MS_PER_STEP="ms1 ms2 ..." (tests only) replaces the timing runs, one figure per rung.
set -euo pipefail
cd "$(dirname "$0")/.."
DATA="" MINUTES=15 OUT="runs/quickstart" THREADS="$(nproc)" VOCAB=4096 PLAN=0
while [ $# -gt 0 ]; do
    case "$1" in
        --data) DATA="$2"; shift 2 ;;
        --minutes) MINUTES="$2"; shift 2 ;;
        --out) OUT="$2"; shift 2 ;;
        --threads) THREADS="$2"; shift 2 ;;
        --vocab) VOCAB="$2"; shift 2 ;;
        --plan) PLAN=1; shift ;;
        -h|--help) sed -n '2,33p' "$0"; exit 0 ;;
        *) echo "quickstart: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
done
awk -v m="$MINUTES" 'BEGIN { exit !(m + 0 > 0) }' ||
    { echo "quickstart: --minutes must be a number > 0 (got '$MINUTES')" >&2; exit 2; }
BIN="${SHARDLM:-build/shardlm}"
# Set-up on a fresh machine: the run-time Debian packages (scripts/setup.sh; nothing for tests).
if command -v dpkg > /dev/null; then
    for p in $(scripts/setup.sh --list); do
        dpkg -s "$p" > /dev/null 2>&1 && continue
        echo "== set-up: Debian package $p is missing; scripts/setup.sh --no-build"
        scripts/setup.sh --no-build
        break
    done
fi
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

# The ladder, largest first: name, hidden, layers, FFN, heads, batch B, context T, and the training
# tokens the rung needed to reach ratio 0.65 on the Bible with this recipe (lr 2e-3 -> 1e-4,
# cosine over the run; d192's is assumed, not measured). How: docs/training.md, "Model ladder".
LADDER="
d256-L4 256 4 688 4 8 128 2400000
d192-L4 192 4 512 3 8 128 2400000
d128-L4 128 4 344 2 8 128 1300000
"
BUDGET_MS=$(awk -v m="$MINUTES" 'BEGIN { printf "%.0f", m * 60 * 1000 * 0.9 }')
FAKE=(${QUICKSTART_MS_PER_STEP:-})
model_json() { # hidden layers ffn heads ctx -> $OUT/model.json
    cat > "$OUT/model.json" <<EOF
{"architectures": ["LlamaForCausalLM"], "vocab_size": $V, "hidden_size": $1,
 "intermediate_size": $3, "num_hidden_layers": $2, "num_attention_heads": $4,
 "num_key_value_heads": $4, "max_position_embeddings": $(( $5 > 256 ? $5 : 256 )),
 "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": false,
 "initializer_range": 0.02}
EOF
}
# The median, not the mean, of the step times: on a shared machine a few steps slowed by other
# jobs (or the first steps' warm-up) must not decide the model (a 4-step mean once predicted
# 980 ms/step and half the tokens the run then trained).
time_steps() { # B T -> median ms/step of steps 2-9 of a synthetic run of $OUT/model.json
    "$BIN" train --synthetic --model "$OUT/model.json" --batch "$1" --seq "$2" --steps 9 \
            --threads "$THREADS" --peak-gflops 1 --log-every 1 < /dev/null 2> /dev/null |
        awk '/^step/ && $2 !~ /^1\// { for (i = 1; i <= NF; i++) if ($i == "ms/step") v[++n] = $(i-1) + 0 }
             END { for (i = 2; i <= n; i++) for (j = i; j > 1 && v[j-1] > v[j]; j--) { t = v[j]; v[j] = v[j-1]; v[j-1] = t }
                   if (n) printf "%.0f", n % 2 ? v[(n+1)/2] : (v[n/2] + v[n/2+1]) / 2; else print 0 }'
}
echo "== timing the model ladder ($THREADS threads, budget $MINUTES min, 90% training)"
i=0 CHOSEN=""
while read -r name D L FF H B T NEED; do
    [ -n "$name" ] || continue
    model_json "$D" "$L" "$FF" "$H" "$T"
    if [ ${#FAKE[@]} -gt 0 ]; then MS=${FAKE[$i]:-0}; else MS=$(time_steps "$B" "$T") || MS=0; fi
    i=$(( i + 1 ))
    [ "$MS" -gt 0 ] || { echo "quickstart: timing run of $name failed" >&2; exit 1; }
    EST=$(( BUDGET_MS / MS ))
    TOK=$(( EST * B * T ))
    FITS=$(( TOK * 10 >= NEED * 13 ))
    printf '   %-8s B %2d x T %3d: %5d ms/step -> %5d steps, %5.2fM tokens (needs %.2fM x 1.3): %s\n' \
        "$name" "$B" "$T" "$MS" "$EST" "$(awk -v t="$TOK" 'BEGIN { print t / 1e6 }')" \
        "$(awk -v t="$NEED" 'BEGIN { print t / 1e6 }')" "$([ $FITS = 1 ] && echo fits || echo short)"
    LAST="$name $D $L $FF $H $B $T $NEED $MS"
    if [ $FITS = 1 ]; then CHOSEN="$LAST"; break; fi
done <<< "$LADDER"
if [ -z "$CHOSEN" ]; then
    CHOSEN="$LAST"
    read -r name D L FF H B T NEED MS <<< "$CHOSEN"
    NEED_MIN=$(awk -v n="$NEED" -v ms="$MS" -v bt=$(( B * T )) \
        'BEGIN { m = n * 1.3 / bt * ms / 0.9 / 60000; printf "%d", m + 0.999 }')
    echo "quickstart: warning: this machine is too slow for the target in $MINUTES min; training" \
         "the smallest model anyway (the target would need about --minutes $NEED_MIN)" >&2
fi
read -r name D L FF H B T NEED MS <<< "$CHOSEN"
model_json "$D" "$L" "$FF" "$H" "$T"
EST=$(( BUDGET_MS / MS ))
[ "$EST" -ge 20 ] || EST=20
# Steps: 3x what the timing run predicts for 90% of the budget; --time-schedule then runs the
# cosine on whichever is further along (steps or the share of the budget spent), so the decay
# completes on time even when the machine's speed changes (a shared machine), and
# --max-minutes ends training.
STEPS=$(( EST * 3 ))
WARMUP=$(( EST / 20 + 10 ))
echo "   model $name (hidden $D, $L layers, B $B x T $T): about $EST steps in $MINUTES min" \
     "(schedule length $STEPS, warmup $WARMUP)"
[ "$PLAN" = 0 ] || exit 0

# A fresh run directory per run (see the header), OUT/latest -> the newest.
STAMP=$(date -u +%Y%m%d-%H%M%S) RUN="$OUT/run-$STAMP" n=1
while [ -e "$RUN" ]; do n=$(( n + 1 )); RUN="$OUT/run-$STAMP-$n"; done
ln -sfn "$(basename "$RUN")" "$OUT/latest"
echo "== train -> $RUN"
"$BIN" train --data "$DATA" --model "$OUT/model.json" --batch $B --seq $T --steps "$STEPS" \
    --lr 2e-3 --min-lr 1e-4 --warmup "$WARMUP" --weight-decay 0.1 --grad-clip 1.0 \
    --eval-every 200 --eval-batches 20 --seed 1337 --threads "$THREADS" \
    --max-minutes "$(awk -v m="$MINUTES" 'BEGIN { print m * 0.9 }')" --time-schedule \
    --log-every 20 --out "$RUN"

echo "== evaluate (whole val split)"
EV=$("$BIN" eval --model "$RUN" --data "$DATA" --split val --seq $T --batch $B)
HU=$("$BIN" eval --data "$DATA" --split val --unigram-entropy)
LOSS=$(echo "$EV" | awk '$1 == "loss" { print $2 }')
PPL=$(echo "$EV" | awk '$1 == "perplexity" { print $2 }')
H=$(echo "$HU" | awk '$1 == "unigram_entropy" { print $2 }')
awk -v l="$LOSS" -v h="$H" -v p="$PPL" -v t="$T" 'BEGIN {
    printf "validation loss   %.4f nats/token (perplexity %.1f; whole val split, %d-token windows)\n", l, p, t
    printf "unigram entropy   %.4f nats/token\n", h
    printf "ratio             %.3f  (target <= 0.65: %s)\n", l / h, (l / h <= 0.65 ? "met" : "not met") }'

echo "== generate"
for prompt in "In the beginning" "And Jesus said" "The LORD is my"; do
    "$BIN" generate --model "$RUN" --prompt "$prompt" --max-new 48 --temperature 0.8 \
        --top-k 40 --seed 7 --threads "$THREADS"
    echo "--"
done
echo "quickstart: done in $(( $(date +%s) - t0 )) s; run directory $RUN ($OUT/latest)"
