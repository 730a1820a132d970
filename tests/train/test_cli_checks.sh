#!/usr/bin/env bash
# Usage errors found by review (notes/tasks2/harden.md items 2-4), each exit 2 with a message
# naming what is wrong:
#  1. SHARDLM_FAULT naming a rank beyond the world (it would never fire): train (one process and
#     mpirun -np 2), healthcheck, launch (against --nproc, before anything is created); an inert
#     fault (attempt 2) is not checked;
#  2. a bad --metrics-addr: one "--metrics-addr: " prefix, then the parser's own message (train
#     and launch share one helper);
#  3. --loss-spike-window 1..7 is refused naming the minimum 8; 0 and 8 are accepted;
#  4. --device (issue 21 / 22): an unknown device or cuda:x is a usage error naming the accepted
#     forms; cuda without --compute-dtype bf16 and cuda with --simulate-compute are usage errors
#     saying why; cuda under mpirun -np 2 is refused on every rank before training (FSDP's GPU
#     collectives are not wired in); cuda where there is no GPU (or no CUDA build) is a runtime
#     error saying so; --device cpu trains; `shardlm launch` runs its health check on the run's
#     --device, so a GPU job on a host without one stops there (exit 3) naming why.
# Usage: test_cli_checks.sh MPIEXEC. Env (CTest): SHARDLM_BIN, SLM_SHARED_DIR.
. "$(dirname "$0")/../lib.sh"
set +e # the checks read the exit status of commands meant to fail
MPIEXEC=${1:-$MPIEXEC}
export OMP_NUM_THREADS=1
unset SHARDLM_FAULT SHARDLM_ATTEMPT
slm_tiny_config "$W/config.json"
SY=(train --synthetic --model "$W/config.json" --batch 1 --seq 8 --steps 1 --threads 1 --log-every 0)
# the message must appear exactly (grep -F), so a doubled or changed prefix fails
exact() { if grep -qF -- "$3" "$2"; then ok "$1"; else bad "$1: no \"$3\" in:"; cat "$2"; fi; }

# --- 1. fault ranks against the world
SHARDLM_FAULT=kill:rank=1:step=2 "$BIN" "${SY[@]}" > "$W/f1.log" 2>&1
check "train, 1 process, kill:rank=1: usage error" 2 $?
exact "names the item and the world of 1" "$W/f1.log" \
    'SHARDLM_FAULT item 1 "kill:rank=1:step=2": rank=1 is not a rank of this world of 1 rank (0..0)'
SHARDLM_FAULT=slow:rank=0:ms=1,kill:rank=5:step=1 slm_mpirun 2 "$BIN" "${SY[@]}" > "$W/f2.log" 2>&1
check "train, mpirun -np 2, kill:rank=5: usage error" 2 $?
exact "names item 2 and the world of 2" "$W/f2.log" \
    'SHARDLM_FAULT item 2 "kill:rank=5:step=1": rank=5 is not a rank of this world of 2 ranks (0..1)'
SHARDLM_FAULT=kill:rank=1:step=2 SHARDLM_ATTEMPT=2 "$BIN" "${SY[@]}" > "$W/f3.log" 2>&1
check "an inert fault (attempt 2) is not checked: the run completes" 0 $?
SHARDLM_FAULT=fail-health:rank=3 slm_mpirun 2 "$BIN" healthcheck --mem 8MiB > "$W/f4.log" 2>&1
check "healthcheck, fail-health:rank=3 in a world of 2: usage error" 2 $?
exact "healthcheck names the item" "$W/f4.log" \
    'SHARDLM_FAULT item 1 "fail-health:rank=3": rank=3 is not a rank of this world of 2 ranks'
SHARDLM_FAULT=kill:rank=5:step=2 "$BIN" launch --nproc 3 --mpirun "$MPIEXEC" -- \
    --synthetic --out "$W/run" > "$W/f5.log" 2>&1
check "launch --nproc 3, kill:rank=5: usage error" 2 $?
exact "launch names --nproc, the item and the world" "$W/f5.log" \
    'launch: --nproc 3: SHARDLM_FAULT item 1 "kill:rank=5:step=2": rank=5 is not a rank of this world of 3 ranks (0..2)'
[ ! -e "$W/run" ] && ok "launch: nothing created" || bad "launch created $W/run"

# --- 2. --metrics-addr messages
"$BIN" "${SY[@]}" --metrics-addr bogus:xx > "$W/m1.log" 2>&1
check "train --metrics-addr bogus:xx: usage error" 2 $?
exact "train: one prefix, then the parser's message" "$W/m1.log" \
    'error: train: --metrics-addr: metrics address "bogus:xx": bad port "xx"'
"$BIN" launch --nproc 1 --metrics-addr :99999 -- --synthetic --out "$W/run" > "$W/m2.log" 2>&1
check "launch --metrics-addr :99999: usage error" 2 $?
exact "launch: one prefix, then the parser's message" "$W/m2.log" \
    'error: launch: --metrics-addr: metrics address ":99999": port 99999 > 65535'

# --- 3. --loss-spike-window minimum
for n in 1 2 7; do
    "$BIN" "${SY[@]}" --loss-spike-window $n > "$W/s$n.log" 2>&1
    check "--loss-spike-window $n: usage error" 2 $?
    exact "--loss-spike-window $n: names the minimum" "$W/s$n.log" \
        "--loss-spike-window $n: must be 0 (off) or at least 8"
done
for n in 0 8; do
    "$BIN" "${SY[@]}" --loss-spike-window $n > "$W/s$n.log" 2>&1
    check "--loss-spike-window $n accepted" 0 $?
done

# --- 4. --device
for d in tpu cuda:x cuda:; do
    "$BIN" "${SY[@]}" --device $d --compute-dtype bf16 > "$W/d.log" 2>&1
    check "--device $d: usage error" 2 $?
    exact "--device $d: names the accepted forms" "$W/d.log" "--device $d: expected cpu, cuda or cuda:N"
done
"$BIN" "${SY[@]}" --device cuda > "$W/d1.log" 2>&1
check "--device cuda with fp32 compute: usage error" 2 $?
exact "says to add --compute-dtype bf16" "$W/d1.log" \
    "--device cuda: fp32 compute is not implemented on the GPU; add --compute-dtype bf16"
"$BIN" "${SY[@]}" --device cuda:0 --compute-dtype bf16 --simulate-compute 10 > "$W/d2.log" 2>&1
check "--device cuda:0 with --simulate-compute: usage error" 2 $?
exact "names the SLEEP device" "$W/d2.log" "--simulate-compute runs on its own SLEEP device"
slm_mpirun 2 "$BIN" "${SY[@]}" --device cuda --compute-dtype bf16 > "$W/d3.log" 2>&1
check "--device cuda on 2 ranks: runtime error" 1 $?
[ "$(grep -c 'with 2 ranks: FSDP' "$W/d3.log")" = 2 ] && ok "every rank says why (2 ranks)" ||
    { bad "--device cuda on 2 ranks:"; cat "$W/d3.log"; }
"$BIN" "${SY[@]}" --device cuda --compute-dtype bf16 > "$W/d4.log" 2>&1
rc=$?
if nvidia-smi -L > /dev/null 2>&1; then
    ok "a GPU is present: --device cuda ran (exit $rc), see tests/gpu for its checks"
else
    check "--device cuda without a GPU: runtime error" 1 $rc
    grep -Eq -- '--device cuda: device "cuda:0": (no CUDA device visible|this build has no CUDA backend)' "$W/d4.log" &&
        ok "says there is no GPU (or no CUDA build)" || { bad "no-GPU message:"; cat "$W/d4.log"; }
fi
"$BIN" "${SY[@]}" --device cpu > "$W/d5.log" 2>&1
check "--device cpu trains" 0 $?
# the launcher's health check runs on the run's --device: no GPU here, so the job never starts
if ! nvidia-smi -L > /dev/null 2>&1; then
    "$BIN" launch --nproc 1 --max-restarts 0 --mpirun "$MPIEXEC" -- "${SY[@]}" --device cuda \
        --compute-dtype bf16 --out "$W/lrun" > "$W/d6.log" 2>&1
    check "launch --device cuda without a GPU: the health check fails (exit 3)" 3 $?
    grep -Eq 'healthcheck --device cuda \(rank 0\): device "cuda:0": (no CUDA device visible|this build has no CUDA backend)' "$W/d6.log" &&
        ok "the launcher's health check ran on --device cuda and says why" ||
        { bad "launch --device cuda:"; cat "$W/d6.log"; }
fi
slm_finish
