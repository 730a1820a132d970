#!/usr/bin/env bash
# Straggler detection end to end (issue 11): mpirun -np 2 with rank 1 slowed by SHARDLM_FAULT
# slow:rank=1:ms=300 (it sleeps 300 ms before every step; a step of this model takes a few ms).
# Rank 0 must log "straggler: rank 1" once per episode and count it in
# shardlm_straggler_events_total{rank="1"} (read from /metrics while the job runs); rank 0 is
# never flagged. Every process is stopped by pid.
# Usage: test_straggler.sh [MPIEXEC]
. "$(dirname "$0")/../lib.sh"
MPIEXEC=${1:-$MPIEXEC}
slm_tiny_config "$W/cfg.json"
set +e # statuses are results
SHARDLM_FAULT=slow:rank=1:ms=300 slm_mpirun 2 "$BIN" train --synthetic --model "$W/cfg.json" \
    --batch 2 --seq 16 --steps 40 --threads 1 --peak-gflops 10 --log-every 1000 \
    --metrics-addr 127.0.0.1:0 --metrics-every 1 --straggler-factor 1.5 --straggler-windows 3 \
    --out "$W/run" > "$W/out" 2> "$W/err" &
tpid=$!
slm_on_exit "kill -TERM $tpid; wait $tpid"
port=""
for _ in $(seq 240); do
    port=$(grep -o 'serving http://127.0.0.1:[0-9]*' "$W/err" | head -1 | grep -o '[0-9]*$')
    [ -n "$port" ] && break
    kill -0 $tpid 2> /dev/null || break
    sleep 0.5
done
[ -n "$port" ] && ok "serving on $port" || { bad "no metrics address"; cat "$W/err"; slm_finish; }
got=""
for _ in $(seq 120); do # 40 steps of >= 300 ms: at most about 15 s unless the machine is busy
    curl -s --max-time 10 "http://127.0.0.1:$port/metrics" > "$W/scrape.prom"
    got=$(grep '^shardlm_straggler_events_total{rank="1"}' "$W/scrape.prom")
    [ "${got##* }" = 1 ] && break
    kill -0 $tpid 2> /dev/null || break
    sleep 0.5
done
[ "${got##* }" = 1 ] && ok "counted: $got" || { bad "rank 1 not counted: ${got:-none}"; cat "$W/scrape.prom"; }
has "flagged now" "$W/scrape.prom" '^shardlm_straggler{rank="1"} 1$'
has "the slowest rank is 1" "$W/scrape.prom" '^shardlm_slowest_rank 1$'
has "rank 0 not counted" "$W/scrape.prom" '^shardlm_straggler_events_total{rank="0"} 0$'
wait $tpid
check "the job completes" 0 $?
has "rank 0 logged it" "$W/err" "warning: straggler: rank 1 busy"
[ "$(grep -c 'straggler: rank' "$W/err")" = 1 ] && ok "logged once (one episode)" ||
    bad "logged $(grep -c 'straggler: rank' "$W/err") times"
"$PY" - "$W/run/metrics.jsonl" <<'PY' && ok "metrics.jsonl: one straggler event, rank 1" || bad "no straggler event in metrics.jsonl"
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
s = [e for e in ev if e["event"] == "straggler"]
assert len(s) == 1 and s[0]["rank"] == 1 and s[0]["busy_ms"] > 1.5 * s[0]["median_ms"], s
assert s[0]["busy_ms"] >= 300 and s[0]["windows"] == 3, s  # it sleeps 300 ms per step
PY
set -e
slm_finish
