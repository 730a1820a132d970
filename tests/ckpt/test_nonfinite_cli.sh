#!/usr/bin/env bash
# NaN / inf weights in an HF directory are refused by every command that loads it, exit 1,
# naming the file and the tensor (issue 8 item 26; the checkpoint paths, direct and through the
# model-directory loader, are tests/ckpt/test_load_checks.c). The NaN / inf is written into model.safetensors by Python
# at the offset the header gives for the tensor.
# Env (set by CTest): SHARDLM_BIN, SLM_SHARED_DIR, SLM_PYTHON.
set -uo pipefail
BIN="${SHARDLM_BIN:?}"
PY="${SLM_PYTHON:?}"
CORPUS="${SLM_SHARED_DIR:?}/data/tinyshakespeare.txt"
W=$(mktemp -d /tmp/slm_nonfinite.XXXXXX)
trap 'rm -rf "$W"' EXIT
fails=0
t() { if eval "$2"; then echo "[ ok ] $1"; else echo "[FAIL] $1"; fails=$((fails + 1)); fi; }

head -c 50000 "$CORPUS" > "$W/corpus.txt"
"$BIN" tokenizer train --input "$W/corpus.txt" --vocab-size 300 --out "$W/tokenizer.json" --quiet
"$BIN" prep --tokenizer "$W/tokenizer.json" --input "$W/corpus.txt" --out "$W/data" \
    --val-fraction 0.1 --workers 1 --quiet
cat > "$W/config.json" <<JSON
{"vocab_size": 300, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
 "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 32}
JSON
TRAIN=(train --data "$W/data" --model "$W/config.json" --batch 2 --seq 32 --seed 2 --threads 2
       --peak-gflops 10 --log-every 0)
"$BIN" "${TRAIN[@]}" --steps 2 --out "$W/run" > /dev/null 2>&1
"$BIN" ckpt export "$W/run" --hf "$W/hf" > /dev/null
t "clean export loads" '"$BIN" eval --init-from-hf "$W/hf" --data "$W/data" --seq 32 --batch 2 \
   --max-batches 1 > /dev/null 2>&1'
for val in nan -inf; do
  "$PY" - "$W/hf/model.safetensors" "$val" <<'PYEOF'
import json, struct, sys
path, val = sys.argv[1], float(sys.argv[2])
raw = bytearray(open(path, "rb").read())
(n,) = struct.unpack("<Q", raw[:8])
e = json.loads(raw[8:8 + n])["model.layers.1.self_attn.v_proj.weight"]
assert e["dtype"] == "F32"
off = 8 + n + e["data_offsets"][0] + 4 * 7  # element 7
raw[off:off + 4] = struct.pack("<f", val)
open(path, "wb").write(raw)
PYEOF
  for cmd in "generate --init-from-hf $W/hf --prompt x --max-new 2" \
             "eval --init-from-hf $W/hf --data $W/data --seq 32 --batch 2 --max-batches 1" \
             "${TRAIN[*]} --steps 1 --init-from-hf $W/hf --out $W/run_$val"; do
    # shellcheck disable=SC2086
    "$BIN" $cmd > /dev/null 2> "$W/err"
    rc=$?
    t "$val: ${cmd%% *} exits 1 naming the tensor" '[ $rc = 1 ] &&
       grep -q "model.layers.1.self_attn.v_proj.weight.*element 7" "$W/err" &&
       grep -q "model.safetensors" "$W/err"'
  done
done
echo "$fails failed"
exit $((fails > 0))
