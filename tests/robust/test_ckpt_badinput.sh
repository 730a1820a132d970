#!/usr/bin/env bash
# ckpt manifest / rank file / export checks (issue 8 items 12, 13, 28, 30):
#  - tokenizer.file "../victim.txt" is refused (exit 1) and nothing outside OUT_DIR is written;
#  - re-exporting into an existing HF directory leaves no stale shard or index;
#  - inspect / verify exit 1 when stdout cannot be written (/dev/full);
#  - --max-shard-size 0.5, 1e-300GB, inf are usage errors;
#  - sharding.strategy "BOGUS" and a rank file whose header world size disagrees with the
#    manifest are refused.
. "$(dirname "$0")/../lib.sh"
set +e # the checks read the exit status ($?) of commands that are meant to fail
TOOL="$1"
edit() { # edit MANIFEST PYTHON_STATEMENT (on dict m)
    "$PY" - "$1" "$2" <<'PY'
import json, sys
p, stmt = sys.argv[1], sys.argv[2]
m = json.load(open(p))
exec(stmt)
json.dump(m, open(p, "w"))
PY
}
slm_tiny_config "$W/c.json" vocab_size=64 hidden_size=16 intermediate_size=32 \
    num_hidden_layers=2 num_key_value_heads=1
"$TOOL" make-ckpt "$W/run/checkpoints" "$W/c.json" 3 40 || { bad "make-ckpt"; slm_finish; }
S="$W/run/checkpoints/step_00000040"
cp -r "$W/run" "$W/pristine"
reset() { rm -rf "$W/run"; cp -r "$W/pristine" "$W/run"; }

# --- item 12: a manifest's tokenizer.file must be a plain name -----------------------------
mkdir -p "$W/a/hf"
echo "victim" > "$W/a/victim.txt"
echo "tokenizer bytes" > "$W/run/victim.txt"
cp "$W/run/victim.txt" "$W/run/checkpoints/victim.txt"
for bad in "../victim.txt" "sub/tok.json" ".." "/etc/passwd"; do
    reset
    edit "$S/manifest.json" "m['tokenizer'] = {'file': '$bad', 'xxh64': None}"
    "$BIN" ckpt export "$W/run" --hf "$W/a/hf" > /dev/null 2> "$W/err.txt"
    check "tokenizer.file \"$bad\" refused" 1 $?
    has "message names tokenizer.file ($bad)" "$W/err.txt" "tokenizer.file"
done
[ "$(cat "$W/a/victim.txt")" = "victim" ]; check "file outside OUT_DIR untouched" 0 $?
reset
edit "$S/manifest.json" "m['tokenizer'] = {'file': 'tok.json', 'xxh64': None}"
# a real tokenizer.json (export also writes tokenizer_config.json & co. from it)
head -c 20000 "${SLM_SHARED_DIR:?}/data/tinyshakespeare.txt" > "$W/corpus.txt"
"$BIN" tokenizer train --input "$W/corpus.txt" --vocab-size 300 --out "$W/run/tok.json" --quiet
"$BIN" ckpt export "$W/run" --hf "$W/a/hf" > /dev/null; check "plain tokenizer.file accepted" 0 $?
cmp -s "$W/run/tok.json" "$W/a/hf/tok.json"; check "tokenizer copied into OUT_DIR" 0 $?

# --- item 13: re-export leaves no stale shards or index ------------------------------------
reset
"$BIN" ckpt export "$W/run" --hf "$W/hf" --max-shard-size 2000 > /dev/null
check "sharded export" 0 $?
n_sharded=$(ls "$W/hf" | grep -c '^model-.*-of-.*\.safetensors$')
[ "$n_sharded" -ge 2 ] && [ -f "$W/hf/model.safetensors.index.json" ]
check "sharded export wrote $n_sharded shards + index" 0 $?
echo "user notes" > "$W/hf/README.md"
echo "stale spm model" > "$W/hf/tokenizer.model"
"$BIN" ckpt export "$W/run" --hf "$W/hf" > "$W/out.txt"; check "re-export unsharded" 0 $?
left=$(ls "$W/hf" | grep -c -e '^model-' -e 'index.json')
check "no stale shard or index left (found $left)" 0 "$left"
[ -f "$W/hf/model.safetensors" ] && [ -f "$W/hf/config.json" ]; check "new weights in place" 0 $?
[ "$(cat "$W/hf/README.md" 2>/dev/null)" = "user notes" ]; check "user's own file kept" 0 $?
[ ! -e "$W/hf/tokenizer.model" ]; check "stale tokenizer.model of the earlier export removed" 0 $?
ls -a "$W" | grep 'export-' > /dev/null && { bad "temp/old dirs left: $(ls -a "$W")"; }
has "export names the real OUT_DIR" "$W/out.txt" "exported step 40 to $W/hf"
echo "x" > "$W/plainfile"
"$BIN" ckpt export "$W/run" --hf "$W/plainfile" > /dev/null 2>&1; check "OUT_DIR a file" 1 $?
"$BIN" ckpt export "$W/run" --hf "$W/run" > /dev/null 2>&1; check "OUT_DIR = the run dir" 2 $?
[ -f "$S/manifest.json" ]; check "run dir intact after refused export" 0 $?
# a failed export (damaged checkpoint) leaves the previous export as it was
cp "$W/hf/model.safetensors" "$W/prev.st"
printf '\xff' | dd of="$S/rank_00000.bin" bs=1 seek=100 conv=notrunc 2>/dev/null
"$BIN" ckpt export "$W/run" --hf "$W/hf" > /dev/null 2>&1; check "export of damaged ckpt" 1 $?
cmp -s "$W/prev.st" "$W/hf/model.safetensors"; check "previous export untouched" 0 $?
ls -a "$W" | grep 'export-tmp' > /dev/null && { bad "temp dir left after failure"; }

# --- item 28: stdout write errors ----------------------------------------------------------
reset
if [ -w /dev/full ]; then
    "$BIN" ckpt inspect "$W/run" > /dev/full 2> "$W/err.txt"; check "inspect >/dev/full" 1 $?
    has "inspect says stdout failed" "$W/err.txt" "write to stdout failed"
    "$BIN" ckpt verify "$W/run" > /dev/full 2> "$W/err.txt"; check "verify >/dev/full" 1 $?
    has "verify says stdout failed" "$W/err.txt" "write to stdout failed"
fi

# --- item 30: --max-shard-size -------------------------------------------------------------
for bad in 0.5 1e-300GB inf nan 0 -5 1.5 GB; do
    "$BIN" ckpt export "$W/run" --hf "$W/hf3" --max-shard-size "$bad" > /dev/null 2>&1
    check "--max-shard-size $bad refused" 2 $?
done
"$BIN" ckpt export "$W/run" --hf "$W/hf3" --max-shard-size 1.5KB > /dev/null
check "--max-shard-size 1.5KB accepted" 0 $?
for good in 5gb 2kb 1KiB 0.001mb; do # any case, as transformers (convert_file_size_to_int)
    "$BIN" ckpt export "$W/run" --hf "$W/hf3" --max-shard-size "$good" > /dev/null 2>&1
    check "--max-shard-size $good accepted" 0 $?
done
"$BIN" ckpt export "$W/run" --hf "$W/hf3" --max-shard-size 5xb > /dev/null 2>&1
check "--max-shard-size 5xb refused" 2 $?
# config.json's torch_dtype names the dtype the tensors were written in
for pair in fp32:float32 bf16:bfloat16 fp16:float16; do
    "$BIN" ckpt export "$W/run" --hf "$W/hf4" --dtype "${pair%%:*}" > /dev/null 2>&1
    got=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["torch_dtype"])' "$W/hf4/config.json")
    [ "$got" = "${pair#*:}" ] && echo "ok   --dtype ${pair%%:*}: torch_dtype $got" ||
        { echo "FAIL --dtype ${pair%%:*}: torch_dtype $got, expected ${pair#*:}"; fail=1; }
done

# --- item 30: sharding.strategy and the rank file's world size -----------------------------
reset
edit "$S/manifest.json" "m['sharding']['strategy'] = 'BOGUS'"
"$BIN" ckpt verify "$W/run" > /dev/null 2> "$W/err.txt"; check "strategy BOGUS refused" 1 $?
has "message names sharding.strategy" "$W/err.txt" 'sharding.strategy "BOGUS"'
reset
# header world (u32 at byte 16) = 2 while the manifest says world_size 1 (the file checksums
# are updated so only the header disagrees)
HERE="$(cd "$(dirname "$0")" && pwd)"
"$PY" - "$S" "$HERE" <<'PY' || { bad "rewriting the rank file"; }
import json, struct, sys
d = sys.argv[1]
sys.path.insert(0, sys.argv[2])
from xxh64 import hexdigest
m = json.load(open(d + "/manifest.json"))
f = m["files"][0]
p = d + "/" + f["file"]
b = bytearray(open(p, "rb").read())
# the spec-written XXH64 must agree with the one shardlm recorded before we rely on it
assert hexdigest(bytes(b)) == f["xxh64"], (hexdigest(bytes(b)), f["xxh64"])
b[16:20] = struct.pack("<I", 2)
open(p, "wb").write(bytes(b))
f["xxh64"] = hexdigest(bytes(b))
f["chunk_xxh64"] = [hexdigest(bytes(b[i:i + 4194304])) for i in range(0, len(b), 4194304)]
json.dump(m, open(d + "/manifest.json", "w"))
PY
"$BIN" ckpt verify "$W/run" > /dev/null 2> "$W/err.txt"; check "rank file world 2 vs manifest 1" 1 $?
has "message names the header's world" "$W/err.txt" "header records rank 0 of world 2"
"$BIN" ckpt export "$W/run" --hf "$W/hf4" > /dev/null 2> "$W/err.txt"
check "export reads the header too" 1 $?
has "export message names the header's world" "$W/err.txt" "header records rank 0 of world 2"
reset
edit "$S/manifest.json" "m['files'][0]['rank'] = 1"
"$BIN" ckpt verify "$W/run" > /dev/null 2> "$W/err.txt"; check "files[].rank >= world_size" 1 $?
slm_finish
