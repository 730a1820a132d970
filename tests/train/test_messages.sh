#!/usr/bin/env bash
# Messages a new user meets (issue 20, item 18):
#   1. healthcheck: the free space it prints is labelled as the run dir's disk space;
#   2. under mpirun -np 2 the start-up info lines (memory estimate, model summary) appear once;
#   3. the advice for samples whose targets the cut to T+1 loses never suggests a --seq beyond
#      the model's max_position_embeddings (it says so, and what to do instead);
#   4. a raw NUL byte in a --chat-template file is refused naming the file and the byte offset
#      (before: the field silently cut at the NUL).
# Usage: test_messages.sh MPIEXEC
. "$(dirname "$0")/../lib.sh"
MPIEXEC="${1:-$MPIEXEC}"
slm_tiny_data "$W/data" 300
slm_tiny_config "$W/m.json" vocab_size=300

# 1.
mkdir -p "$W/hc"
slm_mpirun 1 "$BIN" healthcheck --mem 4MiB --bw-bytes 1MiB --bw-reps 2 --run-dir "$W/hc" \
    > "$W/hc.log" 2>&1 || { cat "$W/hc.log"; bad "healthcheck ran"; }
has "healthcheck: disk free labelled" "$W/hc.log" '| disk free [0-9.]* [KMGT]*i*B (run dir) |'

# 2.
slm_mpirun 2 "$BIN" train --data "$W/data" --model "$W/m.json" --batch 2 --seq 16 --steps 2 \
    --threads 1 --peak-gflops 10 --log-every 1 --out "$W/run" > "$W/np2.out" 2> "$W/np2.err" ||
    { cat "$W/np2.err"; bad "mpirun -np 2 train"; }
for what in "info: memory: about" "info: model "; do
    n=$(grep -c "$what" "$W/np2.err" || true)
    [ "$n" = 1 ] && ok "np 2: '$what' printed once" || bad "np 2: '$what' printed $n times"
done

# 3. prompts of ~60 tokens before their completions; a model of 32 positions
# (JSON strings by hand: lines holding a quote or a backslash are left out)
head -c 20000 "$CORPUS" | grep -v '^[[:space:]]*$' | grep -v '["\\]' |
    awk 'NR <= 120 { p = p (p == "" ? "" : " ") $0; if (NR % 6 == 0) {
             printf "{\"prompt\": \"%s\", \"completion\": \" done.\"}\n", p; p = "" } }
         END { print "{\"prompt\": \"Q\", \"completion\": \" A\"}" }' > "$W/long.jsonl"
"$BIN" prep --tokenizer "$W/data.tokenizer.json" --input "$W/long.jsonl" --out "$W/long" \
    --format prompt-completion --val-fraction 0 --workers 1 --quiet
"$BIN" train --data "$W/long" --model "$W/m.json" --batch 1 --seq 32 --steps 1 --threads 1 \
    --eval-every 0 --peak-gflops 10 --out "$W/r3" > "$W/long.log" 2>&1 ||
    { cat "$W/long.log"; bad "train on long samples"; }
grep "keep no target" "$W/long.log" || true
has "long samples: the model's limit named" "$W/long.log" \
    "would need --seq [0-9]*, beyond the model's max_position_embeddings 32 (the longest --seq it takes)"
if grep -Eq -- "--seq ([3-9][3-9]|[4-9][0-9]|[0-9]{3,}) keeps one target" "$W/long.log"; then
    bad "long samples: a --seq beyond 32 advised"
else
    ok "long samples: no --seq beyond the model's 32 positions advised"
fi

# 4.
printf '{"user": "a\x00b{content}", "assistant": "{content}"}' > "$W/tpl.json"
printf '{"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "x"}]}\n' \
    > "$W/c.jsonl"
set +e # expected to fail
"$BIN" prep --tokenizer "$W/data.tokenizer.json" --input "$W/c.jsonl" --out "$W/tplout" \
    --format chat --chat-template "$W/tpl.json" --quiet > "$W/tpl.log" 2>&1
check "chat template with a NUL: refused" 1 $?
set -e
has "chat template with a NUL: file and offset" "$W/tpl.log" \
    "chat-template $W/tpl.json: raw NUL byte (0x00) at byte 12 of the file"
[ ! -e "$W/tplout" ] && ok "no dataset written" || bad "a dataset was written"
slm_finish
