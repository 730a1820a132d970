#!/usr/bin/env bash
# The stop flag is honoured between micro-batches, not only between optimizer steps:
#  1. one process, a step of 20000 micro-batches: SIGINT once step 1 is logged stops inside step
#     2 (exit 1, "interrupted ... after step 1") in a small fraction of a step; the partial step
#     is discarded, so --resume auto replays it and the final checkpoint (its rank files:
#     params, AdamW m and v) equals an uninterrupted run's bit for bit (the loader position is
#     rewound to the step's start);
#  2. mpirun -np 2, SIGINT to rank 1 only: both ranks stop at the same micro-batch (the stop is
#     agreed), no collective timeout, and the resumed run again equals the uninterrupted one;
#  1b. --max-minutes likewise stops inside a step (exit 0);
#  3. a second SIGINT while the first stop is pending (inside one long micro-batch) exits at
#     once with a message and without saving.
# Before the fix, 1 and 2 finish step 2 and exit 0, and 3 ignores the second signal.
# Usage: stop_cli.sh MPIEXEC. Env (CTest): SHARDLM_BIN, SLM_SHARED_DIR.
. "$(dirname "$0")/../lib.sh"
set +e # the checks read the exit status ($?) of commands that are meant to fail
MPIEXEC=$1
# same_ckpt A B: both runs' final checkpoints (step 2) have byte-identical rank files.
same_ckpt() {
    local f n=0
    for f in "$1"/checkpoints/step_00000002/rank_*.bin; do
        [ -f "$f" ] && cmp -s "$f" "$2/checkpoints/step_00000002/${f##*/}" || return 1
        n=$((n + 1))
    done
    [ $n -gt 0 ] && [ $n -eq "$(ls "$2"/checkpoints/step_00000002/rank_*.bin | wc -l)" ]
}
export OMP_NUM_THREADS=1
slm_corpus "$W/corpus.txt" 60000
"$BIN" tokenizer train --input "$W/corpus.txt" --vocab-size 300 --out "$W/tok.json" --quiet &&
"$BIN" prep --tokenizer "$W/tok.json" --input "$W/corpus.txt" --out "$W/data" --workers 1 \
    --quiet || exit 1
V=$(sed -n 's/.*"vocab_size":[[:space:]]*\([0-9]*\).*/\1/p' "$W/data/manifest.json" | head -1)
slm_tiny_config "$W/config.json" vocab_size=$V max_position_embeddings=16
slm_tiny_config "$W/big.json" vocab_size=$V hidden_size=256 intermediate_size=688 \
    num_hidden_layers=4 num_attention_heads=4 num_key_value_heads=4 max_position_embeddings=256
TR=(train --data "$W/data" --model "$W/config.json" --batch 2 --seq 16 --steps 2 --threads 1
    --peak-gflops 10 --collective-timeout 60)

now() { date +%s.%N; }
# wait_for FILE PATTERN PID: until PATTERN is in FILE (0) or PID exited / 120 s passed (1)
wait_for() {
    local t0=$SECONDS
    while ! grep -q "$2" "$1" 2>/dev/null; do
        kill -0 "$3" 2>/dev/null || return 1
        [ $((SECONDS - t0)) -lt 120 ] || return 1
        sleep 0.05
    done
}
# step_ms RUN_DIR: wall time of step 1 from metrics.jsonl
step_ms() { sed -n 's/.*"step":1,.*"ms_per_step":\([0-9.e+]*\).*/\1/p' "$1/metrics.jsonl"; }

# --- 1. one process
K=6000
"$BIN" "${TR[@]}" --grad-accum $K --out "$W/ref" > "$W/ref.log" 2>&1 || { bad "reference run"; cat "$W/ref.log"; }
"$BIN" "${TR[@]}" --grad-accum $K --out "$W/a" > "$W/a.out" 2> "$W/a.err" &
P=$!
if wait_for "$W/a.out" "step *1/2" $P; then
    t0=$(now); kill -INT $P; wait $P; rc=$?; t1=$(now)
    lat=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.0f", (b - a) * 1000}')
    ms=$(step_ms "$W/a")
    if [ $rc -eq 1 ] && grep -q "interrupted by a signal after step 1" "$W/a.err" &&
        grep -q "stop requested" "$W/a.err" &&
        awk -v l="$lat" -v s="$ms" 'BEGIN{exit !(l < 0.5 * s)}'; then
        ok "1 rank: SIGINT inside step 2 ($K micro-batches, step 1 took ${ms} ms) stopped in ${lat} ms"
    else
        bad "1 rank: exit $rc, stop took ${lat} ms against a step of ${ms} ms"; cat "$W/a.err"
    fi
    "$BIN" "${TR[@]}" --grad-accum $K --out "$W/a" --resume auto > "$W/a2.log" 2>&1
    rc=$?
    if [ $rc -eq 0 ] && grep -q "(step 1)" "$W/a2.log" && same_ckpt "$W/a" "$W/ref"; then
        ok "1 rank: resumed from step 1, the replayed step 2 gives a checkpoint == uninterrupted"
    else
        bad "1 rank: resume exit $rc or the checkpoint differs from the uninterrupted run"; tail -5 "$W/a2.log"
    fi
else
    bad "1 rank: no step 1 line"; cat "$W/a.err"
fi

# --- 1b. --max-minutes is checked between micro-batches too: 0.02 min = 1.2 s inside a first
# step of 10 x 6000 micro-batches stops there (exit 0, nothing trained, the step discarded)
t0=$(now)
"$BIN" "${TR[@]}" --grad-accum 60000 --max-minutes 0.02 --out "$W/mm" > "$W/mm.log" 2>&1
rc=$?
t1=$(now)
el=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b - a}')
if [ $rc -eq 0 ] && grep -q "max-minutes 0.02 reached during step 1; stopping after 0 steps" "$W/mm.log"; then
    ok "--max-minutes 0.02 stopped inside step 1 (run took ${el} s)"
else
    bad "--max-minutes inside a step: exit $rc after ${el} s"; tail -5 "$W/mm.log"
fi

# --- 2. mpirun -np 2, signal to rank 1 only
K=2000
"$MPIEXEC" --oversubscribe -np 2 "$BIN" "${TR[@]}" --grad-accum $K --out "$W/mref" \
    > "$W/mref.log" 2>&1 || { bad "np 2 reference run"; tail "$W/mref.log"; }
"$MPIEXEC" --oversubscribe -np 2 sh -c 'echo $$ > "$0/pid.$OMPI_COMM_WORLD_RANK"; exec "$@"' "$W" \
    "$BIN" "${TR[@]}" --grad-accum $K --out "$W/m" > "$W/m.out" 2> "$W/m.err" &
P=$!
if wait_for "$W/m.out" "step *1/2" $P && [ -s "$W/pid.1" ]; then
    t0=$(now); kill -INT "$(cat "$W/pid.1")"; wait $P; rc=$?; t1=$(now)
    lat=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.0f", (b - a) * 1000}')
    ms=$(step_ms "$W/m")
    n=$(grep -c "interrupted by a signal after step 1" "$W/m.err")
    # (the time to exit is mostly mpirun's teardown here: reported, not bounded)
    if [ $rc -ne 0 ] && [ "$n" -eq 2 ] && ! grep -q "timed out" "$W/m.err"; then
        ok "np 2: SIGINT to rank 1 stopped both ranks inside step 2; job ended in ${lat} ms (step ${ms} ms)"
    else
        bad "np 2: exit $rc, $n ranks interrupted after step 1, ${lat} ms (step ${ms} ms)"; cat "$W/m.err"
    fi
    "$MPIEXEC" --oversubscribe -np 2 "$BIN" "${TR[@]}" --grad-accum $K --out "$W/m" --resume auto \
        > "$W/m2.log" 2>&1
    rc=$?
    if [ $rc -eq 0 ] && same_ckpt "$W/m" "$W/mref"; then
        ok "np 2: resumed run's checkpoint == uninterrupted"
    else
        bad "np 2: resume exit $rc or the checkpoint differs"; tail -5 "$W/m2.log"
    fi
else
    bad "np 2: no step 1 line"; cat "$W/m.err"; kill $P 2>/dev/null
fi

# --- 3. second SIGINT inside one long micro-batch (several seconds here)
"$BIN" train --data "$W/data" --model "$W/big.json" --batch 48 --seq 256 --steps 1 --grad-accum 2 \
    --threads 1 --peak-gflops 10 --out "$W/f" > "$W/f.out" 2> "$W/f.err" &
P=$!
if wait_for "$W/f.err" "info: model " $P; then
    sleep 0.3
    kill -INT $P; sleep 0.3
    t0=$(now); kill -INT $P; wait $P; rc=$?; t1=$(now)
    lat=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.0f", (b - a) * 1000}')
    if [ $rc -eq 1 ] && grep -q "second interrupt: exiting now without saving" "$W/f.err" &&
        ! grep -q "interrupted by a signal after" "$W/f.err" && ! ls "$W/f/checkpoints"/step_* > /dev/null 2>&1 &&
        [ "$lat" -lt 1000 ]; then
        ok "second SIGINT: exit 1 at once (${lat} ms), message, nothing saved"
    else
        bad "second SIGINT: exit $rc in ${lat} ms"; cat "$W/f.err"
    fi
else
    bad "forced exit run did not start"; cat "$W/f.err"
fi

slm_finish
