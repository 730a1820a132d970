#!/usr/bin/env bash
# End-to-end CLI: tokenizer train -> prep -> train -> eval -> generate on a slice of
# tinyshakespeare, with a tiny model. Checks: loss decreases; two runs are bitwise identical
# (model.bin and the losses / grad norms / val losses in metrics.jsonl); eval on the val split
# reproduces the training loop's val loss; --unigram-entropy equals the entropy numpy computes
# from the val shard files; generate is deterministic for a seed; SIGTERM stops at a step
# boundary and saves; bad inputs exit 1/2 naming the problem.
# Env (set by CTest): SHARDLM_BIN, SLM_PYTHON, SLM_SHARED_DIR.
set -euo pipefail
BIN="${SHARDLM_BIN:?}"
PY="${SLM_PYTHON:-python3}"
CORPUS="${SLM_SHARED_DIR:?}/data/tinyshakespeare.txt"
W=$(mktemp -d /tmp/slm_train_cli.XXXXXX)
trap 'rm -rf "$W"' EXIT
fails=0
ok() { echo "[ ok ] $1"; }
bad() { echo "[FAIL] $1"; fails=$((fails + 1)); }

head -c 300000 "$CORPUS" > "$W/corpus.txt"
"$BIN" tokenizer train --input "$W/corpus.txt" --vocab-size 512 --out "$W/tokenizer.json" --quiet
"$BIN" prep --tokenizer "$W/tokenizer.json" --input "$W/corpus.txt" --out "$W/data" \
    --val-fraction 0.1 --workers 2 --quiet
V=$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['tokenizer']['vocab_size'])" "$W/data/manifest.json")
cat > "$W/config.json" <<EOF
{"vocab_size": $V, "hidden_size": 64, "intermediate_size": 160, "num_hidden_layers": 2,
 "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64,
 "rms_norm_eps": 1e-5, "tie_word_embeddings": false}
EOF
TRAIN=(train --data "$W/data" --model "$W/config.json" --batch 8 --seq 64 --steps 40 --lr 3e-3
       --warmup 5 --eval-every 20 --eval-batches 4 --seed 11 --threads 2 --peak-gflops 10
       --log-every 10)

# --- train twice: loss decreases, bitwise-identical runs
"$BIN" "${TRAIN[@]}" --out "$W/run1" > "$W/train1.log"
"$BIN" "${TRAIN[@]}" --out "$W/run2" > "$W/train2.log"
cat "$W/train1.log"
for f in config.json model.bin metrics.jsonl tokenizer.json; do
    [ -f "$W/run1/$f" ] && ok "run dir has $f" || bad "run dir lacks $f"
done
"$PY" - "$W/run1/metrics.jsonl" <<'EOF' && ok "loss decreases" || bad "loss decreases"
import json, sys
steps = [json.loads(l) for l in open(sys.argv[1]) if '"step"' in l and '"event":"step"' in l]
first, last = steps[0]["loss"], steps[-1]["loss"]
print(f"  first loss {first:.4f}, last {last:.4f}, val {steps[-1]['val_loss']:.4f}, {len(steps)} steps")
assert len(steps) == 40 and last < first - 1.0 and steps[-1]["val_loss"] < first
EOF
cmp -s "$W/run1/model.bin" "$W/run2/model.bin" && ok "model.bin bitwise equal" \
    || bad "model.bin bitwise equal"
strip() { grep '"event":"step"' "$1" | sed -E 's/,"(tokens_per_s|mfu|ms_per_step|elapsed_s)":[^,}]*//g'; }
if diff <(strip "$W/run1/metrics.jsonl") <(strip "$W/run2/metrics.jsonl") > /dev/null; then
    ok "metrics bitwise equal"
else
    bad "metrics bitwise equal"
fi

# --- eval: same windows as the loop's last validation -> same loss
VAL=$("$PY" -c "import json,sys; print([json.loads(l) for l in open(sys.argv[1])][-2]['val_loss'])" "$W/run1/metrics.jsonl")
EV=$("$BIN" eval --model "$W/run1" --data "$W/data" --split val --seq 64 --batch 8 \
     --max-batches 4 | awk '$1=="loss"{print $2}')
"$PY" -c "import sys; a,b=float(sys.argv[1]),float(sys.argv[2]); print(f'  eval {a} loop {b}'); assert abs(a-b) < 1e-5" \
    "$EV" "$VAL" && ok "eval equals the loop's val loss" || bad "eval equals the loop's val loss"
HU=$("$BIN" eval --data "$W/data" --unigram-entropy | awk '$1=="unigram_entropy"{print $2}')
"$PY" - "$W/data" "$V" "$HU" <<'EOF' && ok "unigram entropy vs numpy" || bad "unigram entropy vs numpy"
import glob, sys, numpy as np
d, V, got = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
dt = np.uint16 if V <= 65536 else np.uint32  # data.h: token width by vocab size
c = np.zeros(V, np.int64)
for f in sorted(glob.glob(d + "/val_*.bin")):
    c += np.bincount(np.fromfile(f, dtype=dt, offset=64), minlength=V)
p = c[c > 0] / c.sum()
want = float(-(p * np.log(p)).sum())
print(f"  unigram entropy shardlm {got:.6f} numpy {want:.6f}")
assert abs(got - want) < 1e-5
EOF

# --- generate: deterministic for a seed
G1=$("$BIN" generate --model "$W/run1" --prompt "ROMEO:" --max-new 40 --seed 3 --top-k 50)
G2=$("$BIN" generate --model "$W/run1" --prompt "ROMEO:" --max-new 40 --seed 3 --top-k 50)
G3=$("$BIN" generate --model "$W/run1" --prompt "ROMEO:" --max-new 40 --seed 4 --top-k 50)
printf '  sample: %s\n' "$G1" | head -5
[ "$G1" = "$G2" ] && ok "generate deterministic" || bad "generate deterministic"
[ "$G1" != "$G3" ] && ok "generate seed changes the text" || bad "generate seed changes the text"
[[ "$G1" == ROMEO:* ]] && [ ${#G1} -gt 30 ] && ok "generate continues the prompt" \
    || bad "generate continues the prompt"

# --- bad inputs: exit code and a message naming the problem
expect_fail() { # name, exit code, message regex, command...
    local name=$1 code=$2 re=$3
    shift 3
    set +e
    "$@" > "$W/out.txt" 2> "$W/err.txt"
    local rc=$?
    set -e
    if [ $rc -eq "$code" ] && grep -Eq "$re" "$W/err.txt"; then
        ok "$name (exit $rc)"
    else
        bad "$name: exit $rc, expected $code and /$re/: $(head -c 300 "$W/err.txt")"
    fi
}
COMMON=(--batch 2 --seq 16 --steps 2 --threads 2)
expect_fail "unknown preset" 2 "no-such-model" "$BIN" train --data "$W/data" --model no-such-model "${COMMON[@]}"
expect_fail "vocab mismatch" 2 "vocab mismatch.*$V" "$BIN" train --data "$W/data" \
    --model "$W/config.json" --vocab-size 1000 "${COMMON[@]}"
expect_fail "seq > max_position_embeddings" 2 "max_position_embeddings" "$BIN" train \
    --data "$W/data" --model "$W/config.json" --batch 2 --seq 65 --steps 2
mkdir -p "$W/empty"
expect_fail "missing manifest" 1 "manifest" "$BIN" train --data "$W/empty" \
    --model "$W/config.json" "${COMMON[@]}"
expect_fail "NaN loss" 1 "step [0-9]+.*(NaN|nan|inf)" "$BIN" train --data "$W/data" \
    --model "$W/config.json" --batch 2 --seq 16 --steps 30 --lr 1e30 --min-lr 1e30 \
    --grad-clip 0 --threads 2
expect_fail "missing --steps" 2 "required" "$BIN" train --data "$W/data" --model "$W/config.json" \
    --batch 2 --seq 16
echo "1 2 $V" > "$W/ids.txt"
expect_fail "eval id out of range" 2 "ids.txt:1" "$BIN" eval --model "$W/run1" --token-ids "$W/ids.txt"
expect_fail "eval without run" 1 "not a directory" "$BIN" eval --model "$W/nope" --token-ids "$W/ids.txt"

# --- SIGTERM: stops at a step boundary, saves, exits 1 naming the interruption
"$BIN" train --data "$W/data" --model "$W/config.json" --batch 2 --seq 16 --steps 1000000 \
    --threads 2 --peak-gflops 10 --out "$W/run_sig" > /dev/null 2> "$W/sig.err" &
pid=$!
for _ in $(seq 1 300); do
    grep -q '"event":"step"' "$W/run_sig/metrics.jsonl" 2> /dev/null && break
    sleep 0.1
done
kill -TERM "$pid"
set +e
wait "$pid"
rc=$?
set -e
if [ $rc -eq 1 ] && grep -q "interrupted" "$W/sig.err" && [ -f "$W/run_sig/model.bin" ]; then
    ok "SIGTERM stops and saves"
else
    bad "SIGTERM stops and saves: exit $rc, $(cat "$W/sig.err")"
fi

echo "$fails failed"
[ $fails -eq 0 ]
