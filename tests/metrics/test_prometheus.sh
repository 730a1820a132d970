#!/usr/bin/env bash
# The trainer's /metrics against the real tools (issue 11): a 2-rank training job serves
# /metrics (--metrics-addr 127.0.0.1:0, port logged); a real Prometheus (loopback, temp storage,
# scrape interval 1 s, the shipped alert rules and the dashboard's queries loaded as rules)
# scrapes it; its HTTP API must return shardlm_tokens_per_second, shardlm_train_loss and the
# per-rank series with the right labels, and every Grafana panel query must return series.
# promtool check metrics on a scrape exits 0. A bounded burst of concurrent scrapes (32 clients x
# 10) is all answered, 96 idle connections do not stop training, 404 elsewhere. Bad input: a bad
# --metrics-addr is a usage error (2) before anything is written; a port in use fails (1) before
# training, naming the address. Every process started here is stopped by pid.
# Usage: test_prometheus.sh [MPIEXEC]
. "$(dirname "$0")/../lib.sh"
MPIEXEC=${1:-$MPIEXEC}
HERE=$(cd "$(dirname "$0")" && pwd)
slm_tiny_config "$W/cfg.json" vocab_size=300 max_position_embeddings=64
slm_tiny_data "$W/data" 300 30000
TRAIN=(train --data "$W/data" --model "$W/cfg.json" --batch 2 --seq 16 --threads 1
       --peak-gflops 10)

# --- bad addresses: usage errors before anything is written
set +e # the statuses below are the results
for a in "127.0.0.1:99999" "9400" "host:" ":x" "[::1]9400"; do
    "$BIN" "${TRAIN[@]}" --steps 2 --out "$W/bad" --metrics-addr "$a" > "$W/bad.out" 2> "$W/bad.err"
    check "--metrics-addr $a is a usage error" 2 $?
done
has "the message says what is expected" "$W/bad.err" "HOST:PORT"
[ ! -e "$W/bad" ] && ok "nothing written for a bad address" || bad "$W/bad was created"

# --- the training job (bounded: --max-minutes 4; stopped with SIGTERM once checked)
slm_mpirun 2 "$BIN" "${TRAIN[@]}" --steps 1000000 --max-minutes 4 --eval-every 20 \
    --eval-batches 2 --ckpt-every-steps 60 --ckpt-keep 2 --metrics-addr 127.0.0.1:0 \
    --metrics-every 2 --log-every 100000 --out "$W/run" > "$W/train.out" 2> "$W/train.err" &
tpid=$!
slm_on_exit "kill -TERM $tpid; wait $tpid"
for _ in $(seq 240); do
    grep -q "metrics: serving" "$W/train.err" && break
    kill -0 $tpid 2> /dev/null || break
    sleep 0.5
done
port=$(grep -o 'serving http://127.0.0.1:[0-9]*' "$W/train.err" | head -1 | grep -o '[0-9]*$')
if [ -z "$port" ]; then
    bad "the trainer logged no metrics address"
    cat "$W/train.err"
    slm_finish
fi
ok "rank 0 serves /metrics on 127.0.0.1:$port (port 0 picked, logged)"
[ "$(grep -c 'metrics: serving' "$W/train.err")" = 1 ] && ok "only rank 0 serves" ||
    bad "more than one rank serves"
alive() { kill -0 $tpid 2> /dev/null; }
scrape() { curl -s --max-time 10 "http://127.0.0.1:$port/metrics"; }
for _ in $(seq 120); do # until the first step and a gather are recorded
    scrape > "$W/scrape.prom"
    grep -q '^shardlm_rss_bytes{rank="1"} [1-9]' "$W/scrape.prom" && break
    alive || break
    sleep 0.5
done
if ! alive; then
    bad "the training job ended early"
    cat "$W/train.err"
    slm_finish
fi
has "a scrape holds rank 1's gathered RSS" "$W/scrape.prom" '^shardlm_rss_bytes{rank="1"} [1-9]'
has "a scrape holds the step" "$W/scrape.prom" '^shardlm_step [1-9]'
promtool check metrics < "$W/scrape.prom" > "$W/lint.txt" 2>&1
check "promtool check metrics on a scrape" 0 $?
cat "$W/lint.txt"
code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 "http://127.0.0.1:$port/")
check "404 outside /metrics" 404 "$code"

# --- a port in use: exit 1 before training, naming the address; nothing created
"$BIN" "${TRAIN[@]}" --steps 2 --out "$W/clash" --metrics-addr "127.0.0.1:$port" \
    > "$W/clash.out" 2> "$W/clash.err"
check "a port in use fails" 1 $?
has "the message names the address and the reason" "$W/clash.err" "127.0.0.1:$port.*in use"
grep -q "^step" "$W/clash.out" && bad "it trained" || ok "no step was trained"
[ ! -e "$W/clash" ] && ok "no run directory was made" || bad "$W/clash was created"

# --- Prometheus on loopback: the shipped rules and the dashboard's queries as rules
DASH="$SRC/deploy/grafana/shardlm.json"
"$PY" "$HERE/dashboard_queries.py" "$DASH" rules "$W/dash.rules.yml"
check "dashboard queries extracted" 0 $?
promtool check rules "$W/dash.rules.yml" > "$W/dash.check" 2>&1
check "promtool check rules on every dashboard query" 0 $?
pport=$("$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cat > "$W/prometheus.yml" <<YML
global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - $SRC/deploy/prometheus/shardlm.rules.yml
  - $W/dash.rules.yml
scrape_configs:
  - job_name: shardlm
    static_configs:
      - targets: ['127.0.0.1:$port']
YML
prometheus --config.file="$W/prometheus.yml" --storage.tsdb.path="$W/tsdb" \
    --web.listen-address="127.0.0.1:$pport" --log.level=warn > "$W/prom.log" 2>&1 &
ppid=$!
slm_on_exit "kill $ppid; wait $ppid"
q() { "$PY" "$HERE/prom_query.py" "$pport" "$@"; }
for _ in $(seq 120); do # ready and the first samples in (bounded)
    q shardlm_tokens_per_second > "$W/tps.txt" 2> /dev/null && [ -s "$W/tps.txt" ] && break
    alive || break
    sleep 0.5
done
inst="\"instance\": \"127.0.0.1:$port\", \"job\": \"shardlm\""
has "Prometheus has shardlm_tokens_per_second{job,instance}" "$W/tps.txt" "{\"__name__\": \"shardlm_tokens_per_second\", $inst}"
awk -F'\t' '$3 > 0 {f=1} END {exit !f}' "$W/tps.txt" && ok "tokens/s > 0" || bad "tokens/s: $(cat "$W/tps.txt")"
q shardlm_train_loss > "$W/loss.txt"
has "Prometheus has shardlm_train_loss{job,instance}" "$W/loss.txt" "{\"__name__\": \"shardlm_train_loss\", $inst}"
# a loss of a 300-token vocabulary: finite, below ln(300) + 2
awk -F'\t' '$3 > 0 && $3 < 7.71 {f=1} END {exit !f}' "$W/loss.txt" && ok "loss in range" || bad "loss: $(cat "$W/loss.txt")"
q shardlm_rss_bytes shardlm_world_size up > "$W/misc.txt"
has "per-rank RSS, rank 0" "$W/misc.txt" "\"rank\": \"0\"}"
has "per-rank RSS, rank 1" "$W/misc.txt" "\"rank\": \"1\"}"
has "world size 2" "$W/misc.txt" "^shardlm_world_size.*	2$"
has "the target is up" "$W/misc.txt" "^up.*	1$"
# every dashboard query returns series (rates need two scrapes, val loss the first eval, the
# checkpoint series the first commit at step 60): bounded wait
"$PY" "$HERE/dashboard_queries.py" "$DASH" list > "$W/dash.list"
missing=""
for _ in $(seq 90); do
    missing=""
    while IFS=$'\t' read -r title expr; do
        n=$(q "$expr" 2> /dev/null | wc -l)
        [ "$n" -gt 0 ] || missing+="  [$title] $expr"$'\n'
    done < "$W/dash.list"
    [ -z "$missing" ] && break
    alive || break
    sleep 1
done
if [ -z "$missing" ]; then
    ok "every dashboard query ($(wc -l < "$W/dash.list")) returns series"
else
    bad "dashboard queries without series:"
    printf '%s' "$missing"
fi
q 'shardlm_checkpoints_total' 'shardlm_val_loss' > "$W/ck.txt"
awk -F'\t' '$1 == "shardlm_checkpoints_total" && $3 >= 1 {f=1} END {exit !f}' "$W/ck.txt" &&
    ok "a checkpoint counted" || bad "checkpoints: $(cat "$W/ck.txt")"
has "val loss series {split=val}" "$W/ck.txt" '"split": "val"'
q 'ALERTS{alertname=~"ShardlmNoProgress|ShardlmNonFiniteLoss|ShardlmTargetDown"}' > "$W/alerts.txt"
[ ! -s "$W/alerts.txt" ] && ok "no alert fires on a healthy run" || { bad "alerts:"; cat "$W/alerts.txt"; }

# --- a bounded burst of concurrent scrapes, then 96 idle connections: training goes on
steps_before=$(wc -l < "$W/run/metrics.jsonl")
pids=()
for i in $(seq 32); do
    (for _ in $(seq 10); do
        curl -s -o /dev/null -w '%{http_code}\n' --max-time 20 "http://127.0.0.1:$port/metrics"
    done) > "$W/burst.$i" &
    pids+=($!)
done
wait "${pids[@]}"
n200=$(cat "$W"/burst.* | grep -c '^200$')
check "320 concurrent scrapes answered 200" 320 "$n200"
"$PY" - "$port" "$W/run/metrics.jsonl" <<'PYEOF'
import socket, sys, time
socks = []
for _ in range(96):  # more than the server's 64-connection limit, none sends a request
    s = socket.socket()
    s.settimeout(5)
    try:
        s.connect(("127.0.0.1", int(sys.argv[1])))
        socks.append(s)
    except OSError:
        s.close()
n0 = sum(1 for _ in open(sys.argv[2]))
time.sleep(4)
n1 = sum(1 for _ in open(sys.argv[2]))
for s in socks:
    s.close()
print(f"idle connections {len(socks)}; metrics.jsonl lines {n0} -> {n1}")
sys.exit(0 if n1 > n0 else 1)
PYEOF
check "training steps on while idle connections hold the server" 0 $?
steps_after=$(wc -l < "$W/run/metrics.jsonl")
[ "$steps_after" -gt "$steps_before" ] && ok "steps during the burst ($steps_before -> $steps_after lines)" ||
    bad "no step during the burst"
code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 20 "http://127.0.0.1:$port/metrics")
check "the server answers after the idle connections closed" 200 "$code"

# --- stop the job: SIGTERM to its ranks (children of mpirun, by pid), which stop together at a
# step boundary and save; mpirun then exits with their status (bounded)
ranks=$(pgrep -P $tpid || true)
[ -n "$ranks" ] && kill -TERM $ranks
for _ in $(seq 120); do kill -0 $tpid 2> /dev/null || break; sleep 0.5; done
kill -0 $tpid 2> /dev/null && bad "the training job did not stop within 60 s" || ok "the job stopped"
wait $tpid
rc=$?
[ "$rc" = 1 ] || [ "$rc" = 75 ] && ok "stopped by the signal, exit $rc" || bad "exit $rc"
grep "straggler" "$W/train.err" || true # timing-dependent: shown, not asserted
set -e
slm_finish
