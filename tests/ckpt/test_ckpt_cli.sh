#!/usr/bin/env bash
# shardlm ckpt inspect / verify / export from the command line: exit codes 0 / 1 / 2, messages
# that name the damaged file, export layout. Uses ckpt_tool (argument 1) to make a checkpoint.
. "$(dirname "$0")/../lib.sh"
set +e # the checks read the exit status ($?) of commands that are meant to fail
TOOL="$1"
slm_tiny_config "$W/c.json" vocab_size=64 hidden_size=16 intermediate_size=32 \
    num_hidden_layers=2 num_key_value_heads=1
"$TOOL" make-ckpt "$W/run/checkpoints" "$W/c.json" 3 40 || { bad "make-ckpt"; slm_finish; }
echo "tokenizer bytes" > "$W/run/tokenizer.json"

"$BIN" ckpt inspect "$W/run" > "$W/inspect.txt"; check "inspect run dir" 0 $?
grep -q "step         40" "$W/inspect.txt" && grep -q "OK" "$W/inspect.txt"; check "inspect output" 0 $?
"$BIN" ckpt verify "$W/run/checkpoints/step_00000040" >/dev/null; check "verify step dir" 0 $?
"$BIN" ckpt --help >/dev/null; check "--help" 0 $?
"$BIN" ckpt >/dev/null 2>&1; check "no subcommand" 2 $?
"$BIN" ckpt frobnicate "$W/run" >/dev/null 2>&1; check "unknown subcommand" 2 $?
"$BIN" ckpt export "$W/run" >/dev/null 2>&1; check "export without --hf" 2 $?
"$BIN" ckpt export "$W/run" --hf "$W/hf" --dtype fp8 >/dev/null 2>&1; check "bad dtype" 2 $?
"$BIN" ckpt export "$W/run" --hf "$W/hf" --max-shard-size lots >/dev/null 2>&1; check "bad size" 2 $?
"$BIN" ckpt inspect "$W/nothing" >/dev/null 2>&1; check "no checkpoint" 1 $?
"$BIN" ckpt export "$W/run" --hf "$W/hf" --dtype bf16 >/dev/null; check "export bf16" 0 $?
for f in model.safetensors config.json; do
    [ -f "$W/hf/$f" ]; check "export wrote $f" 0 $?
done
# the tokenizer file is not recorded by make-ckpt, so export copies none; copy behaviour is
# covered when training writes checkpoints
# --gguf (issue 23; the file itself is checked by gguf_export.py): option errors, and a model
# without a tokenizer is refused before anything is written
"$BIN" ckpt export "$W/run" --gguf "$W/m.gguf" --hf "$W/hf3" >/dev/null 2>&1
check "--gguf with --hf" 2 $?
"$BIN" ckpt export "$W/run" --hf "$W/hf3" --type q8_0 >/dev/null 2>&1; check "--type with --hf" 2 $?
"$BIN" ckpt export "$W/run" --gguf "$W/m.gguf" --dtype bf16 >/dev/null 2>&1
check "--dtype with --gguf" 2 $?
"$BIN" ckpt export "$W/run" --gguf "$W/m.gguf" --type q4_0 >/dev/null 2>&1; check "bad --type" 2 $?
"$BIN" ckpt export "$W/run" --gguf "$W/m.gguf" > /dev/null 2> "$W/err.txt"
check "--gguf without a tokenizer" 2 $?
grep -q "no tokenizer file" "$W/err.txt" && [ ! -e "$W/m.gguf" ] && [ -z "$(ls -A "$W" | grep export-tmp)" ]
check "no tokenizer: message, nothing written" 0 $?
# flipped byte -> verify exits 1 naming the file
f="$W/run/checkpoints/step_00000040/rank_00000.bin"
printf '\xff' | dd of="$f" bs=1 seek=100 conv=notrunc 2>/dev/null
"$BIN" ckpt verify "$W/run" > /dev/null 2> "$W/err.txt"; check "verify flipped byte" 1 $?
grep -q "rank_00000.bin: checksum mismatch" "$W/err.txt"; check "message names the file" 0 $?
"$BIN" ckpt export "$W/run" --hf "$W/hf2" > /dev/null 2>&1; check "export of a damaged checkpoint" 1 $?
slm_finish
