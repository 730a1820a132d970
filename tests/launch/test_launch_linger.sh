#!/usr/bin/env bash
# A finished job that is still exiting is not a hang. Both ranks serve Prometheus metrics and a
# scraper reads them every 2 s; a completed run then keeps serving until one more scrape (about
# two intervals: src/train/prom.c), after every rank wrote its final "end" heartbeat; the scraper
# stops at rank 0's end record, so that wait (about 5 s) always runs out in full. Under
# --hang-timeout 2 that silence used to be declared a hang (SIGUSR2, teardown) although nothing
# was wrong. The launcher must wait for the exit: no hang line, one attempt, success.
# Usage: test_launch_linger.sh MPIEXEC.
. "$(dirname "$0")/../lib.sh"
MPIEXEC=${1:-$MPIEXEC}
. "$(dirname "$0")/launch_lib.sh"
command -v curl > /dev/null || { echo "SKIP: curl missing (scripts/setup_test.sh)"; exit 77; }
port=$("$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
(
    while [ ! -e "$W/stop" ]; do
        # no scrape after rank 0's final "end" record: the trainer then waits its whole linger
        # (about 2 x 2 + 1 s), longer than --hang-timeout 2, every time
        grep -qs '"phase":"end"' "$W/run/heartbeat/rank_00000.json" && break
        # (rank 0 serves; set -e is on: a refused connection must not end the loop)
        if curl -s -m 1 "http://127.0.0.1:$port/metrics" > /dev/null; then echo >> "$W/scrapes"; fi
        sleep 2
    done
) &
scraper=$!
slm_on_exit "touch $W/stop; kill $scraper 2>/dev/null; wait $scraper 2>/dev/null"
set +e
# rank 0 sleeps 60 ms a step (SHARDLM_FAULT slow; the numbers are unchanged): 200 steps take at
# least 12 s, so the scraper reads the run several times on any machine (an idle one trained the
# 200 steps in under 3 s, before the first scrape, and nothing lingered)
SHARDLM_FAULT=slow:rank=0:ms=60 "$BIN" launch --nproc 2 "${LA[@]}" --hang-timeout 2 --max-restarts 1 -- "${TR[@]}" --steps 200 \
    --metrics-addr "127.0.0.1:$port" --metrics-every 1 --out "$W/run" > "$W/out.log" 2>&1
rc=$?
J=$W/run/attempts.json
# the situation under test: the trainer waited for a scrape after the end
has "a rank waited for the scrape after its end" "$W/out.log" 'metrics: serving until the next scrape'
check "launch exits 0" 0 $rc
if grep -q 'no heartbeat progress' "$W/out.log"; then
    bad "a hang was declared after every rank's end record: $(grep -m1 'no heartbeat progress' "$W/out.log")"
else
    ok "no hang declared"
fi
[ "$(aj "$J" 'len(a["attempts"])')" = 1 ] && [ "$(aj "$J" 'a["restarts"]')" = 0 ] &&
    ok "one attempt, no restart spent" || bad "attempts / restarts"
[ "$(aj "$J" 'a["attempts"][0]["result"]')" = success ] && ok "the attempt: success" || bad "result"
no_orphans "no process left"
[ "$fails" = 0 ] || { cat "$J"; echo "scrapes: $(cat "$W/scrapes" 2>/dev/null | wc -l)"; tail -30 "$W/out.log"; }
slm_finish
