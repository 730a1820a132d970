#!/usr/bin/env bash
# One run, one validation loss (issue 20, item 16): `shardlm eval --model RUN` defaults --seq to
# the run's (its checkpoint's batch geometry) rather than 256 / max_position_embeddings, so with
# --eval-batches 0 (whole split) the training's final val loss and eval's are the same windows
# and agree; every printed val loss says what it is over (training: "(whole val split)" /
# "(first N val windows)" with N = --eval-batches x ranks x --batch; eval: an "over ..." line).
. "$(dirname "$0")/../lib.sh"
slm_tiny_data "$W/data" 300
slm_tiny_config "$W/m.json" vocab_size=300 max_position_embeddings=64
T=(train --data "$W/data" --model "$W/m.json" --batch 4 --seq 16 --steps 6 --lr 1e-2 --warmup 1
   --eval-every 3 --threads 2 --peak-gflops 10 --log-every 1)
"$BIN" "${T[@]}" --eval-batches 0 --out "$W/run" > "$W/train.log"
cat "$W/train.log"
has "step line: val loss over the whole split" "$W/train.log" \
    '^step      3/6 | .* | val loss [0-9.]* (whole val split)$'
has "done line: val loss over the whole split" "$W/train.log" \
    '^done: 6 steps | .* | val loss [0-9.]* (whole val split)'
"$BIN" eval --model "$W/run" --data "$W/data" > "$W/eval.txt"
cat "$W/eval.txt"
has "eval: over the whole split at the run's --seq" "$W/eval.txt" \
    "^over the whole val split: [0-9]* windows of 16 tokens (the run's --seq)$"
VAL=$("$PY" -c "import json,sys; print([j for j in map(json.loads, open(sys.argv[1])) if j['event'] == 'step'][-1]['val_loss'])" "$W/run/metrics.jsonl")
EV=$(awk '$1 == "loss" { print $2 }' "$W/eval.txt")
# the same windows and weights; only the batch grouping of the float sums differs (B 4 vs 8)
"$PY" -c "import sys; a, b = map(float, sys.argv[1:]); print(f'  eval {a} training {b}'); assert abs(a - b) <= 1e-5 * b" \
    "$EV" "$VAL" && ok "eval (defaults) equals the training's final val loss" ||
    bad "eval (defaults) $EV vs the training's final val loss $VAL"
"$BIN" eval --model "$W/run" --data "$W/data" --batch 2 --max-batches 1 > "$W/eval1.txt"
has "eval --max-batches: over the first batches" "$W/eval1.txt" \
    "^over the first 1 batches of the val split: 2 windows of 16 tokens (the run's --seq)$"
"$BIN" eval --model "$W/run" --data "$W/data" --seq 8 > "$W/eval8.txt"
has "eval --seq given: named" "$W/eval8.txt" "windows of 8 tokens (--seq)$"
"$BIN" ckpt export "$W/run" --hf "$W/hf" > /dev/null
"$BIN" eval --init-from-hf "$W/hf" --data "$W/data" > "$W/evalhf.txt"
has "eval of an HF directory: the default named" "$W/evalhf.txt" \
    "windows of 64 tokens (default: min(256, max_position_embeddings))$"

"$BIN" "${T[@]}" --eval-batches 2 --out "$W/run2" > "$W/train2.log"
has "step line: val loss over the first 2 x 4 windows" "$W/train2.log" \
    '^step      6/6 | .* | val loss [0-9.]* (first 8 val windows)$'
slm_finish
