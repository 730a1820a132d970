#!/usr/bin/env bash
# The launcher's own /metrics (issue 11: "the launcher adds its metrics to the same registry").
# A real Prometheus (Debian prometheus, loopback, temp storage, scrape and rule evaluation every
# 1 s, the shipped deploy/prometheus/shardlm.rules.yml) is started first, scraping a port picked
# here; then `shardlm launch --nproc 2 --metrics-addr 127.0.0.1:PORT` runs a job whose rank 1 is
# SIGKILLed before step 30 of attempt 1 (SHARDLM_FAULT kill; rank 0 slowed 300 ms a step on every
# attempt so the job outlives the checks). curl scrapes of the launcher (read with grep, linted
# with `promtool check metrics`, exit 0 required) show attempt 1 running with 0 restarts, then
# after the restart shardlm_launch_restarts_total 1, attempt 2 running at world size 2, the
# failed attempt as last_exit_info{result="failed"}, a heartbeat time between the launch and
# now. Prometheus's API must answer increase(shardlm_launch_restarts_total[5m]) > 0 and the
# ShardlmRestartsRising alert must be firing, and the dashboard's two restarts panel queries
# must return >= 1 for the launcher's instance. Bad input: a bad --metrics-addr is a usage error
# (2) before anything is written; a port in use fails (1) before anything starts. The job is
# ended with SIGTERM (preempted: exit 75); --metrics-linger then serves state done and the
# preemption as the last exit until a second SIGTERM. Every process started here is stopped by
# pid.
# Usage: test_launch_metrics.sh MPIEXEC.
. "$(dirname "$0")/../lib.sh"
MPIEXEC=${1:-$MPIEXEC}
. "$(dirname "$0")/launch_lib.sh"
HERE=$(cd "$(dirname "$0")" && pwd)
command -v promtool > /dev/null && command -v prometheus > /dev/null ||
    { echo "prometheus / promtool not installed (scripts/setup_test.sh installs them)"; exit 1; }
set +e # the statuses below are the results

# --- bad addresses: usage errors, nothing written
for a in "127.0.0.1:99999" "9400" "host:" ":x"; do
    "$BIN" launch --nproc 1 "${LA[@]}" --metrics-addr "$a" -- "${TR[@]}" --steps 2 \
        --out "$W/bad" > "$W/bad.out" 2> "$W/bad.err"
    check "launch --metrics-addr $a is a usage error" 2 $?
done
has "the message says what is expected" "$W/bad.err" "HOST:PORT"
[ ! -e "$W/bad" ] && ok "nothing written for a bad address" || bad "$W/bad was created"

freeport() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
port=$(freeport)
pport=$(freeport)
cat > "$W/prometheus.yml" << YML
global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - $SRC/deploy/prometheus/shardlm.rules.yml
scrape_configs:
  - job_name: shardlm-launch
    static_configs:
      - targets: ['127.0.0.1:$port']
YML
prometheus --config.file="$W/prometheus.yml" --storage.tsdb.path="$W/tsdb" \
    --web.listen-address="127.0.0.1:$pport" --log.level=warn > "$W/prom.log" 2>&1 &
ppid=$!
slm_on_exit "kill $ppid; wait $ppid"
q() { "$PY" "$SRC/tests/metrics/prom_query.py" "$pport" "$@"; }
for _ in $(seq 120); do # ready (bounded: 60 s)
    [ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 "http://127.0.0.1:$pport/-/ready")" = 200 ] && break
    kill -0 $ppid 2> /dev/null || break
    sleep 0.5
done
q 'up' > /dev/null 2>&1 && ok "Prometheus is up on 127.0.0.1:$pport" ||
    { bad "Prometheus did not start"; cat "$W/prom.log"; slm_finish; }

# --- the supervised job (bounded: --max-run 4m; ended with SIGTERM once checked)
t_launch=$(date +%s)
SHARDLM_FAULT=kill:rank=1:step=30,slow:rank=0:ms=300:always \
    "$BIN" launch --nproc 2 "${LA[@]}" --hang-timeout 60 --max-run 4m \
    --metrics-addr "127.0.0.1:$port" --metrics-linger 120 -- "${TR[@]}" --steps 100000 --out "$W/run" \
    > "$W/out.log" 2> "$W/err.log" &
lpid=$!
slm_on_exit "kill -TERM $lpid 2> /dev/null; wait $lpid"
alive() { kill -0 $lpid 2> /dev/null; }
scrape() { curl -s --max-time 10 "http://127.0.0.1:$port/metrics"; }
val() { sed -n "s/^$1 //p" "$2"; } # val SERIES FILE: the sample's value
for _ in $(seq 120); do
    grep -q "metrics: serving" "$W/err.log" && break
    alive || break
    sleep 0.25
done
has "the launcher logs its metrics address" "$W/err.log" "launch: metrics: serving http://127.0.0.1:$port/metrics"

# --- a port in use (the launcher's): exit 1 before anything starts, naming the address
"$BIN" launch --nproc 1 "${LA[@]}" --metrics-addr "127.0.0.1:$port" -- "${TR[@]}" --steps 2 \
    --out "$W/clash" > "$W/clash.out" 2> "$W/clash.err"
check "a port in use fails" 1 $?
has "the message names the address and the reason" "$W/clash.err" "127.0.0.1:$port.*in use"
grep -q "health check\|attempt 1" "$W/clash.err" && bad "it started something" || ok "nothing was started"
[ ! -e "$W/clash" ] && ok "no run directory was made" || bad "$W/clash was created"

# --- during attempt 1: 0 restarts, running (bounded: 120 s)
for _ in $(seq 240); do
    scrape > "$W/s1.prom"
    grep -q '^shardlm_launch_state{state="running"} 1$' "$W/s1.prom" && break
    alive || break
    sleep 0.5
done
[ "$(val shardlm_launch_attempt "$W/s1.prom")" = 1 ] && ok "attempt 1 is current" || bad "attempt: $(val shardlm_launch_attempt "$W/s1.prom")"
[ "$(val shardlm_launch_restarts_total "$W/s1.prom")" = 0 ] && ok "0 restarts during attempt 1" ||
    bad "restarts during attempt 1: $(val shardlm_launch_restarts_total "$W/s1.prom")"
[ "$(val shardlm_launch_nproc "$W/s1.prom")" = 2 ] && ok "nproc 2" || bad "nproc"
has "TYPE counter for the restarts" "$W/s1.prom" '^# TYPE shardlm_launch_restarts_total counter$'
has "HELP for the restarts" "$W/s1.prom" '^# HELP shardlm_launch_restarts_total .'

# --- after the restart (bounded: 150 s)
for _ in $(seq 300); do
    scrape > "$W/s2.prom"
    [ "$(val shardlm_launch_attempt "$W/s2.prom")" = 2 ] &&
        grep -q '^shardlm_launch_state{state="running"} 1$' "$W/s2.prom" &&
        [ "$(val shardlm_launch_heartbeat_step "$W/s2.prom")" != "" ] &&
        grep -q '"phase":"train"' "$W/run/heartbeat/rank_00000.json" 2> /dev/null && break
    alive || break
    sleep 0.5
done
scrape > "$W/s2.prom"
t_now=$(date +%s)
check_line() { grep -qxF "$2" "$W/s2.prom" && ok "$1" || { bad "$1: no line '$2'"; }; }
check_line "restarts_total 1 after the restart" 'shardlm_launch_restarts_total 1'
check_line "2 attempts started" 'shardlm_launch_attempts_started_total 2'
check_line "attempt 2 is current" 'shardlm_launch_attempt 2'
check_line "world size 2" 'shardlm_launch_world_size 2'
check_line "running" 'shardlm_launch_state{state="running"} 1'
check_line "not backing off" 'shardlm_launch_state{state="backing_off"} 0'
check_line "no health-check failure" 'shardlm_launch_health_check_failures_total 0'
check_line "no host excluded" 'shardlm_launch_excluded_hosts 0'
has "attempt 1's exit: failed, 1" "$W/s2.prom" '^shardlm_launch_last_exit_info{result="failed",reason=".*"} 1$'
hbt=$(val shardlm_launch_last_heartbeat_timestamp_seconds "$W/s2.prom")
"$PY" -c "import sys; sys.exit(not ($t_launch <= float('$hbt') <= $t_now + 1))" &&
    ok "last heartbeat time $hbt in [launch $t_launch, now $t_now]" || bad "heartbeat time '$hbt'"
promtool check metrics < "$W/s2.prom" > "$W/lint.txt" 2>&1
check "promtool check metrics on the launcher's scrape" 0 $?
cat "$W/lint.txt"

# --- Prometheus: the restart seen, the shipped rule firing (bounded: 60 s)
for _ in $(seq 120); do
    q 'ALERTS{alertname="ShardlmRestartsRising",alertstate="firing"}' > "$W/alerts.txt" 2> /dev/null
    [ -s "$W/alerts.txt" ] && break
    alive || break
    sleep 0.5
done
has "ShardlmRestartsRising is firing for the launcher" "$W/alerts.txt" "\"instance\": \"127.0.0.1:$port\", \"job\": \"shardlm-launch\""
q 'increase(shardlm_launch_restarts_total[5m]) > 0' 'min_over_time(shardlm_launch_restarts_total[5m])' \
    'shardlm_launch_world_size' > "$W/api.txt"
awk -F'\t' '$1 ~ /^increase/ && $3 > 0 {f=1} END {exit !f}' "$W/api.txt" &&
    ok "increase(shardlm_launch_restarts_total[5m]) > 0 via the API" || { bad "increase:"; cat "$W/api.txt"; }
awk -F'\t' '$1 ~ /^min_over_time/ && $3 == 0 {f=1} END {exit !f}' "$W/api.txt" ||
    echo "(note: Prometheus's first sample was after the restart; the increase needs one before)"
# the dashboard's restarts panels (deploy/grafana/shardlm.json) on the launcher's real series
"$PY" "$SRC/tests/metrics/dashboard_queries.py" "$SRC/deploy/grafana/shardlm.json" list |
    awk -F'\t' '$1 == "Restarts" {print $2}' > "$W/panels.txt"
check "the dashboard has two restarts panel queries" 2 "$(wc -l < "$W/panels.txt")"
while IFS= read -r e; do
    q "$e" > "$W/panel.txt"
    awk -F'\t' -v i="\"instance\": \"127.0.0.1:$port\"" 'index($2, i) && $3 >= 1 {f=1} END {exit !f}' \
        "$W/panel.txt" && ok "panel query >= 1 for the launcher: $e" || { bad "panel query $e:"; cat "$W/panel.txt"; }
done < "$W/panels.txt"
[ "$fails" = 0 ] || { q up; curl -s --max-time 5 "http://127.0.0.1:$pport/api/v1/targets"; echo; cat "$W/prom.log"; }

# --- end the job: SIGTERM is a preemption (checkpoint, exit 75); --metrics-linger keeps the
# final state served until a second SIGTERM; then the server goes with the launcher
kill -TERM $lpid
for _ in $(seq 240); do
    grep -q "metrics stays up" "$W/err.log" && break
    alive || break
    sleep 0.5
done
scrape > "$W/s3.prom"
check_line3() { grep -qxF "$2" "$W/s3.prom" && ok "$1" || { bad "$1: no line '$2'"; }; }
check_line3 "lingering: state done" 'shardlm_launch_state{state="done"} 1'
check_line3 "lingering: not running" 'shardlm_launch_state{state="running"} 0'
has "lingering: the last exit is attempt 2's preemption" "$W/s3.prom" '^shardlm_launch_last_exit_info{result="preempted",reason="SIGTERM received.*"} 1$'
has "lingering: attempt 1's failure is 0 now" "$W/s3.prom" '^shardlm_launch_last_exit_info{result="failed",reason=".*"} 0$'
check_line3 "lingering: still 1 restart" 'shardlm_launch_restarts_total 1'
kill -TERM $lpid
for _ in $(seq 240); do alive || break; sleep 0.5; done
alive && bad "the launcher did not stop within 120 s" || ok "the launcher stopped"
wait $lpid
check "launch exits 75 (preempted) on SIGTERM" 75 $?
code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 "http://127.0.0.1:$port/metrics")
[ "$code" = 000 ] && ok "the launcher's server is gone" || bad "server still answers: $code"
kill $ppid && wait $ppid # Prometheus (its command line names $W too)
no_orphans "no process of the job left"
[ "$fails" = 0 ] || { tail -30 "$W/err.log"; cat "$W/run/attempts.json"; }
set -e
slm_finish
