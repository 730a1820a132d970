#!/usr/bin/env bash
# shardlm train under mpirun vs a world of one, through the CLI: a prepared slice of
# tinyshakespeare (real loader: each rank reads its slice of the global batch) and --synthetic.
# world 1 with --batch 8 and world N with --batch 8/N train on the same global batches, so the
# per-step losses and grad norms in metrics.jsonl must match within 1e-5 relative and model.bin
# (all-gathered by rank 0) within 3e-5 (batch-8 vs batch-4 GEMMs sum in another order; test_fsdp_equiv holds 1e-5 against a micro-batched reference), for FULL_SHARD, NO_SHARD, SHARD_GRAD_OP (N=2) and
# HYBRID_SHARD G=2 (N=4, with --grad-accum 2 and eval). Also: bad FSDP options exit 2.
# Usage: test_fsdp_train_cli.sh MPIEXEC. Env (CTest): SHARDLM_BIN, SLM_PYTHON, SLM_SHARED_DIR.
set -euo pipefail
MPIEXEC=$1
BIN="${SHARDLM_BIN:?}"
PY="${SLM_PYTHON:-python3}"
CORPUS="${SLM_SHARED_DIR:?}/data/tinyshakespeare.txt"
W=$(mktemp -d /tmp/slm_fsdp_cli.XXXXXX)
trap 'rm -rf "$W"' EXIT
fails=0
ok() { echo "[ ok ] $1"; }
bad() { echo "[FAIL] $1"; fails=$((fails + 1)); }
export OMP_NUM_THREADS=1

head -c 100000 "$CORPUS" > "$W/corpus.txt"
"$BIN" tokenizer train --input "$W/corpus.txt" --vocab-size 300 --out "$W/tokenizer.json" --quiet
"$BIN" prep --tokenizer "$W/tokenizer.json" --input "$W/corpus.txt" --out "$W/data" \
    --val-fraction 0.1 --workers 1 --quiet
V=$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['tokenizer']['vocab_size'])" "$W/data/manifest.json")
cat > "$W/config.json" <<EOF2
{"vocab_size": $V, "hidden_size": 64, "intermediate_size": 172, "num_hidden_layers": 2,
 "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 32,
 "rms_norm_eps": 1e-5, "tie_word_embeddings": false}
EOF2
COMMON=(--model "$W/config.json" --seq 32 --steps 8 --lr 3e-3 --warmup 2 --seed 5 --threads 1
        --peak-gflops 10 --log-every 0 --collective-timeout 60)

# compare RUN_A RUN_B LABEL: losses / grad norms / val losses and weights
compare() {
    "$PY" - "$1" "$2" <<'EOF2'
import json, struct, sys
import numpy as np
def steps(d):
    rows = [json.loads(l) for l in open(d + "/metrics.jsonl")]
    return [r for r in rows if r.get("event") == "step"]
def weights(d):
    b = open(d + "/model.bin", "rb").read()
    n_units = struct.unpack_from("<I", b, 12)[0]
    numel = struct.unpack_from("<%dQ" % n_units, b, 64)
    return np.frombuffer(b, dtype="<f4", offset=64 + 8 * n_units, count=sum(numel))
a, b = steps(sys.argv[1]), steps(sys.argv[2])
assert len(a) == len(b) and len(a) > 0, (len(a), len(b))
for x, y in zip(a, b):
    for k in ("loss", "grad_norm", "val_loss"):
        if x.get(k) is None and y.get(k) is None: continue
        r = abs(x[k] - y[k]) / abs(x[k])
        assert r <= 1e-5, "step %d %s: %r vs %r (rel %.3g)" % (x["step"], k, x[k], y[k], r)
wa, wb = weights(sys.argv[1]), weights(sys.argv[2])
d = float(np.max(np.abs(wa - wb)))
assert d <= 3e-5, "max |w1 - wN| = %g" % d
print("  %d steps, last loss %.6f vs %.6f, max |w1 - wN| %.3g" % (len(a), a[-1]["loss"], b[-1]["loss"], d))
EOF2
}

for src in data synthetic; do
    if [ $src = data ]; then D=(--data "$W/data" --eval-every 4 --eval-batches 2); else D=(--synthetic); fi
    "$BIN" train "${COMMON[@]}" "${D[@]}" --batch 8 --out "$W/$src-1" > "$W/$src-1.log" 2>&1 \
        || { cat "$W/$src-1.log"; bad "$src: world of one"; continue; }
    for cfg in "2 FULL_SHARD" "2 NO_SHARD" "2 SHARD_GRAD_OP" "4 HYBRID_SHARD"; do
        set -- $cfg
        n=$1 s=$2 extra=()
        [ "$s" = HYBRID_SHARD ] && extra=(--shard-group-size 2)
        out="$W/$src-$n-$s"
        if "$MPIEXEC" -np "$n" --oversubscribe -x OMP_NUM_THREADS=1 "$BIN" train "${COMMON[@]}" \
            "${D[@]}" --batch $((8 / n)) --sharding "$s" "${extra[@]}" --out "$out" \
            > "$out.log" 2>&1 && compare "$W/$src-1" "$out"; then
            ok "$src: $s on $n ranks == world of one"
        else
            tail -20 "$out.log"; bad "$src: $s on $n ranks == world of one"
        fi
    done
done

# gradient accumulation: world 1 --batch 4 --grad-accum 2 vs 2 ranks --batch 2 --grad-accum 2
"$BIN" train "${COMMON[@]}" --synthetic --batch 4 --grad-accum 2 --out "$W/acc-1" > /dev/null 2>&1
if "$MPIEXEC" -np 2 --oversubscribe "$BIN" train "${COMMON[@]}" --synthetic --batch 2 \
    --grad-accum 2 --reduce-dtype fp32 --out "$W/acc-2" > "$W/acc-2.log" 2>&1 \
    && compare "$W/acc-1" "$W/acc-2"; then
    ok "grad accumulation: 2 ranks == world of one"
else
    tail -20 "$W/acc-2.log"; bad "grad accumulation: 2 ranks == world of one"
fi

# usage errors exit 2 with a message naming the option
set +e
"$BIN" train "${COMMON[@]}" --synthetic --batch 8 --sharding HALF_SHARD > "$W/e1.log" 2>&1
[ $? = 2 ] && grep -q "HALF_SHARD" "$W/e1.log" && ok "unknown --sharding exits 2" || bad "unknown --sharding exits 2"
"$BIN" train "${COMMON[@]}" --synthetic --batch 8 --param-dtype fp8 > "$W/e2.log" 2>&1
[ $? = 2 ] && grep -q "fp8" "$W/e2.log" && ok "bad --param-dtype exits 2" || bad "bad --param-dtype exits 2"
"$MPIEXEC" -np 2 --oversubscribe "$BIN" train "${COMMON[@]}" --synthetic --batch 4 \
    --sharding HYBRID_SHARD --shard-group-size 3 > "$W/e3.log" 2>&1
rc=$?
[ $rc != 0 ] && grep -q "shard-group-size 3" "$W/e3.log" && ok "HYBRID G not dividing N fails ($rc)" \
    || { cat "$W/e3.log"; bad "HYBRID G not dividing N fails"; }
# A diverging run under FSDP: every rank sees the non-finite step loss through the loss
# all-reduce and the job ends with exit 1 and the message, well before the collective timeout.
t0=$(date +%s)
"$MPIEXEC" -np 2 --oversubscribe "$BIN" train "${COMMON[@]}" --synthetic --batch 4 --steps 30 \
    --lr 1e30 --min-lr 1e30 --grad-clip 0 --collective-timeout 60 --out "$W/nan" > "$W/nan.log" 2>&1
rc=$? dt=$(( $(date +%s) - t0 ))
[ $rc = 1 ] && grep -q "training loss is" "$W/nan.log" && [ $dt -lt 50 ] \
    && ok "NaN loss under FSDP: exit 1 on every rank in ${dt}s" \
    || { tail -5 "$W/nan.log"; bad "NaN loss under FSDP (rc $rc, ${dt}s)"; }
set -e
echo "$fails failed"
[ $fails = 0 ]
