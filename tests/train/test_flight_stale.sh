#!/usr/bin/env bash
# Flight-recorder dumps of an earlier attempt (docs/operations.md "Flight recorder"): a run
# started in a run directory moves the dumps of the earlier attempt aside, so `shardlm flight`
# never mixes them with the new attempt's (found by hand: attempt 1 with rank 1 stopped left the
# dumps of ranks 0 and 2; in attempt 2 rank 0 stopped and ranks 1 and 2 dumped, and the verdict
# read rank 0's old dump and named rank 1):
#  1. one process, SIGUSR2 mid-run: it dumps RUN_DIR/logs/flight_rank_00000.json; a copy renamed
#     as rank 3 of a 4-rank world stands for a larger earlier world;
#  2. the resumed run moves both to flight_rank_RRRRR.prev.json (content kept) and `shardlm
#     flight` finds no dump (exit 1), instead of judging the old ones.
# Env (CTest): SHARDLM_BIN, SLM_SHARED_DIR.
. "$(dirname "$0")/../lib.sh"
set +e
export OMP_NUM_THREADS=1
unset SHARDLM_FAULT SHARDLM_ATTEMPT
slm_tiny_data "$W/data" 300 40000 || exit 1
slm_tiny_config "$W/config.json" vocab_size=300
TR=(train --data "$W/data" --model "$W/config.json" --batch 2 --seq 16 --threads 1
    --peak-gflops 10 --ckpt-every-steps 2 --out "$W/run")
L=$W/run/logs
SHARDLM_FAULT=slow:rank=0:ms=100 "$BIN" "${TR[@]}" --steps 600 > "$W/a.log" 2>&1 &
P=$!
slm_on_exit "kill -KILL $P"
t0=$SECONDS
until grep -q "^step *3/" "$W/a.log" || [ $((SECONDS - t0)) -gt 120 ]; do sleep 0.2; done
kill -USR2 $P
until [ -s "$L/flight_rank_00000.json" ] || [ $((SECONDS - t0)) -gt 120 ]; do sleep 0.2; done
kill -TERM $P
wait $P
check "first attempt preempted" 75 $?
[ -s "$L/flight_rank_00000.json" ] && ok "SIGUSR2 dump written" || bad "no dump"
"$BIN" flight "$W/run" > "$W/f1.log" 2>&1
[ $? -ne 1 ] && ok "shardlm flight reads the first attempt's dumps" || { bad "flight on attempt 1"; cat "$W/f1.log"; }
sed 's/"rank":0,"world":1,/"rank":3,"world":4,/' "$L/flight_rank_00000.json" > "$L/flight_rank_00003.json"
grep -q '"rank":3,"world":4' "$L/flight_rank_00003.json" || bad "the rank-3 stand-in was not made"
cp "$L/flight_rank_00000.json" "$W/dump0"

"$BIN" "${TR[@]}" --steps 12 --resume auto > "$W/b.log" 2>&1
check "second attempt completes" 0 $?
[ ! -e "$L/flight_rank_00000.json" ] && [ ! -e "$L/flight_rank_00003.json" ] &&
    ok "the earlier attempt's dumps are gone from the names shardlm flight reads" ||
    { bad "stale dumps left"; ls "$L"; }
cmp -s "$W/dump0" "$L/flight_rank_00000.prev.json" && [ -s "$L/flight_rank_00003.prev.json" ] &&
    ok "kept as flight_rank_RRRRR.prev.json" || { bad "no .prev.json"; ls "$L"; }
"$BIN" flight "$W/run" > "$W/f2.log" 2>&1
check "shardlm flight after the new attempt: no dump" 1 $?
has "it says so" "$W/f2.log" "no flight-recorder dump"
slm_finish
