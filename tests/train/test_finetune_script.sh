#!/usr/bin/env bash
# scripts/finetune.sh end to end on a tiny base (issue 20, item 18): the scoring phases report
# progress (the eval pass, then the greedy generations up to N / N verses), and the summary's
# state per rank is in MiB, the unit of the README's table, and equals the log's exact bytes.
# Tiny settings: a 1-layer base trained for a few steps, 3 held-out verses, 3 s per run.
. "$(dirname "$0")/../lib.sh"
command -v bible > /dev/null || { echo "SKIP: bible (Debian bible-kjv) not installed"; exit 77; }
slm_tiny_data "$W/data" 300
slm_tiny_config "$W/m.json" vocab_size=300 max_position_embeddings=128
"$BIN" train --data "$W/data" --model "$W/m.json" --batch 2 --seq 32 --steps 2 --threads 1 \
    --peak-gflops 10 --log-every 0 --out "$W/base" > /dev/null
SHARDLM="$BIN" "$SRC/scripts/finetune.sh" --base "$W/base" --out "$W/ft" --minutes 0.05 \
    --threads 1 --heldout 3 --lora-rank 2 > "$W/out" 2> "$W/err"
check "finetune.sh runs" 0 $?
cat "$W/out"
for name in base lora full; do
    has "$name: scoring progress (eval)" "$W/err" "scoring $name: completion loss (eval of 3 held-out verses)"
    has "$name: scoring progress (generate)" "$W/err" "scoring $name: exact match, 3 / 3 verses generated"
done
has "summary: state / rank column" "$W/out" "state / rank"
grep -q 'state / rank' "$SRC/README.md" && grep -q '| [0-9.]* MiB |' "$SRC/README.md" &&
    ok "README's table: state / rank in MiB" || bad "README's table: no state / rank in MiB"
for name in lora full; do
    bytes=$(sed -n 's/.*state per rank [^(]*(\([0-9]*\) bytes.*/\1/p' "$W/ft/$name.log" | head -1)
    want=$(awk -v b="$bytes" 'BEGIN { printf "%.1f MiB", b / 1048576 }')
    grep -q "^   $name .* $want " "$W/out" && ok "$name: state $want (= $bytes bytes)" ||
        bad "$name: state per rank not $want ($bytes bytes) in the summary"
done
slm_finish
