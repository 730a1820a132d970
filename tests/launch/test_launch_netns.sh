#!/usr/bin/env bash
# Fault test 5 (issue 10): node replacement on two "hosts" (network namespaces h1, h2 with their
# own hostnames, joined by a bridge; Open MPI over TCP, its daemons started through an rsh
# agent that enters the namespace: tests/netns_lib.sh). The health check
# fails on h1 (SHARDLM_FAULT=fail-health:rank=0, rank 0 of the check runs on h1):
#  1. spare host: --nproc 2 on h1:2,h2:2: h1 is excluded, training runs at full size (2 ranks)
#     on h2 only, exits 0 with the weights of an uninterrupted 2-rank run;
#  2. no spare: --nproc 2 --min-nproc 1 on h1:1,h2:1: h1 excluded, training runs on h2 at world
#     1 with --grad-accum 2 (the global batch kept) and finishes; the launcher's /metrics
#     (--metrics-addr, --metrics-linger) counts the health-check failure and the excluded host;
#  3. a 2-rank launch killed after a checkpoint, then a launch with only h1:1 (--min-nproc 1):
#     world 1 with --grad-accum 2 resumes the 2-rank checkpoint (no --allow-batch-change
#     needed: the global batch is kept) and matches the 2-rank run.
#  4. --nproc 6 HYBRID_SHARD --shard-group-size 2 on h1:2,h2:4, h1 excluded: world 2 (whole shard
#     groups), not 3, with --grad-accum 3.
# Skips (77) only when network namespaces cannot be created. Usage: test_launch_netns.sh MPIEXEC.
. "$(dirname "$0")/../lib.sh"
MPIEXEC=${1:-$MPIEXEC}
. "$(dirname "$0")/../netns_lib.sh"
set +e
slm_netns_up 2
rc=$?
set -e
[ "$rc" = 0 ] || exit "$rc"
net=$SLM_NET
. "$(dirname "$0")/launch_lib.sh"
MPIA="${SLM_NET_MPI[*]} -x OMP_NUM_THREADS"
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
# 3. shrink after a checkpoint: a 2-rank launch on h1:1,h2:1 is killed (rank 1 before step 5, no
#    restart) after its first checkpoints; the next launch has only h1:1 (--min-nproc 1), so it
#    runs at world 1 with --grad-accum 2 and resumes the 2-rank checkpoint (step 4, or 2): the
#    global batch is kept, so the trainer's batch check passes without --allow-batch-change
#    (never passed by the launcher) and its steps match the uninterrupted 2-rank run within the
#    resharding tolerance
SHARDLM_FAULT=kill:rank=1:step=5 timeout 240 "$BIN" launch --nproc 2 --max-restarts 0 \
    --hosts "$net.1:1,$net.2:1" "${LA[@]}" --hang-timeout 60 --mpi-args "$MPIA" \
    -- "${TR[@]}" --steps 10 --out "$W/c" > "$W/c1.log" 2>&1
rc=$?
[ "$rc" != 0 ] && ls "$W/c/checkpoints" | grep -q '^step_' && ok "2-rank launch killed after a checkpoint (exit $rc)" ||
    { bad "2-rank launch killed after a checkpoint: exit $rc"; cat "$W/c1.log"; }
timeout 240 "$BIN" launch --nproc 2 --min-nproc 1 --hosts "$net.1:1" "${LA[@]}" --hang-timeout 60 \
    --mpi-args "$MPIA" -- "${TR[@]}" --steps 10 --out "$W/c" > "$W/c.log" 2>&1
check "shrink after a checkpoint: launch exits 0" 0 $?
J=$W/c/attempts.json
[ "$(aj "$J" '[(x["world"], x["grad_accum"], x["result"]) for x in a["attempts"]][-1]')" = "(1, 2, 'success')" ] &&
    ok "the next launch ran at world 1 with --grad-accum 2" || { bad "shrink attempts"; cat "$J"; cat "$W/c.log"; }
if grep -q -e "allow-batch-change" -e "global batch of" -e "batch geometry" "$W/c.log" "$W/c/attempts.json" ||
    grep -q '"event":"batch_change"' "$W/c/metrics.jsonl"; then
    bad "the shrunk resume needed or reported a batch change"; cat "$W/c.log"
else ok "the shrunk resume keeps the global batch (no --allow-batch-change, no batch_change)"; fi
if "$PY" - "$W/ref/metrics.jsonl" "$W/c/metrics.jsonl" <<'PYEOF'
import json, sys
def last(p):
    ev = [json.loads(l) for l in open(p)]
    i = max(k for k, e in enumerate(ev) if e.get("event") == "start")
    return ev[i], {e["step"]: e["loss"] for e in ev[i:] if e.get("event") == "step"}
_, a = last(sys.argv[1])
start, b = last(sys.argv[2])
# the newest committed 2-rank checkpoint: step 4, or step 2 when the kill came before step 4's
# asynchronous save was committed
assert (start["world"], start["grad_accum"]) == (1, 2) and start["start_step"] in (2, 4), start
assert sorted(b) == list(range(start["start_step"] + 1, 11)), b
# 1e-5 relative: another world, the same sequences per step (tests/ckpt/test_ckpt_mpi_resume.sh)
for s in b:
    assert abs(a[s] - b[s]) <= 1e-5 * abs(a[s]), (s, a[s], b[s])
print("  from step %d: max rel diff %.2g" % (start["start_step"], max(abs(a[s] - b[s]) / abs(a[s]) for s in b)))
PYEOF
then ok "world-1 attempt resumed a 2-rank checkpoint; its steps == the 2-rank run's"
else bad "world-1 attempt's losses"; cat "$W/c/metrics.jsonl"; fi
# 4. HYBRID_SHARD shrink (adversarial tester break3): --nproc 6 --sharding HYBRID_SHARD
#    --shard-group-size 2 on h1:2,h2:4 with h1 excluded: 4 slots; 3 ranks would divide the global
#    batch but split a shard group (the trainer refuses it: a deterministic failure), so the
#    world is 2 with --grad-accum 3, and the run finishes.
SHARDLM_FAULT=fail-health:rank=0 timeout 240 "$BIN" launch --nproc 6 --min-nproc 1 \
    --hosts "$net.1:2,$net.2:4" "${LA[@]}" --hang-timeout 60 --mpi-args "$MPIA" -- "${TR[@]}" \
    --sharding HYBRID_SHARD --shard-group-size 2 --steps 2 --out "$W/d" > "$W/d.log" 2>&1
check "HYBRID_SHARD shrink: launch exits 0" 0 $?
J=$W/d/attempts.json
[ "$(aj "$J" '[(x["world"], x["grad_accum"], x["result"]) for x in a["attempts"]]')" = "[(2, 3, 'success')]" ] &&
    ok "HYBRID_SHARD group 2: shrunk to world 2 (not 3) with --grad-accum 3" ||
    { bad "HYBRID_SHARD shrink attempts"; cat "$J"; tail -5 "$W/d.log"; }
no_orphans "no process left"
slm_netns_down
[ -z "$(slm_netns_leftovers)" ] && ok "no namespace or link left" || bad "left behind: $(slm_netns_leftovers)"
slm_finish
