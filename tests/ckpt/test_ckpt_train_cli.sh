#!/usr/bin/env bash
# Checkpoints through the CLI: shardlm train writes checkpoints on schedule (--ckpt-every-steps,
# --ckpt-keep) and always at the end; ckpt verify / export --hf; eval and generate with
# --init-from-hf on the export give exactly what they give on the run (fp32 export);
# train --init-from-hf starts from those weights; --resume auto picks up the latest checkpoint
# (bitwise exactness of resume is tests/ckpt/test_ckpt_resume.c). Bad options exit 2 / 1.
# Env (set by CTest): SHARDLM_BIN, SLM_SHARED_DIR.
. "$(dirname "$0")/../lib.sh"
set +e # the checks read the exit status ($?) of commands that are meant to fail
t() { if eval "$2"; then ok "$1"; else bad "$1"; fi; }

slm_corpus "$W/corpus.txt" 100000
"$BIN" tokenizer train --input "$W/corpus.txt" --vocab-size 300 --out "$W/tokenizer.json" --quiet
"$BIN" prep --tokenizer "$W/tokenizer.json" --input "$W/corpus.txt" --out "$W/data" \
    --val-fraction 0.1 --workers 1 --quiet
slm_tiny_config "$W/config.json" vocab_size=300 num_hidden_layers=2 num_attention_heads=4
TRAIN=(train --data "$W/data" --model "$W/config.json" --batch 4 --seq 32 --lr 3e-3 --seed 2
       --threads 2 --peak-gflops 10 --log-every 0)
"$BIN" "${TRAIN[@]}" --steps 12 --ckpt-every-steps 4 --ckpt-keep 2 --out "$W/run" 2> "$W/train.err"
rc=$?
t "train exits 0" '[ $rc = 0 ]'
t "latest names step 12" '[ "$(cat "$W/run/checkpoints/latest")" = step_00000012 ]'
t "keep 2: steps 8 and 12 only" '[ "$(ls "$W/run/checkpoints" | grep -c "^step_")" = 2 ] &&
   [ -d "$W/run/checkpoints/step_00000008" ] && [ ! -e "$W/run/checkpoints/step_00000004" ]'
t "stall reported" 'grep -q "training stall" "$W/train.err"'
t "ckpt verify" '"$BIN" ckpt verify "$W/run" > /dev/null'
t "ckpt export fp32" '"$BIN" ckpt export "$W/run" --hf "$W/hf" > /dev/null'
t "export has the tokenizer" 'cmp -s "$W/hf/tokenizer.json" "$W/run/tokenizer.json"'
E1=$("$BIN" eval --model "$W/run" --data "$W/data" --seq 32 --batch 4 --max-batches 3 | head -1)
E2=$("$BIN" eval --init-from-hf "$W/hf" --data "$W/data" --seq 32 --batch 4 --max-batches 3 | head -1)
echo "  run: $E1 / hf: $E2"
t "eval --init-from-hf == eval --model" '[ -n "$E1" ] && [ "$E1" = "$E2" ]'
G1=$("$BIN" generate --model "$W/run" --prompt "ROMEO:" --max-new 20 --seed 3 2>/dev/null)
G2=$("$BIN" generate --init-from-hf "$W/hf" --prompt "ROMEO:" --max-new 20 --seed 3 2>/dev/null)
t "generate --init-from-hf == generate --model" '[ -n "$G1" ] && [ "$G1" = "$G2" ]'
"$BIN" "${TRAIN[@]}" --steps 2 --init-from-hf "$W/hf" --out "$W/run_hf" > "$W/hf.log" 2>&1
rc=$?
t "train --init-from-hf" '[ $rc = 0 ] && grep -q "initial weights from" "$W/hf.log"'
"$BIN" "${TRAIN[@]}" --steps 14 --resume auto --out "$W/run" > "$W/resume.log" 2>&1
rc=$?
t "train --resume auto continues from step 12" '[ $rc = 0 ] && grep -q "resumed from .*step_00000012" "$W/resume.log" &&
   [ "$(cat "$W/run/checkpoints/latest")" = step_00000014 ]'
"$BIN" "${TRAIN[@]}" --steps 2 --on-ckpt-error sometimes --out "$W/x" > /dev/null 2>&1
rc=$?
t "bad --on-ckpt-error exits 2" '[ $rc = 2 ]'
"$BIN" "${TRAIN[@]}" --steps 2 --resume "$W/nothing" --out "$W/y" > /dev/null 2> "$W/y.err"
rc=$?
t "--resume of a missing checkpoint exits 1 naming it" '[ $rc = 1 ] && grep -q nothing "$W/y.err"'
slm_finish
