#!/usr/bin/env bash
# Issue 8 #31: a run whose training state fits in memory but whose asynchronous checkpoint
# staging copy (params + AdamW m, v of the rank's shard) does not. Under an address-space limit
# (ulimit -v) sized from the run's own start-up estimate, the checkpoints must be written through
# the bounded-memory path (synchronously, straight from the shards; the log says so), verify
# with `ckpt verify`, equal byte for byte those of a run that staged normally, and a resume from
# them must end bitwise equal to the uninterrupted run. Before the fix the staging allocation
# aborted (exit 70) at the first checkpoint.
# About 40 s on an idle machine (the fsyncs of 150 MB checkpoints dominate).
# Env (set by CTest): SHARDLM_BIN, SLM_PYTHON.
set -uo pipefail
BIN="${SHARDLM_BIN:?}"
PY="${SLM_PYTHON:-python3}"
W=$(mktemp -d /tmp/slm_bounded.XXXXXX)
trap 'rm -rf "$W"' EXIT
fails=0
ok() { echo "[ ok ] $1"; }
bad() { echo "[FAIL] $1"; fails=$((fails + 1)); }

# 13.2 M parameters: state (4 x fp32) 201 MiB, staging copy (3 x fp32) 151 MiB.
cat > "$W/cfg.json" <<'EOF'
{"vocab_size": 512, "hidden_size": 512, "intermediate_size": 1376, "num_hidden_layers": 4,
 "num_attention_heads": 8, "num_key_value_heads": 8, "max_position_embeddings": 64,
 "rms_norm_eps": 1e-5, "tie_word_embeddings": false}
EOF
# --peak-gflops: no sgemm benchmark (its buffers would only eat into the limit).
TRAIN=(train --synthetic --model "$W/cfg.json" --batch 1 --seq 16 --threads 1 --seed 5
       --peak-gflops 10 --ckpt-every-steps 1)
limited() { # limited KB cmd... : runs cmd under ulimit -v KB (bounded by a wall-clock timeout)
    local kb=$1
    shift
    timeout 400 bash -c 'ulimit -v "$0"; exec "$@"' "$kb" "$@"
}

# --- reference: normal asynchronous staging under a roomy limit. Its start-up line gives the
# headroom the probe saw, hence this process's address space at start (limit - headroom).
L0=4000000
limited $L0 "$BIN" "${TRAIN[@]}" --steps 2 --out "$W/a" > "$W/a.log" 2>&1
rc=$?
[ $rc = 0 ] && ok "reference run exits 0" || { bad "reference run: exit $rc"; cat "$W/a.log"; }
if ! grep -q "memory: about .* available" "$W/a.log"; then
    bad "no start-up memory estimate line"
    exit 1
fi
if ! grep -q "available (address-space limit" "$W/a.log"; then
    echo "SKIP: ulimit -v $L0 is not the binding limit here (less free memory?)"
    grep "memory:" "$W/a.log"
    exit 77
fi
grep -q "synchronously" "$W/a.log" && bad "reference run took the bounded path" \
    || ok "reference run staged normally"
read -r NEED_KB AVAIL_KB STAGE_KB < <("$PY" - "$W/a.log" <<'EOF'
import re, sys
u = {"bytes": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
t = open(sys.argv[1]).read()
m = re.search(r"memory: about ([\d.]+) (\w+) per process.*plus ([\d.]+) (\w+) for a "
              r"checkpoint's staging copy\); ([\d.]+) (\w+) available", t)
kb = lambda i: int(float(m.group(i)) * u[m.group(i + 1)] / 1024)
print(kb(1), kb(5), kb(3))
EOF
)
# The start-up estimate counts the staging copy: 3 x fp32 per parameter, parameters counted here
# from the config (embedding, per layer q k v o + gate up down + 2 norms, final norm, lm_head).
"$PY" - "$STAGE_KB" <<'EOF' && ok "start-up estimate counts the staging copy" \
    || bad "staging copy in the start-up estimate"
import sys
V, C, F, L, H, KV = 512, 512, 1376, 4, 8, 8
kvd = C // H * KV
n = V * C + L * (C * C * 2 + 2 * C * kvd + 3 * C * F + 2 * C) + C + V * C
want, got = 3 * n * 4 / 1024, int(sys.argv[1])
print(f"  staging in the estimate {got} KiB, 3 x 4 x {n} parameters = {want:.0f} KiB")
assert abs(got - want) <= want * 0.01
EOF
BASE_KB=$((L0 - AVAIL_KB))
# Room for the state + activations, OpenBLAS's buffers and the thread stacks, but not for the
# staging copy as well (the async path needs about 300 MiB over the state here).
L=$((BASE_KB + NEED_KB + 170 * 1024))
echo "  address space at start $((BASE_KB / 1024)) MiB, estimate $((NEED_KB / 1024)) MiB," \
     "staging $((STAGE_KB / 1024)) MiB -> ulimit -v $L"

# --- the limited run: checkpoints through the bounded path, verified, equal to the reference
limited $L "$BIN" "${TRAIN[@]}" --steps 2 --out "$W/b" > "$W/b.log" 2>&1
rc=$?
[ $rc = 0 ] && ok "limited run exits 0" || { bad "limited run: exit $rc"; tail -5 "$W/b.log"; }
grep -q "checkpoint step 1: a staging copy .* does not fit .*writing it synchronously" \
    "$W/b.log" && ok "save logs the bounded path" || bad "no bounded-path log line"
for s in 1 2; do
    d=$(printf "step_%08d" $s)
    "$BIN" ckpt verify "$W/b/checkpoints/$d" > /dev/null 2>&1 && ok "ckpt verify $d" \
        || bad "ckpt verify $d"
    cmp -s "$W/a/checkpoints/$d/rank_00000.bin" "$W/b/checkpoints/$d/rank_00000.bin" \
        && ok "$d rank file equals the normally staged one" || bad "$d rank file differs"
done
# (the step-2 rank files compared above hold the final weights: the run's only weight file)

# --- resume from the bounded checkpoint of step 1 (still under the limit): bitwise equal to the
# uninterrupted reference
limited $L "$BIN" "${TRAIN[@]}" --steps 2 --resume "$W/b/checkpoints/step_00000001" \
    --ckpt-every-steps 0 --out "$W/c" > "$W/c.log" 2>&1
rc=$?
[ $rc = 0 ] && ok "resume under the limit exits 0" || { bad "resume: exit $rc"; tail -5 "$W/c.log"; }
# The final checkpoint (weights, AdamW m and v) byte for byte.
cmp -s "$W/a/checkpoints/step_00000002/rank_00000.bin" \
    "$W/c/checkpoints/step_00000002/rank_00000.bin" && ok "resumed step 2 checkpoint equal" \
    || bad "resumed step 2 checkpoint differs"

[ $fails = 0 ] && echo "all passed" || echo "$fails failed"
[ $fails = 0 ]
