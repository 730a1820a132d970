#!/usr/bin/env bash
# bench/scaling/cluster.sh (issue 14): the emulated cluster's set-up and tear-down. (1) `check 3`:
# 3 hosts + the switch namespace exist, nothing in the machine's own namespace, every link shaped
# (tbf) both ways, mpirun places 2 ranks per host by hostname (h1 h1 h2 h2 h3 h3), and after the
# tear-down no namespace or link of the cluster is left. (2) A script that built a cluster and is
# killed with SIGTERM (or exits on an error) removes it through its trap.
# Skips (77) without root / ip / tc / unshare / network namespaces.
set -u
C="$(cd "$(dirname "$0")/../.." && pwd)/bench/scaling/cluster.sh"
fails=0
out=$(bash "$C" check 3 2>&1)
rc=$?
echo "$out"
[ "$rc" = 77 ] && exit 77
[ "$rc" = 0 ] || { echo "[FAIL] cluster.sh check 3 exited $rc"; fails=$((fails + 1)); }

id=$((RANDOM + 40000))
prefix="slmc$id"
for how in TERM error; do
    log=$(mktemp)
    if [ "$how" = TERM ]; then
        CL_ID=$id bash -c ". '$C'; cluster_up 2 100mbit 0 || exit 1; echo up; sleep 120 & wait \$!" > "$log" 2>&1 &
    else
        CL_ID=$id bash -c ". '$C'; cluster_up 2 100mbit 0 || exit 1; echo up; sleep 1; false; exit 3" > "$log" 2>&1 &
    fi
    pid=$!
    for _ in $(seq 1 100); do grep -q '^up' "$log" && break; sleep 0.1; done
    n=$(ip netns list | grep -c "^$prefix")
    [ "$n" = 3 ] || { echo "[FAIL] $how: expected 3 namespaces while up, found $n"; cat "$log"; fails=$((fails + 1)); }
    [ "$how" = TERM ] && kill -TERM "$pid"
    wait "$pid"
    left=$(ip netns list | grep "^$prefix"; ip -o link show | grep "$prefix")
    if [ -n "$left" ]; then
        echo "[FAIL] $how: left behind after the script ended: $left"
        fails=$((fails + 1))
        for ns in $(ip netns list | awk '{print $1}' | grep "^$prefix"); do ip netns del "$ns"; done
    else
        echo "[ ok ] $how: the trap removed the cluster"
    fi
    rm -f "$log"
done
[ "$fails" = 0 ] && echo "all checks passed" && exit 0
echo "$fails check(s) failed"
exit 1
