#!/usr/bin/env bash
# shardlm train --simulate-compute (issue 14): the collectives of a simulated step are those of a
# real step. Each run dumps every rank's flight recorder at the end (SHARDLM_FLIGHT_DUMP=end);
# per rank and group, the sequence of (seq, op, what, bytes, dist context naming the FSDP unit,
# step, phase) of the simulated run must equal the real run's, entry for entry: FULL_SHARD on 2 ranks with
# --grad-accum 2, and HYBRID_SHARD G=2 on 4 ranks with bf16 parameters and reduction. The step
# line's simulated compute must be the model's FLOPs / GFLOPS, with the FLOPs computed here from
# the config (6 N + 12 L C T per token, N = matmul parameters), and no loss may be printed.
# Bad --simulate-compute values exit 2.
# Usage: test_sim_compute.sh MPIEXEC. Env (CTest): SHARDLM_BIN, SLM_PYTHON, SLM_SHARED_DIR.
. "$(dirname "$0")/../lib.sh"
MPIEXEC=$1
export OMP_NUM_THREADS=1
slm_tiny_config "$W/config.json" vocab_size=256 hidden_size=64 intermediate_size=172 \
    num_hidden_layers=3 num_attention_heads=4 num_key_value_heads=2 max_position_embeddings=64
COMMON=(--model "$W/config.json" --synthetic --seq 32 --batch 2 --steps 2 --threads 1
        --peak-gflops 10 --collective-timeout 120)
GF=2

# run NAME NP ARGS...: a real and a simulated run, each with its flight dumps.
run() {
    local name=$1 np=$2
    shift 2
    SHARDLM_FLIGHT_DUMP=end slm_mpirun "$np" "$BIN" train "${COMMON[@]}" "$@" \
        --out "$W/$name.real" > "$W/$name.real.log" 2>&1 || { bad "$name: real run failed"; cat "$W/$name.real.log"; return 1; }
    SHARDLM_FLIGHT_DUMP=end slm_mpirun "$np" "$BIN" train "${COMMON[@]}" "$@" --simulate-compute $GF \
        --out "$W/$name.sim" > "$W/$name.sim.log" 2>&1 || { bad "$name: simulated run failed"; cat "$W/$name.sim.log"; return 1; }
    "$PY" - "$W/$name" "$np" "$W/config.json" "$GF" "$@" <<'PYEOF'
import json, re, sys
base, np_, cfgp, gf = sys.argv[1], int(sys.argv[2]), sys.argv[3], float(sys.argv[4])
extra = sys.argv[5:]
fails = 0
def entries(run, r):
    # Per group in sequence order (MPI's order; across groups a rank's start order depends on
    # when its polls saw a reduce-scatter finish, so it differs between two real runs too). The
    # trainer phase of a replica all-reduce (started by a poll, maybe in the optimizer's final
    # sync) is left out for the same reason; its dist context names the unit it reduces.
    d = json.load(open(f"{base}.{run}/logs/flight_rank_{r:05d}.json"))
    return sorted((e["group"], e["seq"], e["op"], e["what"], e["bytes"], e["context"], e["step"],
                   "" if "replica group" in e["what"] else e["phase"]) for e in d["entries"])
n_fsdp = 0
for r in range(np_):
    a, b = entries("real", r), entries("sim", r)
    n_fsdp += sum(1 for e in a if "FSDP unit" in e[5])
    if a != b:
        fails += 1
        print(f"rank {r}: {len(a)} real vs {len(b)} simulated collectives")
        for i, (x, y) in enumerate(zip(a, b)):
            if x != y:
                print(f"  first difference at entry {i}: real {x} / simulated {y}")
                break
if n_fsdp == 0:
    fails += 1
    print("no FSDP collectives recorded")
# The simulated compute of a step = FLOPs per token x this rank's tokens / rate.
c = json.load(open(cfgp))
C, F, V, L = c["hidden_size"], c["intermediate_size"], c["vocab_size"], c["num_hidden_layers"]
H, KV = c["num_attention_heads"], c["num_key_value_heads"]
D = C // H
n_mm = L * (2 * C * C + 2 * C * KV * D + 3 * C * F) + V * C
T, B = 32, 2
K = int(extra[extra.index("--grad-accum") + 1]) if "--grad-accum" in extra else 1
want_ms = (6 * n_mm + 12 * L * C * T) * B * T * K / (gf * 1e9) * 1e3
log = open(f"{base}.sim.log").read()
got = [float(x) for x in re.findall(r"compute ([0-9.]+) ms", log)]
if len(got) != 2 or any(abs(g - want_ms) > 0.05 + 1e-3 * want_ms for g in got):
    fails += 1
    print(f"simulated compute per step: step lines say {got}, the model's FLOPs give {want_ms:.2f} ms")
if re.search(r"loss", log):
    fails += 1
    print("a loss was printed in simulated mode:\n" + log)
print(f"{sum(len(entries('real', r)) for r in range(np_))} collectives ({n_fsdp} FSDP) compared; "
      f"compute {want_ms:.2f} ms/step expected")
sys.exit(1 if fails else 0)
PYEOF
    local rc=$?
    if [ "$rc" = 0 ]; then ok "$name: simulated collectives = real ones; compute = FLOPs / rate"; else bad "$name"; fi
}

set +e # run() reports its failures itself
run full2 2 --sharding FULL_SHARD --grad-accum 2
run hybrid4 4 --sharding HYBRID_SHARD --shard-group-size 2 --param-dtype bf16 --reduce-dtype bf16
for v in 0 -1 nan; do
    "$BIN" train "${COMMON[@]}" --simulate-compute "$v" > "$W/bad.log" 2>&1
    check "--simulate-compute $v is a usage error" 2 $?
done
slm_finish
