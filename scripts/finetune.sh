#!/usr/bin/env bash
# Fine-tuning quick start: teach a Llama model to complete Bible verses from their reference and
# first half, once with LoRA adapters and once in full, and compare held-out completion loss and
# exact-match accuracy before and after.
#
#   scripts/finetune.sh [--base DIR] [--out DIR] [--minutes M] [--threads N] [--heldout K]
#                       [--lora-rank R]
#
#   --base DIR    the model to fine-tune: a Hugging Face Llama directory (config.json,
#                 model.safetensors, tokenizer.json / tokenizer.model) or a shardlm run
#                 directory (exported to OUT/base first). Default: the quick start's KJV model
#                 (runs/quickstart/latest; scripts/quickstart.sh --minutes $QUICKSTART_MINUTES,
#                 default 3, trains one first if there is none)
#   --out DIR     work directory (default runs/finetune): base/, data/, lora-*/ and full-*/ runs
#   --minutes M   wall time of each fine-tuning run (default 1; fractions allowed)
#   --threads N   OpenMP threads (default: all CPUs)
#   --heldout K   held-out verses scored (default 32; every 500th verse, never trained on)
#   --lora-rank R LoRA rank (default 8; alpha 2R, all seven projections, dropout 0.05)
#
# The instruction set comes from the corpus itself (`bible Gen1:1-Rev22:21`, Debian bible-kjv):
# per verse, prompt "Genesis 1:1 In the beginning God" (the reference and the first half of the
# words), completion " created the heaven and the earth." (the rest); JSONL for
# `shardlm prep --format prompt-completion`. Scored on the held-out verses:
#   completion loss  mean cross-entropy of the completion tokens given the prompt (nats/token):
#                    from `shardlm eval --token-ids` over prompt+completion and over the prompt
#                    alone (a causal model's prompt positions are the same in both), so
#                    loss = (L_full n_full - L_prompt n_prompt) / (n_full - n_prompt)
#   exact match      greedy `shardlm generate` of as many tokens as the completion has, equal to
#                    the completion's text
# LoRA: `train --init-from-hf BASE --lora-rank R`, base frozen, checkpoints hold the adapters;
# eval / generate of its run directory merge them into the base. Full: the same run without
# --lora-rank. Both also print the training state per rank (what LoRA saves).
set -euo pipefail
cd "$(dirname "$0")/.."
BASE="" OUT="runs/finetune" MINUTES=1 THREADS="$(nproc)" HELDOUT=32 RANK=8
while [ $# -gt 0 ]; do
    case "$1" in
        --base) BASE="$2"; shift 2 ;;
        --out) OUT="$2"; shift 2 ;;
        --minutes) MINUTES="$2"; shift 2 ;;
        --threads) THREADS="$2"; shift 2 ;;
        --heldout) HELDOUT="$2"; shift 2 ;;
        --lora-rank) RANK="$2"; shift 2 ;;
        -h|--help) sed -n '2,35p' "$0"; exit 0 ;;
        *) echo "finetune: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
done
awk -v m="$MINUTES" 'BEGIN { exit !(m + 0 > 0) }' ||
    { echo "finetune: --minutes must be a number > 0 (got '$MINUTES')" >&2; exit 2; }
case "$HELDOUT$RANK" in *[!0-9]*|"") echo "finetune: --heldout / --lora-rank must be integers" >&2; exit 2 ;; esac
BIN="${SHARDLM:-build/shardlm}"
if [ ! -x "$BIN" ]; then
    echo "== building shardlm"
    cmake -S . -B build -DCMAKE_BUILD_TYPE=Release > /dev/null
    cmake --build build -j"$(nproc)" --target shardlm > /dev/null
    BIN=build/shardlm
fi
command -v python3 > /dev/null || { echo "finetune: python3 not found" >&2; exit 1; }
command -v bible > /dev/null || { echo "finetune: 'bible' not found (apt-get install bible-kjv)" >&2; exit 1; }
export OMP_NUM_THREADS="$THREADS" OPENBLAS_NUM_THREADS="$THREADS"
mkdir -p "$OUT"
t0=$(date +%s)

# 1. The base model as a Hugging Face directory.
is_hf() { [ -f "$1/config.json" ] && { [ -f "$1/model.safetensors" ] || [ -f "$1/model.safetensors.index.json" ]; }; }
if [ -z "$BASE" ]; then
    QS=runs/quickstart
    if [ ! -e "$QS/latest" ]; then
        echo "== no quick start model yet: scripts/quickstart.sh --minutes ${QUICKSTART_MINUTES:-3}"
        SHARDLM="$BIN" scripts/quickstart.sh --minutes "${QUICKSTART_MINUTES:-3}" --out "$QS" \
            --threads "$THREADS"
    fi
    BASE="$QS/latest"
fi
if ! is_hf "$BASE"; then
    echo "== export $BASE -> $OUT/base (Hugging Face files)"
    "$BIN" ckpt export "$BASE" --hf "$OUT/base" > /dev/null
    BASE="$OUT/base"
fi
TOK="$BASE/tokenizer.json"
[ -f "$TOK" ] || TOK="$BASE/tokenizer.model"
[ -f "$TOK" ] || { echo "finetune: $BASE has no tokenizer.json or tokenizer.model" >&2; exit 1; }
MAXPOS=$(sed -n 's/.*"max_position_embeddings":[[:space:]]*\([0-9]*\).*/\1/p' "$BASE/config.json" | head -1)
SEQ=$(( MAXPOS < 128 ? MAXPOS : 128 ))

# 2. The instruction set from the corpus.
echo "== instruction set: KJV verses -> prompt (reference + first half) / completion (the rest)"
bible Gen1:1-Rev22:21 > "$OUT/kjv.txt"
python3 - "$OUT" "$HELDOUT" <<'EOF'
import json, re, sys
out, k = sys.argv[1], int(sys.argv[2])
verses, book, prev_blank = [], None, True
for line in open(f"{out}/kjv.txt", encoding="utf-8"):
    line = line.rstrip("\n")
    if not line.strip():
        prev_blank = True
        continue
    m = re.match(r"^\s+(\d+) (.*)$", line)
    if m and book:
        verses.append([f"{book}:{m.group(1)}", m.group(2)])
    elif prev_blank and not line.startswith(" "):
        book = line.strip()  # "Genesis 1"
    elif verses:
        verses[-1][1] += " " + line.strip()  # a wrapped verse
    prev_blank = False
train, held = [], []
for i, (ref, text) in enumerate(verses):
    words = text.split()
    if len(words) < 4:
        continue
    h = len(words) // 2
    rec = {"prompt": f"{ref} " + " ".join(words[:h]), "completion": " " + " ".join(words[h:])}
    (held if i % 500 == 250 and len(held) < k else train).append(rec)
for name, recs in (("train", train), ("heldout", held)):
    with open(f"{out}/{name}.jsonl", "w", encoding="utf-8") as f:
        for r in recs:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
with open(f"{out}/heldout.prompts", "w", encoding="utf-8") as f:
    f.write("".join(r["prompt"] + "\n" for r in held))
with open(f"{out}/heldout.completions", "w", encoding="utf-8") as f:
    f.write("".join(r["completion"] + "\n" for r in held))
print(f"   {len(verses)} verses: {len(train)} to train on, {len(held)} held out")
EOF
rm -rf "$OUT/data"
"$BIN" prep --tokenizer "$TOK" --input "$OUT/train.jsonl" --format prompt-completion \
    --out "$OUT/data" --val-fraction 0.02 --quiet
# Held-out ids: prompt (with BOS when the tokenizer has one, as generate prepends it) and
# prompt + completion, one sequence per line.
"$BIN" tokenizer encode --tokenizer "$TOK" --bos < "$OUT/heldout.prompts" > "$OUT/heldout.prompt.ids"
"$BIN" tokenizer encode --tokenizer "$TOK" < "$OUT/heldout.completions" > "$OUT/heldout.completion.ids"
paste -d ' ' "$OUT/heldout.prompt.ids" "$OUT/heldout.completion.ids" > "$OUT/heldout.full.ids"

# 3. Scoring: completion loss and exact match of model directory $1, labelled $2.
# Progress on stderr: the two eval passes, then the greedy generations (a line every quarter,
# or one updated line on a terminal).
score() {
    local model="$1" name="$2" ef ep total every
    total=$(wc -l < "$OUT/heldout.prompts")
    every=$(( total >= 4 ? total / 4 : 1 ))
    echo "   scoring $name: completion loss (eval of $total held-out verses)" >&2
    ef=$("$BIN" eval --model "$model" --token-ids "$OUT/heldout.full.ids" --threads "$THREADS")
    ep=$("$BIN" eval --model "$model" --token-ids "$OUT/heldout.prompt.ids" --threads "$THREADS")
    : > "$OUT/$name.samples"
    local i=0 hits=0 n
    while IFS= read -r prompt && IFS= read -r comp <&3 && IFS= read -r cids <&4; do
        n=$(echo "$cids" | wc -w)
        gen=$("$BIN" generate --model "$model" --prompt "$prompt" --max-new "$n" --temperature 0 \
                  --threads "$THREADS" 2> /dev/null)
        gen="${gen#"$prompt"}"
        gen="${gen%$'\n'}"
        gen="${gen//$'\n'/ }" # one line per sample (a verse completion has no newline)
        [ "$gen" = "$comp" ] && hits=$(( hits + 1 ))
        printf '%s\t%s\t%s\n' "$prompt" "$comp" "$gen" >> "$OUT/$name.samples"
        i=$(( i + 1 ))
        if [ -t 2 ]; then
            printf '\r   scoring %s: exact match, %d / %d verses generated' "$name" "$i" "$total" >&2
            [ "$i" -lt "$total" ] || echo >&2
        elif [ $(( i % every )) = 0 ] || [ "$i" = "$total" ]; then
            echo "   scoring $name: exact match, $i / $total verses generated" >&2
        fi
    done < "$OUT/heldout.prompts" 3< "$OUT/heldout.completions" 4< "$OUT/heldout.completion.ids"
    awk -v name="$name" -v hits="$hits" -v n="$i" -v ef="$ef" -v ep="$ep" 'BEGIN {
        split(ef, a, "\n"); split(ep, b, "\n")
        for (j in a) { split(a[j], f, " "); if (f[1] == "loss") lf = f[2]; if (f[1] == "tokens") nf = f[2] }
        for (j in b) { split(b[j], f, " "); if (f[1] == "loss") lp = f[2]; if (f[1] == "tokens") np = f[2] }
        printf "%s %.4f %d %d\n", name, (lf * nf - lp * np) / (nf - np), hits, n }' >> "$OUT/scores"
}
: > "$OUT/scores"
echo "== score the base model on $HELDOUT held-out verses"
score "$BASE" base

# 4. Fine-tuning runs (fresh run directories).
STAMP=$(date -u +%Y%m%d-%H%M%S)
finetune() { # name extra-args...
    local name="$1"; shift
    local run="$OUT/$name-$STAMP"
    echo "== fine-tune ($name) -> $run"
    "$BIN" train --data "$OUT/data" --model "$BASE/config.json" --init-from-hf "$BASE" \
        --batch 8 --seq "$SEQ" --steps 100000 --warmup 10 --grad-clip 1.0 --weight-decay 0.0 \
        --eval-every 0 --seed 1337 --threads "$THREADS" \
        --max-minutes "$MINUTES" --time-schedule --log-every 25 --out "$run" "$@" 2>&1 |
        tee "$OUT/$name.log" | grep -E "^(step|done)|state per rank" || true
    [ -e "$run/checkpoints/latest" ] || { echo "finetune: the $name run saved no checkpoint (see $OUT/$name.log)" >&2; exit 1; }
    score "$run" "$name"
    ln -sfn "$(basename "$run")" "$OUT/$name-latest"
}
finetune lora --lora-rank "$RANK" --lora-alpha $(( 2 * RANK )) --lora-targets all \
    --lora-dropout 0.05 --lr 2e-3 --min-lr 2e-4
finetune full --lr 3e-4 --min-lr 3e-5

# 5. Summary.
echo "== held-out completion loss (nats/token) and exact match, $HELDOUT verses"
# the state per rank in MiB (the unit of the README's table), from the log's exact bytes
state() { sed -n 's/.*state per rank [^(]*(\([0-9]*\) bytes.*/\1/p' "$OUT/$1.log" | head -1 |
          awk '{ printf "%.1f MiB", $1 / 1048576 }'; }
tps() { sed -n 's/^done:.*| \([0-9]*\) tok\/s.*/\1/p' "$OUT/$1.log" | tail -1; } # the run's mean
printf '   %-5s %10s %12s %16s %9s\n' model loss "exact match" "state / rank" "tok/s"
while read -r name loss hits n; do
    printf '   %-5s %10s %5d / %-5d %16s %9s\n' "$name" "$loss" "$hits" "$n" \
        "$( [ "$name" = base ] && echo - || state "$name")" "$( [ "$name" = base ] && echo - || tps "$name")"
done < "$OUT/scores"
echo "== samples (prompt | reference | base | LoRA | full)"
for i in 1 2 3; do
    p=$(sed -n "${i}p" "$OUT/base.samples" | cut -f1)
    [ -n "$p" ] || break
    echo "   prompt:    $p"
    echo "   reference:$(sed -n "${i}p" "$OUT/base.samples" | cut -f2)"
    for name in base lora full; do
        printf '   %-10s%s\n' "$name:" "$(sed -n "${i}p" "$OUT/$name.samples" | cut -f3)"
    done
    echo "   --"
done
echo "finetune: done in $(( $(date +%s) - t0 )) s; runs $OUT/lora-latest, $OUT/full-latest"
