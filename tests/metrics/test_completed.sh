#!/usr/bin/env bash
# Issue 20 item 12 end to end: a real Prometheus 2.42 (loopback, scrape interval 1 s) scrapes a
# training run that completes; the trainer keeps serving until the scrape after its end (at most
# about two scrape intervals), so Prometheus holds shardlm_run_completed 1 and
# shardlm_step == shardlm_steps_planned after the process is gone: the condition by which
# ShardlmNoProgress tells a finished run from a dead one (the rule itself is tested on synthetic
# series by test_metrics_rules). A run stopped by SIGTERM is not completed (0, no wait).
# Every process started here is stopped by pid.
. "$(dirname "$0")/../lib.sh"
HERE=$(cd "$(dirname "$0")" && pwd)
command -v prometheus > /dev/null || { echo "SKIP: prometheus missing (scripts/setup.sh)"; exit 77; }
slm_tiny_config "$W/cfg.json" vocab_size=300 max_position_embeddings=64
slm_tiny_data "$W/data" 300 30000
free_port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
mport=$(free_port)
pport=$(free_port)
cat > "$W/prometheus.yml" <<YML
global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - $SRC/deploy/prometheus/shardlm.rules.yml
scrape_configs:
  - job_name: shardlm
    static_configs:
      - targets: ['127.0.0.1:$mport']
YML
prometheus --config.file="$W/prometheus.yml" --storage.tsdb.path="$W/tsdb" \
    --web.listen-address="127.0.0.1:$pport" --log.level=warn > "$W/prom.log" 2>&1 &
ppid=$!
slm_on_exit "kill $ppid; wait $ppid"
q() { "$PY" "$HERE/prom_query.py" "$pport" "$@"; }
for _ in $(seq 60); do q 'vector(1)' > /dev/null 2>&1 && break; sleep 0.5; done

# --- a run that completes: 400 steps of at least 20 ms (SHARDLM_FAULT slow), several scrapes
export SHARDLM_FAULT=slow:rank=0:ms=20
set +e
"$BIN" train --data "$W/data" --model "$W/cfg.json" --batch 2 --seq 16 --threads 1 \
    --peak-gflops 10 --steps 400 --max-minutes 2 --log-every 0 --out "$W/run" \
    --metrics-addr "127.0.0.1:$mport" --metrics-every 5 > "$W/train.out" 2> "$W/train.err"
check "the run completes" 0 $?
set -e
has "it waited for the scrape after its end" "$W/train.err" "metrics: serving until the next scrape"
sleep 2 # Prometheus appends the last scrape
q 'last_over_time(shardlm_run_completed[5m])' 'last_over_time(shardlm_step[5m])' \
    'last_over_time(shardlm_steps_planned[5m])' > "$W/last.txt"
cat "$W/last.txt"
awk -F'\t' '$1 ~ /run_completed/ && $3 == 1 {f=1} END {exit !f}' "$W/last.txt" &&
    ok "Prometheus holds shardlm_run_completed 1 after the process ended" ||
    bad "shardlm_run_completed 1 never scraped"
steps=$(awk -F'\t' '$1 ~ /shardlm_step\[/ {print $3}' "$W/last.txt")
planned=$(awk -F'\t' '$1 ~ /steps_planned/ {print $3}' "$W/last.txt")
[ -n "$steps" ] && [ "$steps" = "$planned" ] && ok "last scraped step $steps of $planned" ||
    bad "last scraped step '$steps' of '$planned'"
q 'last_over_time(shardlm_run_completed[1h]) == 1 or on(job, instance) (last_over_time(shardlm_step[1h]) >= on(job, instance) last_over_time(shardlm_steps_planned[1h]))' > "$W/excl.txt"
[ -s "$W/excl.txt" ] && ok "the NoProgress rule's exclusion matches the finished run" ||
    bad "the exclusion matches nothing"

# --- a run stopped by SIGTERM: not completed, no wait
"$BIN" train --data "$W/data" --model "$W/cfg.json" --batch 2 --seq 16 --threads 1 \
    --peak-gflops 10 --steps 1000000 --max-minutes 2 --log-every 0 --out "$W/run2" \
    --metrics-addr "127.0.0.1:$mport" --metrics-every 5 > "$W/t2.out" 2> "$W/t2.err" &
tpid=$!
slm_on_exit "kill -TERM $tpid; wait $tpid"
for _ in $(seq 120); do
    q 'shardlm_step{job="shardlm"} > 20' 2> /dev/null | grep -q . && break
    sleep 0.5
done
q 'shardlm_run_completed' > "$W/c2.txt"
awk -F'\t' '$3 == 0 {f=1} END {exit !f}' "$W/c2.txt" && ok "shardlm_run_completed 0 while training" ||
    bad "while training: $(cat "$W/c2.txt")"
kill -TERM $tpid
set +e
wait $tpid
rc=$?
set -e
[ "$rc" != 0 ] && ok "SIGTERM stops the run (exit $rc)" || bad "SIGTERM: exit 0"
grep -q "serving until the next scrape" "$W/t2.err" && bad "a stopped run waited for a scrape" ||
    ok "a stopped run does not wait"
slm_finish
