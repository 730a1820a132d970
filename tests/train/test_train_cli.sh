#!/usr/bin/env bash
# End-to-end CLI: tokenizer train -> prep -> train -> eval -> generate on a slice of
# tinyshakespeare, with a tiny model. Checks: loss decreases; two runs are bitwise identical
# (the final checkpoint's weights, exported as fp32 safetensors, and the losses / grad norms /
# val losses in metrics.jsonl); eval on the val split
# reproduces the training loop's val loss; --unigram-entropy equals the entropy numpy computes
# from the val shard files; generate is deterministic for a seed; SIGTERM stops at a step
# boundary and saves a checkpoint; bad inputs exit 1/2 naming the problem.
# Env (set by CTest): SHARDLM_BIN, SLM_PYTHON, SLM_SHARED_DIR.
. "$(dirname "$0")/../lib.sh"
slm_corpus "$W/corpus.txt" 300000
"$BIN" tokenizer train --input "$W/corpus.txt" --vocab-size 512 --out "$W/tokenizer.json" --quiet
"$BIN" prep --tokenizer "$W/tokenizer.json" --input "$W/corpus.txt" --out "$W/data" \
    --val-fraction 0.1 --workers 2 --quiet
V=$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['tokenizer']['vocab_size'])" "$W/data/manifest.json")
slm_tiny_config "$W/config.json" vocab_size=$V hidden_size=64 intermediate_size=160 \
    num_hidden_layers=2 num_attention_heads=4 max_position_embeddings=64 rms_norm_eps=1e-5 \
    tie_word_embeddings=false
TRAIN=(train --data "$W/data" --model "$W/config.json" --batch 8 --seq 64 --steps 40 --lr 3e-3
       --warmup 5 --eval-every 20 --eval-batches 4 --seed 11 --threads 2 --peak-gflops 10
       --log-every 10)

# --- train twice: loss decreases, bitwise-identical runs
"$BIN" "${TRAIN[@]}" --out "$W/run1" > "$W/train1.log"
"$BIN" "${TRAIN[@]}" --out "$W/run2" > "$W/train2.log"
cat "$W/train1.log"
for f in config.json checkpoints/latest metrics.jsonl tokenizer.json; do
    [ -f "$W/run1/$f" ] && ok "run dir has $f" || bad "run dir lacks $f"
done
"$PY" - "$W/run1/metrics.jsonl" <<'EOF' && ok "loss decreases" || bad "loss decreases"
import json, sys
steps = [json.loads(l) for l in open(sys.argv[1]) if '"step"' in l and '"event":"step"' in l]
first, last = steps[0]["loss"], steps[-1]["loss"]
print(f"  first loss {first:.4f}, last {last:.4f}, val {steps[-1]['val_loss']:.4f}, {len(steps)} steps")
assert len(steps) == 40 and last < first - 1.0 and steps[-1]["val_loss"] < first
EOF
# The weights: each run's final checkpoint exported as fp32 (every parameter's bytes as trained).
"$BIN" ckpt export "$W/run1" --hf "$W/run1.hf" --dtype fp32 > /dev/null
"$BIN" ckpt export "$W/run2" --hf "$W/run2.hf" --dtype fp32 > /dev/null
cmp -s "$W/run1.hf/model.safetensors" "$W/run2.hf/model.safetensors" && ok "weights bitwise equal" \
    || bad "weights bitwise equal"
strip() { grep '"event":"step"' "$1" | sed -E 's/,"(tokens_per_s|mfu|ms_per_step|elapsed_s|data_ms|comm_ms|ckpt_ms|time)":[^,}]*//g'; }
if diff <(strip "$W/run1/metrics.jsonl") <(strip "$W/run2/metrics.jsonl") > /dev/null; then
    ok "metrics bitwise equal"
else
    bad "metrics bitwise equal"
fi

# --- eval: same windows as the loop's last validation -> same loss
VAL=$("$PY" -c "import json,sys; print([j for j in map(json.loads, open(sys.argv[1])) if j['event'] == 'step'][-1]['val_loss'])" "$W/run1/metrics.jsonl")
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

# --- one weight format: the run directory (its newest checkpoint), that step_N checkpoint and
# its fp32 HF export (with the tokenizer) are the same model to eval and generate
EA=(--data "$W/data" --split val --seq 32 --batch 4 --max-batches 2)
E_RUN=$("$BIN" eval --model "$W/run1" "${EA[@]}" 2> /dev/null)
E_STEP=$("$BIN" eval --model "$W/run1/checkpoints/step_00000040" "${EA[@]}" 2> /dev/null)
E_HF=$("$BIN" eval --model "$W/run1.hf" "${EA[@]}" 2> /dev/null)
E_HF2=$("$BIN" eval --init-from-hf "$W/run1.hf" "${EA[@]}" 2> /dev/null)
if [ -n "$E_RUN" ] && [ "$E_RUN" = "$E_STEP" ] && [ "$E_RUN" = "$E_HF" ] && [ "$E_RUN" = "$E_HF2" ]; then
    ok "eval: run dir == step_N == fp32 HF export ($(echo $E_RUN | head -c 40))"
else
    bad "eval of the model directory kinds differs: [$E_RUN] [$E_STEP] [$E_HF] [$E_HF2]"
fi
GR=$("$BIN" generate --model "$W/run1" --prompt "ROMEO:" --max-new 20 --seed 5 2> /dev/null)
GS=$("$BIN" generate --model "$W/run1/checkpoints/step_00000040" --prompt "ROMEO:" --max-new 20 --seed 5 2> /dev/null)
GH=$("$BIN" generate --model "$W/run1.hf" --prompt "ROMEO:" --max-new 20 --seed 5 2> /dev/null)
[ -n "$GR" ] && [ "$GR" = "$GS" ] && [ "$GR" = "$GH" ] && ok "generate: run dir == step_N == HF export" \
    || bad "generate of the model directory kinds differs: [$GR] [$GS] [$GH]"

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
    if [ $rc -eq "$code" ] && grep -Eq -e "$re" "$W/err.txt"; then
        ok "$name (exit $rc)"
    else
        bad "$name: exit $rc, expected $code and /$re/: $(head -c 300 "$W/err.txt")"
    fi
}
COMMON=(--batch 2 --seq 16 --steps 2 --threads 2 --out "$W/run_bad")
expect_fail "unknown preset" 2 "no-such-model" "$BIN" train --data "$W/data" --model no-such-model "${COMMON[@]}"
expect_fail "vocab mismatch" 2 "vocab mismatch.*$V" "$BIN" train --data "$W/data" \
    --model "$W/config.json" --vocab-size 1000 "${COMMON[@]}"
expect_fail "seq > max_position_embeddings" 2 "max_position_embeddings" "$BIN" train \
    --data "$W/data" --model "$W/config.json" --batch 2 --seq 65 --steps 2 --out "$W/run_bad"
mkdir -p "$W/empty"
expect_fail "missing manifest" 1 "manifest" "$BIN" train --data "$W/empty" \
    --model "$W/config.json" "${COMMON[@]}"
expect_fail "NaN loss" 1 "step [0-9]+.*(NaN|nan|inf)" "$BIN" train --data "$W/data" \
    --model "$W/config.json" --batch 2 --seq 16 --steps 30 --lr 1e30 --min-lr 1e30 \
    --grad-clip 0 --threads 2 --out "$W/run_nan"
expect_fail "missing --steps" 2 "required" "$BIN" train --data "$W/data" --model "$W/config.json" \
    --batch 2 --seq 16 --out "$W/run_bad"
# Token-id files: any bad id is a problem with the file's contents (exit 1), naming FILE:LINE:COL.
echo "1 2 $V" > "$W/ids.txt"
expect_fail "eval id out of range" 1 "ids.txt:1:5: token id $V.*\[0, $V\)" "$BIN" eval --model "$W/run1" --token-ids "$W/ids.txt"
printf '1 2 3\n4 -1 5\n' > "$W/ids_neg.txt"
expect_fail "eval negative id" 1 "ids_neg.txt:2:3" "$BIN" eval --model "$W/run1" --token-ids "$W/ids_neg.txt"
printf '1 abc 3\n' > "$W/ids_abc.txt"
expect_fail "eval non-number id" 1 "ids_abc.txt:1:3" "$BIN" eval --model "$W/run1" --token-ids "$W/ids_abc.txt"
echo "1 2 3" > "$W/ids_ok.txt"
expect_fail "eval --token-ids with --seq" 2 "--seq applies to --data only" "$BIN" eval \
    --model "$W/run1" --token-ids "$W/ids_ok.txt" --seq 8

# Invalid hyper-parameters are usage errors at parse time: nothing is written to the run dir.
cp -r "$W/run1/checkpoints" "$W/ckpts1"
cp "$W/run1/metrics.jsonl" "$W/metrics1.jsonl"
while read -r opt val re <&3; do
    expect_fail "train $opt $val" 2 "$re" "$BIN" "${TRAIN[@]}" --out "$W/run1" "$opt" "$val"
done 3<<'EOF2'
--beta1 -1 --beta1 -1: must be in \[0, 1\)
--beta1 1 --beta1 1: must be in \[0, 1\)
--beta2 nan --beta2 nan: must be in \[0, 1\)
--beta2 1.5 --beta2 1.5: must be in \[0, 1\)
--eps 0 --eps 0: must be > 0
--grad-clip nan --grad-clip nan: must be >= 0 and finite
--grad-clip -1 --grad-clip -1: must be >= 0
--lr 0 --lr 0: must be > 0
--lr inf --lr inf: must be > 0 and finite
--min-lr -1 --min-lr -1: must be >= 0
--min-lr nan --min-lr nan: must be >= 0 and finite
--min-lr 1 --min-lr 1: must be in \[0, lr\]
--weight-decay -0.5 --weight-decay -0.5: must be >= 0
--max-minutes 0 --max-minutes 0: must be > 0
--max-minutes nan --max-minutes nan: must be > 0 and finite
--peak-gflops 0 --peak-gflops 0: must be > 0
--peak-gflops -5 --peak-gflops -5: must be > 0
--warmup -1 --warmup: -1 is out of range
EOF2
diff -r "$W/run1/checkpoints" "$W/ckpts1" > /dev/null && cmp -s "$W/run1/metrics.jsonl" "$W/metrics1.jsonl" \
    && ok "rejected options left run1 intact" || bad "rejected options left run1 intact"
expect_fail "train without --out" 2 "--out RUN_DIR is required" "$BIN" train --data "$W/data" \
    --model "$W/config.json" --batch 2 --seq 16 --steps 2
expect_fail "train --synthetic with --data" 2 "--synthetic and --data" "$BIN" train --synthetic \
    --data "$W/data" --model "$W/config.json" --batch 2 --seq 16 --steps 2 --out "$W/run_bad"
[ ! -e "$W/run_bad" ] && ok "no run dir left by refused trains" || bad "no run dir left by refused trains"
"$BIN" train --synthetic --model "$W/config.json" --batch 2 --seq 16 --steps 2 --threads 2 \
    --peak-gflops 10 > /dev/null 2>&1 && ok "--synthetic without --out still runs" \
    || bad "--synthetic without --out still runs"

# Unknown options and missing values, every subcommand.
# A dataset made with another tokenizer of the same vocab size: eval must refuse it.
"$BIN" tokenizer train --input "$W/corpus.txt" --vocab-size 512 --special "<|bos|>,<|eos|>" \
    --out "$W/tokenizer2.json" --quiet
"$BIN" prep --tokenizer "$W/tokenizer2.json" --input "$W/corpus.txt" --out "$W/data2" \
    --val-fraction 0.1 --quiet
expect_fail "eval with another tokenizer's data" 1 "tokenizer" "$BIN" eval --model "$W/run1" \
    --data "$W/data2"
expect_fail "eval of a step_N with another tokenizer's data" 1 "run1/tokenizer.json .*differs" \
    "$BIN" eval --model "$W/run1/checkpoints/step_00000040" --data "$W/data2"
expect_fail "eval --init-from-hf of a run directory" 2 "not a Hugging Face directory" \
    "$BIN" eval --init-from-hf "$W/run1" --data "$W/data"
expect_fail "generate --init-from-hf of a run directory" 2 "not a Hugging Face directory" \
    "$BIN" generate --init-from-hf "$W/run1" --prompt hi
expect_fail "train unknown option" 2 "unknown option --bogus \(see --help\)" "$BIN" train --bogus 1
expect_fail "train missing value" 2 "option --lr needs a value" "$BIN" train --model x --lr
expect_fail "eval unknown option" 2 "unknown option --bogus \(see --help\)" "$BIN" eval --bogus
expect_fail "eval missing value" 2 "option --data needs a value" "$BIN" eval --model "$W/run1" --data
expect_fail "generate unknown option" 2 "unknown option --bogus \(see --help\)" "$BIN" generate --bogus 1
expect_fail "generate missing value" 2 "option --prompt needs a value" "$BIN" generate --model "$W/run1" --prompt
expect_fail "bench-peak unknown option" 2 "unknown option --bogus \(see --help\)" "$BIN" bench-peak --bogus
expect_fail "bench-peak missing value" 2 "option --n needs a value" "$BIN" bench-peak --n

# generate: bad sampling options are refused before anything reaches stdout.
for o in "--top-p 2" "--top-p 0" "--temperature nan" "--temperature inf" "--temperature -1"; do
    expect_fail "generate $o" 2 "${o%% *} " "$BIN" generate --model "$W/run1" --prompt "ROMEO:" $o
    [ ! -s "$W/out.txt" ] && ok "generate $o: nothing on stdout" || bad "generate $o: stdout $(head -c 100 "$W/out.txt")"
done
if "$BIN" generate --model "$W/run1" --prompt "ROMEO:" --max-new 1000 --seed 3 > "$W/long.txt" 2> "$W/long.err" \
    && grep -q "stops at max_position_embeddings = 64" "$W/long.err" && [[ "$(cat "$W/long.txt")" == ROMEO:* ]]; then
    ok "generate --max-new past the context warns"
else
    bad "generate --max-new past the context warns: $(cat "$W/long.err")"
fi

# A full stdout is a runtime error (exit 1) naming the failed write.
expect_full() { # name, command...
    local name=$1
    shift
    set +e
    "$@" > /dev/full 2> "$W/err.txt"
    local rc=$?
    set -e
    if [ $rc -eq 1 ] && grep -q "write to stdout failed: No space left on device" "$W/err.txt"; then
        ok "$name to /dev/full (exit 1)"
    else
        bad "$name to /dev/full: exit $rc: $(head -c 300 "$W/err.txt")"
    fi
}
expect_full "eval" "$BIN" eval --model "$W/run1" --data "$W/data" --seq 16 --max-batches 1
expect_full "generate" "$BIN" generate --model "$W/run1" --prompt "ROMEO:" --max-new 5
expect_full "bench-peak" "$BIN" bench-peak --n 64 --reps 1
expect_fail "eval without run" 1 "nope: No such file or directory" "$BIN" eval --model "$W/nope" --token-ids "$W/ids.txt"

# --- config.json / checkpoint mismatch (a config far bigger than the weights): exit 1 before any
# allocation, naming both files
cp -r "$W/run1" "$W/g3"
"$PY" - "$W/g3/config.json" <<'EOF'
import json, sys
c = json.load(open(sys.argv[1]))
c.update(hidden_size=8192, intermediate_size=22016, num_hidden_layers=8, num_attention_heads=64,
         num_key_value_heads=64)
json.dump(c, open(sys.argv[1], "w"))
EOF
expect_fail "eval: config.json bigger than the checkpoint" 1 "config.json: hidden_size is 8192.*manifest.json" \
    bash -c 'ulimit -v 4000000; exec "$@"' _ "$BIN" eval --model "$W/g3" --data "$W/data"
expect_fail "generate: config.json bigger than the checkpoint" 1 "config.json: hidden_size is 8192.*manifest.json" \
    bash -c 'ulimit -v 4000000; exec "$@"' _ "$BIN" generate --model "$W/g3" --prompt hi

# --- train's memory estimate: refused up front (exit 2), naming what to reduce; no files
cat > "$W/cf_1e12.json" <<EOF
{"vocab_size": $V, "hidden_size": 65536, "intermediate_size": 131072, "num_hidden_layers": 20,
 "num_attention_heads": 512, "num_key_value_heads": 512, "max_position_embeddings": 64}
EOF
expect_fail "train: model beyond memory" 1 "needs about .* of memory.*reduce --batch" \
    "$BIN" train --data "$W/data" --model "$W/cf_1e12.json" --batch 1 --seq 8 --steps 1 \
    --out "$W/xh"
[ ! -e "$W/xh" ] && ok "memory refusal creates no run dir" || bad "memory refusal created $W/xh"
expect_fail "train: batch beyond memory" 1 "activations.*reduce --batch" \
    bash -c 'ulimit -v 4000000; exec "$@"' _ \
    "$BIN" train --synthetic --model "$W/config.json" --batch 100000 --seq 64 --steps 1 \
    --out "$W/xh2"
[ ! -e "$W/xh2" ] && ok "batch refusal creates no run dir" || bad "batch refusal created $W/xh2"
expect_fail "train: batch larger than the split" 2 \
    "train split has [0-9]+ windows of --seq \+ 1 = 17 tokens; need at least 100000" \
    "$BIN" train --data "$W/data" --model "$W/config.json" --batch 100000 --seq 16 --steps 1 \
    --out "$W/xh3"

# --- a fresh run into an earlier run's directory: refused while it holds checkpoints (kept), and
# a failed fresh run leaves no stale weights beside its new config.json
cp "$W/run1/config.json" "$W/run1_config.json"
cp -r "$W/run1/checkpoints" "$W/run1_ckpts"
expect_fail "fresh train into a run with checkpoints" 2 "checkpoints.*--resume auto" \
    "$BIN" train --data "$W/data" --model "$W/config.json" "${COMMON[@]}" --out "$W/run1"
if cmp -s "$W/run1/config.json" "$W/run1_config.json" &&
    diff -r "$W/run1/checkpoints" "$W/run1_ckpts" > /dev/null; then
    ok "refused run leaves the run dir intact"
else
    bad "refused run changed $W/run1"
fi
cp -r "$W/run1" "$W/g4"
rm -rf "$W/g4/checkpoints"
expect_fail "failed fresh train (NaN)" 1 "(NaN|nan|inf)" "$BIN" train --data "$W/data" \
    --model "$W/config.json" --batch 2 --seq 16 --steps 30 --lr 1e30 --min-lr 1e30 \
    --grad-clip 0 --threads 2 --out "$W/g4"
expect_fail "eval after a failed fresh run: no stale weights" 1 "g4: no committed checkpoint" \
    "$BIN" eval --model "$W/g4" --data "$W/data"

# --- eval messages: one prefix, no loader jargon; --unigram-entropy verifies the shards
expect_fail "eval --seq too long: one prefix" 2 "^shardlm error: eval: --seq 65 is longer" \
    "$BIN" eval --model "$W/run1" --data "$W/data" --seq 65
cp -r "$W/data" "$W/dcor"
VS=$(ls "$W/dcor"/val_*.bin | head -1)
printf '\x07' | dd of="$VS" bs=1 seek=100 conv=notrunc 2> /dev/null
expect_fail "unigram entropy checks shard checksums" 1 "checksum mismatch" \
    "$BIN" eval --data "$W/dcor" --unigram-entropy

# --- SIGTERM (a preemption): stops at a step boundary, saves, exits 75 naming the preemption
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
if [ $rc -eq 75 ] && grep -q "preempted.*checkpoint saved" "$W/sig.err" &&
    "$BIN" ckpt verify "$W/run_sig" > /dev/null 2>&1; then
    ok "SIGTERM stops and saves"
else
    bad "SIGTERM stops and saves: exit $rc, $(cat "$W/sig.err")"
fi

slm_finish
