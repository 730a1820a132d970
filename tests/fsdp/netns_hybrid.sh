#!/usr/bin/env bash
# Two "hosts" on one machine (tests/netns_lib.sh: two network namespaces, each with its own
# hostname, joined by veth pairs on a bridge), Open MPI over TCP only (no shared memory), ranks
# 0-1 on host h1 and 2-3 on h2. mpirun starts its daemons through an rsh agent that enters the
# namespace instead of ssh. Runs the HYBRID_SHARD (G = 2) equivalence test, so each shard group
# is one host and the replica all-reduce crosses the virtual network.
# Usage: netns_hybrid.sh MPIEXEC TEST_BINARY. Skips (exit 77) without root / ip netns / unshare.
set -u
MPIEXEC=$1 BIN=$2
. "$(dirname "$0")/../netns_lib.sh"
slm_netns_up 2
rc=$?
[ "$rc" = 0 ] || exit "$rc"
work=$SLM_NET_DIR
common=(--host "$(slm_netns_hosts 2)" -np 4 "${SLM_NET_MPI[@]}" -x OMP_NUM_THREADS=1)
timeout 60 "$MPIEXEC" "${common[@]}" sh -c "hostname > $work/host.\$OMPI_COMM_WORLD_RANK" \
    2>/dev/null || { echo "FAIL: mpirun across the namespaces failed"; exit 1; }
where=$(cat "$work"/host.0 "$work"/host.1 "$work"/host.2 "$work"/host.3 | tr '\n' ' ')
echo "ranks 0-3 on: $where"
[ "$where" = "h1 h1 h2 h2 " ] || { echo "FAIL: ranks not placed on h1, h1, h2, h2"; exit 1; }
timeout 120 "$MPIEXEC" "${common[@]}" "$BIN" --sharding HYBRID_SHARD --shard-group-size 2 2>&1 \
    | grep -v setpgid
rc=${PIPESTATUS[0]}
[ "$rc" = 0 ] || { echo "FAIL: equivalence test over TCP exited $rc"; exit "$rc"; }
slm_netns_down
left=$(slm_netns_leftovers)
[ -z "$left" ] || { echo "FAIL: left behind: $left"; exit 1; }
echo "netns test passed"
