#!/usr/bin/env bash
# Datasets on a real S3 server (SeaweedFS, SigV4 checked): prep --out s3://... uploads shards,
# tokenizer and (last) manifest.json byte-equal to a local prep; train --data s3://... (streamed
# into --data-cache, every object's XXH64 checked) gives bitwise the losses of the local dataset,
# and its resume too; a truncated shard object fails naming the object; a changed byte fails the
# checksum naming the object.
# Args: S3_TOOL
. "$(dirname "$0")/../lib.sh"
export S3TOOL=$1
. "$(dirname "$0")/lib.sh"
slm_s3_start "$W/s3"
B=$S3_BUCKET
slm_corpus "$W/corpus.txt" 60000
"$BIN" tokenizer train --input "$W/corpus.txt" --vocab-size 300 --out "$W/tok.json" --quiet
P=(prep --tokenizer "$W/tok.json" --input "$W/corpus.txt" --val-fraction 0.1 --shard-tokens 4000 --quiet)
"$BIN" "${P[@]}" --out "$W/local"
"$BIN" "${P[@]}" --out "s3://$B/data/ts/"
check "prep --out s3://" 0 $?
"$S3TOOL" ls "$B" data/ts/ > "$W/ls"
nshards=$(ls "$W/local" | grep -c '\.bin$')
check "every shard uploaded" "$nshards" "$(grep -c '\.bin$' "$W/ls")"
has "manifest uploaded" "$W/ls" " data/ts/manifest.json"
same=1
for f in "$W"/local/*.bin "$W/local/manifest.json"; do
    "$S3TOOL" get "$B" "data/ts/${f##*/}" "$W/obj" > /dev/null
    cmp -s "$f" "$W/obj" || { same=0; echo "differs: ${f##*/}"; }
done
[ $same = 1 ] && ok "uploaded objects == local prep (bitwise)" || bad "uploaded objects differ"

cat > "$W/config.json" <<JSON
{"vocab_size": 300, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
 "num_attention_heads": 2, "num_key_value_heads": 2, "max_position_embeddings": 32}
JSON
T=(train --model "$W/config.json" --batch 4 --seq 16 --steps 6 --lr 3e-3 --seed 3 --threads 1
   --peak-gflops 10 --log-every 0 --eval-every 0)
losses() { grep '"event":"step"' "$1/metrics.jsonl" | sed -E 's/.*"step":([0-9]+),"loss":([^,]*),.*/\1 \2/'; }
"$BIN" "${T[@]}" --data "$W/local" --out "$W/run-local" > "$W/rl.log" 2>&1 || { tail "$W/rl.log"; bad "local train"; }
if "$BIN" "${T[@]}" --data "s3://$B/data/ts" --data-cache "$W/cache" --out "$W/run-s3" \
    --ckpt-uri "s3://$B/runs/d/" > "$W/rs.log" 2>&1
then ok "train --data s3://"; else tail "$W/rs.log"; bad "train --data s3://"; fi
has "fetch logged" "$W/rs.log" "every object's XXH64 verified"
if diff <(losses "$W/run-local") <(losses "$W/run-s3") > /dev/null; then ok "same losses as local shards (bitwise)"
else losses "$W/run-local"; echo --; losses "$W/run-s3"; bad "losses differ"; fi
# Resume from the cache (already verified files are reused, not fetched again).
"$BIN" "${T[@]}" --steps 9 --data "s3://$B/data/ts" --data-cache "$W/cache" --out "$W/run-s3" --resume auto > "$W/rs2.log" 2>&1 || bad "resume"
"$BIN" "${T[@]}" --steps 9 --data "$W/local" --out "$W/run-local" --resume auto > "$W/rl2.log" 2>&1 || bad "local resume"
if diff <(losses "$W/run-local") <(losses "$W/run-s3") > /dev/null; then ok "resume with --data s3:// == local"
else bad "resume losses differ"; fi
if grep -q "fetched" "$W/rs2.log"; then bad "cache not reused"; else ok "verified cache reused"; fi

# ckpt export of the S3 copy (weights through range GETs, the run's tokenizer from the prefix)
# == export of the local run directory.
"$BIN" ckpt export "s3://$B/runs/d/" --hf "$W/hf-s3" > "$W/ex.log" 2>&1 || { cat "$W/ex.log"; bad "ckpt export s3://"; }
"$BIN" ckpt export "$W/run-s3/checkpoints/step_00000006" --hf "$W/hf-local" > /dev/null 2>&1 || bad "local export"
for f in model.safetensors config.json tokenizer.json; do
    if cmp -s "$W/hf-s3/$f" "$W/hf-local/$f"; then ok "ckpt export s3://: $f == local export"
    else bad "ckpt export s3://: $f differs"; fi
done

# A truncated shard object: the error names the object and both sizes.
shard=$(ls "$W/local" | grep '^train_.*\.bin$' | head -1)
head -c 100 "$W/local/$shard" > "$W/short"
"$S3TOOL" put "$B" "data/ts/$shard" "$W/short" > /dev/null
set +e
"$BIN" "${T[@]}" --data "s3://$B/data/ts" --data-cache "$W/cache2" --out "$W/run-t" > "$W/trunc.log" 2>&1
rc=$?
set -e
check "truncated object: exit 1" 1 $rc
has "names the object (truncated)" "$W/trunc.log" "s3://$B/data/ts/$shard: 100 bytes, the manifest says"
# Same size, one byte changed: checksum error naming the object.
"$PY" -c "
import sys; b = bytearray(open(sys.argv[1], 'rb').read()); b[-1] ^= 1
open(sys.argv[2], 'wb').write(b)" "$W/local/$shard" "$W/bad"
"$S3TOOL" put "$B" "data/ts/$shard" "$W/bad" > /dev/null
set +e
"$BIN" "${T[@]}" --data "s3://$B/data/ts" --data-cache "$W/cache3" --out "$W/run-c" > "$W/csum.log" 2>&1
rc=$?
set -e
check "corrupt object: exit 1" 1 $rc
has "checksum error names the object" "$W/csum.log" "s3://$B/data/ts/$shard: checksum mismatch"
slm_finish
