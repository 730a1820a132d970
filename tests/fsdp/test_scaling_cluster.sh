#!/usr/bin/env bash
# bench/scaling/cluster.sh (issue 14): the emulated cluster's set-up and tear-down.
# (1) `check 3 200mbit 0` (veth links to a bridge): 3 hosts + the switch namespace exist, nothing
# in the machine's own namespace, every link shaped (tbf) both ways, mpirun places 2 ranks per
# host by hostname (h1 h1 h2 h2 h3 h3), and after the tear-down no namespace or link of the
# cluster is left. (2) `check 3 200mbit 3` (latency: every host's eth0 a TAP port of
# bench/scaling/delayswitch): the same, plus ping RTT h1 -> h2, h3 >= 2 x 3 ms (strict: each
# frame is held 3 ms per crossing) and <= 2 x 3 + 100 ms (generous, load-robust), and no switch
# process or TAP device left. (3) A script that built a cluster (veth, and delayed) and is
# killed with SIGTERM (or exits on an error) removes it through its trap. (4) A script killed
# with SIGKILL (no trap runs): its delayswitch exits with it (--exit-with-parent), taking its
# TAP devices along (the namespaces stay: the test removes them).
# Usage: test_scaling_cluster.sh [DELAYSWITCH_BINARY]  (else cluster.sh builds it with cc)
# Skips (77) without root / ip / tc / unshare / network namespaces.
set -u
C="$(cd "$(dirname "$0")/../.." && pwd)/bench/scaling/cluster.sh"
[ -n "${1:-}" ] && export CL_SWITCH=$1
fails=0
for args in "3 200mbit 0" "3 200mbit 3"; do
    out=$(bash "$C" check $args 2>&1)
    rc=$?
    echo "$out"
    [ "$rc" = 77 ] && exit 77
    [ "$rc" = 0 ] || { echo "[FAIL] cluster.sh check $args exited $rc"; fails=$((fails + 1)); }
done

# Anything of cluster slmcID left: namespaces, links in the root namespace, a delayswitch.
leftovers() {
    ip netns list | grep "^slmc$1"
    ip -o link show | grep "slmc$1"
    local f
    for f in /proc/[0-9]*/cmdline; do
        tr '\0' ' ' 2>/dev/null < "$f" | grep -q -- "--port slmc$1[t]1=" && echo "switch process ${f//[^0-9]/}"
    done
}

id=$((RANDOM + 40000))
for case in "TERM 0" "error 0" "TERM 2" "error 2" "KILL 2"; do
    how=${case% *} d=${case#* }
    id=$((id + 1))
    prefix="slmc$id"
    log=$(mktemp)
    if [ "$how" = error ]; then
        CL_ID=$id bash -c ". '$C'; cluster_up 2 100mbit $d || exit 1; echo up; sleep 1; false; exit 3" > "$log" 2>&1 &
    elif [ "$how" = KILL ]; then # the shell becomes the sleep: killing it leaves no child
        kill_tmp=$(mktemp -d) # its work directory (no trap removes it)
        TMPDIR=$kill_tmp CL_ID=$id bash -c ". '$C'; cluster_up 2 100mbit $d || exit 1; echo up; exec sleep 120" > "$log" 2>&1 &
    else
        CL_ID=$id bash -c ". '$C'; cluster_up 2 100mbit $d || exit 1; echo up; sleep 120 & echo \"sleep \$!\"; wait \$!" > "$log" 2>&1 &
    fi
    pid=$!
    for _ in $(seq 1 100); do grep -q '^up' "$log" && break; sleep 0.1; done
    n=$(ip netns list | grep -c "^$prefix")
    [ "$n" = 3 ] || { echo "[FAIL] $how: expected 3 namespaces while up, found $n"; cat "$log"; fails=$((fails + 1)); }
    [ "$d" != 0 ] && { [ "$(ip netns exec "${prefix}h1" ip -d link show eth0 | grep -c 'tun type tap')" = 1 ] ||
        { echo "[FAIL] $how delay $d: h1's eth0 is not a TAP"; fails=$((fails + 1)); }; }
    [ "$how" != error ] && kill -"$how" "$pid"
    wait "$pid"
    sp=$(awk '/^sleep [0-9]+$/ { print $2 }' "$log") # the killed script's child (the trap left it)
    [ -n "$sp" ] && kill "$sp" 2>/dev/null
    if [ "$how" = KILL ]; then
        # no trap ran: the namespaces stay (removed here), the switch and its TAPs must not
        for _ in $(seq 1 100); do [ -z "$(leftovers "$id" | grep 'switch process')" ] && break; sleep 0.1; done
        left=$(leftovers "$id" | grep -v "^$prefix")
        for ns in $(ip netns list | awk '{print $1}' | grep "^$prefix"); do
            ip netns exec "$ns" ip -o link show | grep -q 'eth0' && left+=" TAP in $ns"
        done
        for ns in $(ip netns list | awk '{print $1}' | grep "^$prefix"); do ip netns del "$ns"; done
        pkill_pid=$(leftovers "$id" | awk '/switch process/ {print $3}')
        [ -n "$pkill_pid" ] && kill -KILL $pkill_pid
        rm -rf "$kill_tmp"
        [ -z "$left" ] && echo "[ ok ] KILL delay $d: the switch and its TAP devices went with the script" ||
            { echo "[FAIL] KILL delay $d: left behind: $left"; fails=$((fails + 1)); }
        rm -f "$log"
        continue
    fi
    left=$(leftovers "$id")
    if [ -n "$left" ]; then
        echo "[FAIL] $how delay $d: left behind after the script ended: $left"
        fails=$((fails + 1))
        for ns in $(ip netns list | awk '{print $1}' | grep "^$prefix"); do ip netns del "$ns"; done
    else
        echo "[ ok ] $how delay $d: the trap removed the cluster"
    fi
    rm -f "$log"
done
[ "$fails" = 0 ] && echo "all checks passed" && exit 0
echo "$fails check(s) failed"
exit 1
