#!/usr/bin/env bash
# ft2 item 4, CLI gaps: (a) generate --chat names its own option in template errors (before:
# "--chat-template"); (b) train --no-packing on a plain dataset warns that it has no effect
# (before: silently ignored); (c) ckpt inspect prints the head dim, marked when the config gives
# head_dim explicitly (values from the config.json written here: head_dim 24 vs 32 / 2 = 16).
. "$(dirname "$0")/../lib.sh"
fails=0
set +e
slm_tiny_data "$W/d" 300 20000 || exit 1
slm_tiny_config "$W/hd.json" vocab_size=300 head_dim=24
slm_tiny_config "$W/plain.json" vocab_size=300
TR=(train --data "$W/d" --batch 2 --seq 16 --steps 2 --threads 1 --eval-every 0 --log-every 1)
"$BIN" "${TR[@]}" --model "$W/hd.json" --no-packing --out "$W/a" > "$W/a.log" 2>&1
check "--no-packing on plain data: trains (rc 0)" 0 $?
has "--no-packing on plain data: warned" "$W/a.log" "--no-packing has no effect on dataset $W/d: it is plain (text) data"
"$BIN" "${TR[@]}" --model "$W/plain.json" --out "$W/b" > "$W/b.log" 2>&1
check "plain run without head_dim: trains" 0 $?
if grep -q -- "--no-packing" "$W/b.log"; then bad "warned without --no-packing"; else ok "no warning without the option"; fi
"$BIN" ckpt inspect "$W/a" > "$W/ia" 2>&1
has "ckpt inspect: explicit head_dim 24" "$W/ia" "H=2 KV=2 D=24 (head_dim) V=300"
"$BIN" ckpt inspect "$W/b" > "$W/ib" 2>&1
has "ckpt inspect: implicit head dim 32 / 2 = 16" "$W/ib" "H=2 KV=2 D=16 V=300"
"$BIN" generate --model "$W/a" --prompt hi --chat nosuch --max-new 2 > "$W/g1" 2>&1
rc=$?
[ $rc -ne 0 ] && ok "generate --chat nosuch fails (rc $rc)" || bad "generate --chat nosuch: rc 0"
has "the message names --chat" "$W/g1" "--chat nosuch: not llama2, llama3, chatml or an existing template file"
if grep -q -- "--chat-template" "$W/g1"; then bad "the message names --chat-template"; cat "$W/g1"; else ok "no --chat-template in it"; fi
echo '[1]' > "$W/t.json"
"$BIN" generate --model "$W/a" --prompt hi --chat "$W/t.json" --max-new 2 > "$W/g2" 2>&1
[ $? -ne 0 ] && ok "generate --chat FILE (not an object) fails" || bad "generate --chat FILE: rc 0"
has "file template error names --chat" "$W/g2" "--chat $W/t.json: not a JSON object"
# prep keeps its own option name
printf '{"prompt": "a", "completion": "b"}\n' > "$W/s.jsonl"
"$BIN" prep --tokenizer "$W/d.tokenizer.json" --input "$W/s.jsonl" --out "$W/p" \
    --format prompt-completion --chat-template nosuch --quiet > "$W/p.log" 2>&1
has "prep still says --chat-template" "$W/p.log" "--chat-template nosuch: not llama2"
slm_finish
