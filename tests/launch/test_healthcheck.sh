#!/usr/bin/env bash
# shardlm healthcheck (issue 10) under mpirun -np 3, its JSON report read with Python's json:
#  1. healthy: exit 0, three ranks ok, every gemm / model error within its bound, the run
#     directory left empty (no probe file remains), a link with a bandwidth > 0;
#  2. each check failed by injection on rank 1 (SHARDLM_FAULT=fail-health:rank=1:check=NAME):
#     exit 3, rank 1 and only rank 1 fails, with exactly that check, and the verdict names it
#     (3 ranks, so the bitwise majority identifies the odd one);
#  3. fail-health without check= fails every check of rank 1; --ckpt-bytes above the free
#     space fails the dir check naming the directory; an unknown check name is a usage error;
#  4. --device (issue 22): the CPU's report names the device and carries no ECC field (a CPU
#     has no counters; injection of check=ecc still fails only rank 1), --device cuda:0 without
#     a GPU and an unknown device fail naming why.
# Usage: test_healthcheck.sh MPIEXEC.
. "$(dirname "$0")/../lib.sh"
MPIEXEC=${1:-$MPIEXEC}
set +e
export OMP_NUM_THREADS=1
unset SHARDLM_FAULT SHARDLM_ATTEMPT
R=$W/report.json
aj() { "$PY" -c 'import json,sys; a=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$R" "$1"; }
HC=(healthcheck --mem 4MiB --bw-bytes 1MiB --bw-reps 2 --run-dir "$W/run" --report "$R")

slm_mpirun 3 "$BIN" "${HC[@]}" > "$W/ok.log" 2>&1
check "healthy: exit 0" 0 $?
[ "$(aj 'a["ok"] and a["world"] == 3 and [r["rank"] for r in a["ranks"]] == [0, 1, 2]')" = True ] &&
    ok "report: ok, ranks 0-2" || { bad "report"; cat "$R"; }
[ "$(aj 'all(0 <= r["gemm_err"] <= r["gemm_bound"] and 0 <= r["model_err"] <= r["model_bound"] and r["failed"] == [] for r in a["ranks"])')" = True ] &&
    ok "every error within its bound" || { bad "bounds"; cat "$R"; }
[ "$(aj 'len(a["links"]) >= 1 and all(l["gbps"] > 0 for l in a["links"])')" = True ] &&
    ok "link bandwidth measured" || bad "links"
[ -d "$W/run" ] && [ -z "$(ls -A "$W/run")" ] && ok "run dir created and left empty" || bad "run dir: $(ls -A "$W/run")"
has "verdict line" "$W/ok.log" 'health: all checks passed on 3 rank(s)'
# The CPU device has no ECC counters: the check passes and the report says nothing about ECC
[ "$(aj 'all(r["device"] == "cpu" and "ecc_uncorrected" not in r for r in a["ranks"])')" = True ] &&
    ok "device cpu, no ECC field on a CPU" || bad "device / ecc fields: $(cat "$R")"

for c in gemm model bitwise mem dir allreduce allgather reduce_scatter ecc; do
    SHARDLM_FAULT=fail-health:rank=1:check=$c slm_mpirun 3 "$BIN" "${HC[@]}" > "$W/$c.log" 2>&1
    rc=$?
    got=$(aj '[(r["rank"], r["failed"]) for r in a["ranks"] if r["failed"]]')
    if [ "$rc" = 3 ] && [ "$got" = "[(1, ['$c'])]" ] && grep -q "health: FAILED on rank 1 (host" "$W/$c.log"; then
        ok "check $c failed on rank 1 only (exit 3): $(aj 'a["ranks"][1]["msg"]')"
    else
        bad "check $c: exit $rc, failed $got"; cat "$W/$c.log"
    fi
done

# --device: a GPU where there is none is a clear error naming the device and the reason; an
# unknown device names the accepted forms
"$BIN" healthcheck --mem 1MiB --device cuda:0 > "$W/cuda.log" 2>&1
rc=$?
if [ "$rc" != 0 ] && [ "$rc" != 3 ] &&
   grep -Eq 'healthcheck --device cuda:0 \(rank 0\): device "cuda:0": (no CUDA device visible|this build has no CUDA backend)' "$W/cuda.log"; then
    ok "--device cuda:0 without a GPU: exit $rc, $(grep -o 'device "cuda:0": [^;(]*' "$W/cuda.log" | head -1)"
else
    bad "--device cuda:0 without a GPU: exit $rc"; cat "$W/cuda.log"
fi
"$BIN" healthcheck --mem 1MiB --device tpu > "$W/tpu.log" 2>&1
rc=$?
[ "$rc" != 0 ] && grep -q 'expected "cpu", "sleep:GFLOPS" (GFLOPS > 0), "cuda" or "cuda:N"' "$W/tpu.log" &&
    ok "--device tpu: exit $rc naming the accepted devices" || { bad "--device tpu: exit $rc"; cat "$W/tpu.log"; }

SHARDLM_FAULT=fail-health:rank=1 slm_mpirun 3 "$BIN" "${HC[@]}" > "$W/all.log" 2>&1
check "fail-health without check=: exit 3" 3 $?
[ "$(aj 'len(a["ranks"][1]["failed"]) >= 7 and a["ranks"][0]["ok"] and a["ranks"][2]["ok"]')" = True ] &&
    ok "every check of rank 1 failed, ranks 0 and 2 ok" || { bad "report"; cat "$R"; }
has "a bound exceeded prints err > bound" "$W/all.log" 'health rank 1 host .*: FAILED | gemm err [0-9.e+-]* > '
has "a bound kept prints err <= bound" "$W/all.log" 'health rank 0 host .*: ok | gemm err [0-9.e+-]* <= '
slm_mpirun 3 "$BIN" "${HC[@]}" --ckpt-bytes 1000000000000000000 > "$W/space.log" 2>&1
check "checkpoint larger than the free space: exit 3" 3 $?
has "names the directory and the sizes" "$W/space.log" "dir: $W/run has .* free, the estimated checkpoint needs"
SHARDLM_FAULT=fail-health:rank=0:check=nope "$BIN" healthcheck --mem 1MiB > "$W/bad.log" 2>&1
check "unknown check name: usage error" 2 $?
has "lists the check names" "$W/bad.log" 'expected gemm, model, bitwise'
slm_finish
