#!/usr/bin/env bash
# Crash safety: shardlm train checkpointing every step (asynchronously) is SIGKILLed at
# arbitrary moments, six times. Each killed run must have died of our SIGKILL (exit status 137):
# a trainer that exits or crashes by itself is a failure, not "no checkpoint yet". After each
# kill, if `latest` exists it must name a complete checkpoint that `shardlm ckpt verify`
# accepts, and --resume auto must continue from it.
# Env (CTest): SHARDLM_BIN.
. "$(dirname "$0")/../lib.sh"
set +e # the checks read the exit status ($?) of commands that are meant to fail
slm_tiny_config "$W/config.json" vocab_size=2048 hidden_size=128 intermediate_size=256 \
    num_hidden_layers=2 num_attention_heads=4 max_position_embeddings=64
TRAIN=(train --synthetic --model "$W/config.json" --batch 2 --seq 32 --threads 1
       --peak-gflops 10 --log-every 0 --ckpt-every-steps 1 --ckpt-keep 2 --out "$W/run")
delays=(0.4 0.9 1.3 0.7 1.8 1.1)
for i in "${!delays[@]}"; do
    "$BIN" "${TRAIN[@]}" --steps 100000 --resume auto > "$W/log$i" 2>&1 &
    pid=$!
    sleep "${delays[$i]}"
    kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    rc=$?
    if [ "$rc" != 137 ]; then # not our SIGKILL: it ended (or crashed) by itself
        bad "kill $i: the trainer exited by itself with status $rc before the kill:"
        tail -3 "$W/log$i"
    elif [ -f "$W/run/checkpoints/latest" ]; then
        name=$(cat "$W/run/checkpoints/latest")
        if "$BIN" ckpt verify "$W/run" > /dev/null 2> "$W/verify.err"; then
            echo "[ ok ] kill $i after ${delays[$i]} s: latest = $name verifies"
        else
            echo "[FAIL] kill $i: latest = $name does not verify: $(cat "$W/verify.err")"
            fails=$((fails + 1))
        fi
    else
        echo "[ ok ] kill $i after ${delays[$i]} s: no checkpoint committed yet"
    fi
done
# On a loaded machine (CI runs tests in parallel on 2 cores) start-up can outlast every fixed
# delay; then kill once more right after the first commit appears (polled, up to 120 s).
if [ ! -f "$W/run/checkpoints/latest" ]; then
    "$BIN" "${TRAIN[@]}" --steps 100000 --resume auto > "$W/log_wait" 2>&1 &
    pid=$!
    for _ in $(seq 1200); do
        [ -f "$W/run/checkpoints/latest" ] && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    rc=$?
    if [ "$rc" != 137 ]; then
        echo "[FAIL] the waited-for run exited by itself with status $rc:"; tail -3 "$W/log_wait"
        fails=$((fails + 1))
    elif [ -f "$W/run/checkpoints/latest" ]; then
        if "$BIN" ckpt verify "$W/run" > /dev/null 2> "$W/verify.err"; then
            echo "[ ok ] kill after the first commit: latest = $(cat "$W/run/checkpoints/latest") verifies"
        else
            echo "[FAIL] kill after the first commit: $(cat "$W/verify.err")"
            fails=$((fails + 1))
        fi
    fi
fi
if [ -f "$W/run/checkpoints/latest" ]; then
    s=$(sed -E 's/step_0*//' "$W/run/checkpoints/latest")
    if "$BIN" "${TRAIN[@]}" --steps $((s + 2)) --resume auto > "$W/final.log" 2>&1 &&
        grep -q "resumed from" "$W/final.log"; then
        echo "[ ok ] --resume auto continues from step $s"
    else
        echo "[FAIL] --resume auto after the kills"; tail -3 "$W/final.log"; fails=$((fails + 1))
    fi
else
    bad "no checkpoint after six runs"
fi
slm_finish
