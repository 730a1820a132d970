#!/usr/bin/env bash
# Flight recorder (issue 10; docs/operations.md "Flight recorder"):
#  1. mpirun -np 3, SHARDLM_FAULT=stop:rank=1:step=3 (rank 1 stops itself before step 3) and
#     --collective-timeout 8: ranks 0 and 2 time out in the same collective, dump
#     RUN_DIR/logs/flight_rank_0000{0,2}.json (read back with Python's json module: rank,
#     world, reason, a waiting entry whose sequence number is the world group's last) and the
#     job aborts; `shardlm flight RUN_DIR` names rank 1 (exit 0), says it wrote no record, and
#     quotes its heartbeat (step 2); every entry carries t_wait (the timed-out wait's spans the
#     timeout);
#  2. mpirun -np 2, the same stop with a long timeout: SIGUSR2 to mpirun (forwarded to every
#     rank) makes the live rank 0 dump while the job keeps waiting; `shardlm flight` names
#     rank 1 (the stopped rank cannot dump: that is what names it);
#  3. a rank killed by SIGSEGV dumps with reason "signal SIGSEGV" and dies of that signal;
#  4. a malformed dump is an error naming the file and the field (exit 1); no dump: exit 1.
# Usage: test_flight_cli.sh MPIEXEC. Env (CTest): SHARDLM_BIN, SLM_SHARED_DIR, SLM_PYTHON.
. "$(dirname "$0")/../lib.sh"
set +e
MPIEXEC=${1:-$MPIEXEC}
export OMP_NUM_THREADS=1
unset SHARDLM_FAULT SHARDLM_ATTEMPT
slm_tiny_data "$W/data" 300 40000 || exit 1
slm_tiny_config "$W/config.json" vocab_size=300 num_hidden_layers=2
TR=(train --data "$W/data" --model "$W/config.json" --batch 2 --seq 16 --steps 6 --threads 1
    --peak-gflops 10)
PIDS=()
slm_on_exit 'for p in "${PIDS[@]}"; do kill -CONT $p; kill -KILL $p; done'
wait_file() { # wait_file FILE PID: until FILE exists (0), PID gone or 120 s (1)
    local t0=$SECONDS
    until [ -s "$1" ]; do
        kill -0 "$2" 2>/dev/null || return 1
        [ $((SECONDS - t0)) -lt 120 ] || return 1
        sleep 0.1
    done
}
# field FILE EXPR: a Python expression over the dump d
field() { "$PY" -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"; }

# --- 1. collective timeout, 3 ranks
SHARDLM_FAULT=stop:rank=1:step=3 slm_mpirun 3 "$BIN" "${TR[@]}" --collective-timeout 8 \
    --out "$W/a" --heartbeat-dir "$W/a/heartbeat" > "$W/a.log" 2>&1
rc=$?
[ $rc -ne 0 ] && grep -q "timed out" "$W/a.log" && ok "np 3: the job ends with a collective timeout (exit $rc)" ||
    { bad "np 3: exit $rc"; tail -20 "$W/a.log"; }
for r in 0 2; do
    f=$W/a/logs/flight_rank_0000$r.json
    w=$(field "$f" '[e for e in d["entries"] if e["state"]=="waiting"][-1]')
    if [ "$(field "$f" 'd["rank"], d["world"], d["reason"]')" = "($r, 3, 'collective timeout')" ] &&
        [ "$(field "$f" '[e["seq"] for e in d["entries"] if e["state"]=="waiting"][-1] == [g["seq"] for g in d["groups"] if g["name"]=="world"][0]')" = True ] &&
        [ "$(field "$f" '[e["step"] for e in d["entries"] if e["state"]=="waiting"][-1]')" = 3 ]; then
        ok "rank $r dumped: waiting in the world's last collective, at step 3"
    else
        bad "rank $r dump:"; cat "$f"; echo "$w"
    fi
    # t_wait: when the wait began. The timed-out wait started after the collective and lasted
    # the whole --collective-timeout (8 s, measured from the wait's start) before the dump;
    # every done entry that was waited for ended after its wait began.
    if [ "$(field "$f" '[(e["t_wait"] >= e["t_start"], d["time"] - e["t_wait"] >= 7.9) for e in d["entries"] if e["state"]=="waiting"][-1]')" = "(True, True)" ] &&
        [ "$(field "$f" 'all(e["t_end"] >= e["t_wait"] >= e["t_start"] for e in d["entries"] if e["state"]=="done" and e.get("t_wait") is not None)')" = True ] &&
        [ "$(field "$f" 'all("t_wait" in e for e in d["entries"])')" = True ]; then
        ok "rank $r: t_wait of the timed-out wait >= 8 s before the dump, t_start <= t_wait <= t_end"
    else
        bad "rank $r: t_wait fields"; cat "$f"
    fi
done
[ ! -e "$W/a/logs/flight_rank_00001.json" ] && ok "the stopped rank 1 wrote no dump" || bad "rank 1 dumped"
"$BIN" flight "$W/a" > "$W/a.verdict" 2>&1
rc=$?
if [ $rc -eq 0 ] && grep -q "rank 1 never entered collective #[0-9]* of group world" "$W/a.verdict" &&
    grep -q "ranks 0 and 2 wait in" "$W/a.verdict" && grep -q "rank 1 wrote no flight record" "$W/a.verdict" &&
    grep -q "heartbeat.*step 2, phase train" "$W/a.verdict"; then
    ok "shardlm flight names rank 1 (exit 0): $(head -1 "$W/a.verdict")"
else
    bad "shardlm flight (np 3): exit $rc"; cat "$W/a.verdict"
fi

# --- 2. SIGUSR2 to mpirun while rank 1 is stopped
SHARDLM_FAULT=stop:rank=1:step=3 "$MPIEXEC" --oversubscribe -np 2 "$BIN" "${TR[@]}" \
    --collective-timeout 300 --out "$W/b" --heartbeat-dir "$W/b/heartbeat" > "$W/b.log" 2>&1 &
P=$!
PIDS+=($P)
stopped=
for _ in $(seq 1 1200); do
    pid=$(sed -n 's/.*"pid":\([0-9]*\).*/\1/p' "$W/b/heartbeat/rank_00001.json" 2>/dev/null)
    if [ -n "$pid" ] && [ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" = T ]; then stopped=$pid; break; fi
    kill -0 $P 2>/dev/null || break
    sleep 0.1
done
if [ -n "$stopped" ]; then
    PIDS+=($stopped)
    sleep 1 # rank 0 reaches its wait in step 3's first collective
    kill -USR2 $P
    if wait_file "$W/b/logs/flight_rank_00000.json" $P; then
        sleep 0.5
        kill -0 $P 2>/dev/null && ok "SIGUSR2: rank 0 dumped and the job is still running" || bad "SIGUSR2 ended the job"
        "$BIN" flight "$W/b" > "$W/b.verdict" 2>&1
        rc=$?
        [ $rc -eq 0 ] && grep -q "rank 1 never entered" "$W/b.verdict" &&
            [ "$(field "$W/b/logs/flight_rank_00000.json" 'd["reason"]')" = SIGUSR2 ] &&
            ok "shardlm flight after SIGUSR2 names rank 1" || { bad "verdict after SIGUSR2: exit $rc"; cat "$W/b.verdict"; }
    else
        bad "SIGUSR2: no dump from rank 0"; cat "$W/b.log"
    fi
    kill -CONT "$stopped"
else
    bad "rank 1 did not stop"; cat "$W/b.log"
fi
kill -TERM $P 2>/dev/null; wait $P

# --- 3. a fatal signal dumps
"$MPIEXEC" --oversubscribe -np 2 "$BIN" "${TR[@]}" --steps 100000 --collective-timeout 300 \
    --out "$W/c" --heartbeat-dir "$W/c/heartbeat" > "$W/c.log" 2>&1 &
P=$!
PIDS+=($P)
if wait_file "$W/c/heartbeat/rank_00000.json" $P; then
    sleep 0.5
    kill -SEGV "$(sed -n 's/.*"pid":\([0-9]*\).*/\1/p' "$W/c/heartbeat/rank_00000.json")"
    wait $P
    rc=$?
    [ "$(field "$W/c/logs/flight_rank_00000.json" 'd["reason"]')" = "signal SIGSEGV" ] && [ $rc -ne 0 ] &&
        ok "SIGSEGV: rank 0 dumped (reason signal SIGSEGV), job exit $rc" || { bad "SIGSEGV dump, exit $rc"; tail -5 "$W/c.log"; }
else
    bad "fatal-signal run did not start"; cat "$W/c.log"; kill $P
fi

# --- 4. bad input
mkdir -p "$W/d/logs"
"$BIN" flight "$W/d" > "$W/d.out" 2>&1
check "no dump: exit 1" 1 $?
has "no dump: says so" "$W/d.out" "no flight-recorder dump"
sed 's/"world":3/"world":"three"/' "$W/a/logs/flight_rank_00000.json" > "$W/d/logs/flight_rank_00000.json"
"$BIN" flight "$W/d" > "$W/d.out" 2>&1
check "malformed dump: exit 1" 1 $?
has "malformed dump: names the file and field" "$W/d.out" 'flight_rank_00000.json: field "world"'
slm_finish
