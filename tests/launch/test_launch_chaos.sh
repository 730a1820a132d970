#!/usr/bin/env bash
# Fault test 7 (issue 10): chaos. A 2-rank run of 300 steps (slowed to ~0.1 s a step by
# SHARDLM_FAULT=slow, which does not change the numbers) under `shardlm launch` is hit every
# 5-10 s by a random fault: SIGKILL of a rank, SIGSTOP of a rank (a hang: --hang-timeout 6),
# or the newest checkpoint corrupted (a byte flipped in a rank file) followed by a SIGKILL so
# the restart must skip it; the first attempt also ends by a rank's exit 1 (SHARDLM_FAULT exit
# at step 40). The launcher must finish with exit 0 and the final weights of the uninterrupted
# run, byte for byte; every failed attempt is recorded; nothing is left running. The seed is
# printed (CHAOS_SEED=N reruns the same fault sequence). Usage: test_launch_chaos.sh MPIEXEC.
. "$(dirname "$0")/../lib.sh"
MPIEXEC=${1:-$MPIEXEC}
. "$(dirname "$0")/launch_lib.sh"
set +e
seed=${CHAOS_SEED:-$$}
RANDOM=$seed
echo "chaos seed $seed"
STEPS=300
TRC=("${TR[@]}" --ckpt-every-steps 10 --ckpt-keep 4 --steps $STEPS)
slm_mpirun 2 "$BIN" train "${TRC[@]}" --out "$W/ref" > "$W/ref.log" 2>&1 ||
    { cat "$W/ref.log"; exit 1; }
t0=$(date +%s.%N)
SHARDLM_FAULT=slow:rank=0:ms=100:always,exit:rank=1:step=40 "$BIN" launch --nproc 2 "${LA[@]}" \
    --hang-timeout 6 --max-restarts 30 -- "${TRC[@]}" --out "$W/run" > "$W/out.log" 2> "$W/err.log" &
P=$!
slm_on_exit "kill -TERM $P"
faults=()
# Each fault hits its own attempt, never attempt 1 (it ends by the exit fault at step 40): the
# pids of attempt 1 and of every attempt a fault hit are skipped.
used=" "
for _ in $(seq 1 300); do
    p0=$(hb_pid "$W/run" 0) p1=$(hb_pid "$W/run" 1)
    [ -n "$p0" ] && [ -n "$p1" ] && break
    kill -0 $P 2>/dev/null || break
    sleep 0.1
done
used+="$p0 $p1 "
step_of() { sed -n 's/.*"step":\([0-9]*\).*"phase":"train".*/\1/p' "$W/run/heartbeat/rank_00000.json" 2>/dev/null; }
while kill -0 $P 2>/dev/null && [ ${#faults[@]} -lt 4 ]; do
    # 5-10 s after a fault (two land before step STEPS - 30 at worst), 1 s after a skip
    if [ "${skip:-0}" = 1 ]; then wait_s=1; else wait_s=$((5 + RANDOM % 6)); fi
    skip=1
    for _ in $(seq 1 $((wait_s * 10))); do kill -0 $P 2>/dev/null || break; sleep 0.1; done
    kill -0 $P 2>/dev/null || break
    s=$(step_of)
    [ -n "$s" ] && [ "$s" -lt $((STEPS - 30)) ] || continue # training, and not about to finish
    p0=$(hb_pid "$W/run" 0) p1=$(hb_pid "$W/run" 1)
    [ -n "$p0" ] && [ -n "$p1" ] && [[ "$used" != *" $p0 "* ]] && [[ "$used" != *" $p1 "* ]] ||
        continue # an attempt already hit (or attempt 1), or the next one not fully started
    r=$((RANDOM % 2))
    pid=$(hb_pid "$W/run" $r)
    [ -n "$pid" ] && [ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != T ] &&
        tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -q -- "$W/run" || continue
    case $((RANDOM % 3)) in
    0) kill -KILL "$pid"; faults+=("kill rank $r at step $s") ;;
    1) kill -STOP "$pid"; faults+=("stop rank $r at step $s") ;;
    2) latest=$(cat "$W/run/checkpoints/latest" 2>/dev/null)
       f=$W/run/checkpoints/$latest/rank_00000.bin
       if [ -n "$latest" ] && "$PY" - "$f" <<'PY'
import os, sys
p = sys.argv[1]
with open(p, "r+b") as f:
    n = os.fstat(f.fileno()).st_size
    f.seek(n // 2)
    b = f.read(1)
    f.seek(n // 2)
    f.write(bytes([b[0] ^ 0x5A]))
PY
       then
           kill -KILL "$pid"; faults+=("corrupt $latest + kill rank $r at step $s")
       fi ;;
    esac
    used+="$p0 $p1 "
    skip=0
    echo "chaos: ${faults[-1]}"
done
wait $P
rc=$?
t1=$(date +%s.%N)
check "chaos run: launch exits 0" 0 $rc
J=$W/run/attempts.json
echo "faults injected: ${#faults[@]}; attempts: $(aj "$J" 'len(a["attempts"])'); wall $("$PY" -c "import sys; print(round(float(sys.argv[2]) - float(sys.argv[1]), 1))" "$t0" "$t1") s (printed, not checked)"
aj "$J" '"\n".join("  attempt %d: %s %s" % (x["attempt"], x["result"], x["reason"]) for x in a["attempts"])'
[ ${#faults[@]} -ge 2 ] && ok "at least 2 external faults injected" || bad "only ${#faults[@]} faults injected"
n=$(aj "$J" 'len(a["attempts"])')
[ "$n" -ge $((${#faults[@]} + 1)) ] && ok "every fault was followed by a restart ($n attempts)" ||
    bad "$n attempts for ${#faults[@]} faults + the exit at step 40"
[ "$(aj "$J" 'all(x["result"] in ("failed", "hang") for x in a["attempts"][:-1])')" = True ] &&
    [ "$(aj "$J" 'a["attempts"][-1]["result"]')" = success ] && [ "$(aj "$J" 'a["restarts"]')" = $((n - 1)) ] &&
    ok "attempts.json: failures then success, restarts = attempts - 1" || { bad "attempts.json"; cat "$J"; }
[ "$(aj "$J" 'a["attempts"][0]["culprit_rank"]')" = 1 ] && ok "attempt 1 (exit at step 40): culprit rank 1" ||
    bad "attempt 1 culprit"
same_weights "final weights equal the uninterrupted run" "$W/run" "$W/ref" $STEPS
no_orphans "no process left"
slm_finish
