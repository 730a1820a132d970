#!/usr/bin/env bash
# Fault test 5 (issue 10): node replacement on two "hosts" (network namespaces h1, h2 with their
# own hostnames, joined by a bridge; Open MPI over TCP, its daemons started through an rsh
# agent that enters the namespace, as tests/fsdp/netns_hybrid.sh builds them). The health check
# fails on h1 (SHARDLM_FAULT=fail-health:rank=0, rank 0 of the check runs on h1):
#  1. spare host: --nproc 2 on h1:2,h2:2: h1 is excluded, training runs at full size (2 ranks)
#     on h2 only, exits 0 with the weights of an uninterrupted 2-rank run;
#  2. no spare: --nproc 2 --min-nproc 1 on h1:1,h2:1: h1 excluded, training runs on h2 at world
#     1 with --grad-accum 2 (the global batch kept) and finishes; the launcher's /metrics
#     (--metrics-addr, --metrics-linger) counts the health-check failure and the excluded host.
# Skips (77) only when network namespaces cannot be created. Usage: test_launch_netns.sh MPIEXEC.
. "$(dirname "$0")/../lib.sh"
MPIEXEC=${1:-$MPIEXEC}
command -v ip >/dev/null && command -v unshare >/dev/null || { echo "SKIP: no ip/unshare"; exit 77; }
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root"; exit 77; }
id=$$ net="10.$((100 + id % 100)).$(( (id / 100) % 250 ))"
br="slmlb$id" ns1="slmlh1_$id" ns2="slmlh2_$id"
netns_cleanup() {
    ip netns del "$ns1" 2>/dev/null; ip netns del "$ns2" 2>/dev/null
    ip link del "slmlv1_$id" 2>/dev/null; ip link del "slmlv2_$id" 2>/dev/null
    ip link del "$br" 2>/dev/null
}
slm_on_exit netns_cleanup
ip netns add "$ns1" 2>/dev/null || { echo "SKIP: cannot create network namespaces"; exit 77; }
ip netns add "$ns2" || exit 1
ip link add "$br" type bridge && ip addr add "$net.254/24" dev "$br" && ip link set "$br" up || exit 1
i=0
for ns in "$ns1" "$ns2"; do
    i=$((i + 1))
    ip link add "slmlv${i}_$id" type veth peer name eth0 netns "$ns" || exit 1
    ip link set "slmlv${i}_$id" master "$br" up
    ip netns exec "$ns" ip addr add "$net.$i/24" dev eth0
    ip netns exec "$ns" ip link set eth0 up
    ip netns exec "$ns" ip link set lo up
done
. "$(dirname "$0")/launch_lib.sh"
cat > "$W/agent.sh" <<AGENT
#!/bin/sh
host=\$1; shift
case "\$host" in
  $net.1) ns=$ns1; hn=h1 ;;
  $net.2) ns=$ns2; hn=h2 ;;
  *) echo "agent: unknown host \$host" >&2; exit 1 ;;
esac
exec ip netns exec "\$ns" unshare --uts /bin/sh -c "hostname \$hn; \$*"
AGENT
chmod +x "$W/agent.sh"
MPIA="--mca routed direct --mca plm_rsh_agent $W/agent.sh --mca btl tcp,self"
MPIA+=" --mca btl_tcp_if_include $net.0/24 --mca oob_tcp_if_include $net.0/24 -x OMP_NUM_THREADS"
set +e
slm_ref 2 10 "$W/ref"

SHARDLM_FAULT=fail-health:rank=0 timeout 240 "$BIN" launch --nproc 2 --hosts "$net.1:2,$net.2:2" \
    "${LA[@]}" --hang-timeout 60 --mpi-args "$MPIA" -- "${TR[@]}" --steps 10 --out "$W/a" \
    > "$W/a.log" 2>&1
check "spare host: launch exits 0" 0 $?
J=$W/a/attempts.json
[ "$(aj "$J" 'a["excluded_hosts"]')" = "['$net.1']" ] && ok "h1 ($net.1) excluded" ||
    { bad "excluded hosts"; cat "$W/a.log"; }
has "the health failure names rank 0 on h1" "$J" 'rank 0 (host h1)'
[ "$(aj "$J" 'len(a["attempts"])')" = 1 ] && [ "$(aj "$J" 'a["attempts"][0]["world"]')" = 2 ] &&
    [ "$(aj "$J" 'a["attempts"][0]["hosts"]')" = "$net.2:2" ] &&
    ok "one attempt at full size (2 ranks) on $net.2 only" || { bad "attempt"; cat "$J"; }
if grep -q '"host":"h2"' "$W/a/heartbeat/rank_00000.json" && grep -q '"host":"h2"' "$W/a/heartbeat/rank_00001.json"; then
    ok "both ranks trained on h2 (heartbeats)"
else
    bad "heartbeat hosts"; cat "$W"/a/heartbeat/*
fi
same_weights "final weights equal an uninterrupted 2-rank run" "$W/a" "$W/ref" 10

# (with the launcher's /metrics, kept up after the end by --metrics-linger until a SIGTERM)
SHARDLM_FAULT=fail-health:rank=0 timeout 240 "$BIN" launch --nproc 2 --min-nproc 1 \
    --hosts "$net.1:1,$net.2:1" "${LA[@]}" --hang-timeout 60 --mpi-args "$MPIA" \
    --metrics-addr 127.0.0.1:0 --metrics-linger 120 -- "${TR[@]}" \
    --steps 10 --out "$W/b" > "$W/b.log" 2>&1 &
lpid=$!
slm_on_exit "kill -TERM $lpid 2> /dev/null; wait $lpid"
for _ in $(seq 480); do
    grep -q "metrics stays up" "$W/b.log" && break
    kill -0 $lpid 2> /dev/null || break
    sleep 0.5
done
mport=$(grep -o 'metrics: serving http://127.0.0.1:[0-9]*' "$W/b.log" | grep -o '[0-9]*$')
curl -s --max-time 10 "http://127.0.0.1:$mport/metrics" > "$W/b.prom"
kill -TERM $lpid
wait $lpid
check "no spare: launch exits 0" 0 $?
for l in 'shardlm_launch_health_check_failures_total 1' 'shardlm_launch_excluded_hosts 1' \
    "shardlm_launch_host_excluded{host=\"$net.1\"} 1" 'shardlm_launch_world_size 1' \
    'shardlm_launch_nproc 2' 'shardlm_launch_restarts_total 0' 'shardlm_launch_state{state="done"} 1' \
    'shardlm_launch_last_exit_info{result="success",reason=""} 1'; do
    grep -qxF "$l" "$W/b.prom" && ok "launcher /metrics: $l" || { bad "launcher /metrics: no '$l'"; cat "$W/b.prom"; }
done
J=$W/b/attempts.json
[ "$(aj "$J" 'a["attempts"][0]["world"]')" = 1 ] && [ "$(aj "$J" 'a["attempts"][0]["grad_accum"]')" = 2 ] &&
    [ "$(aj "$J" 'a["attempts"][0]["hosts"]')" = "$net.2:1" ] &&
    ok "ran at world 1 on $net.2 with --grad-accum 2" || { bad "attempt"; cat "$J"; cat "$W/b.log"; }
has "the trainer ran with grad accumulation 2" "$W/b/metrics.jsonl" '"event":"start".*"grad_accum":2'
[ -d "$W/b/checkpoints/step_00000010" ] && ok "finished: step 10 checkpoint" || bad "no final checkpoint"
no_orphans "no process left"
slm_finish
