#!/usr/bin/env bash
# An emulated cluster on one machine (issue 14, docs/scaling.md "Emulated cluster"): H "hosts",
# each a network namespace with its own hostname (UTS namespace per process started in it),
# joined by veth pairs to a bridge that lives in a "switch" namespace of its own, so nothing is
# added to the machine's own namespace (no address, no link, no route) and only the
# namespaces' private 10.x addresses exist. Each host's link is shaped in both directions: on
# the host's eth0 (egress = what the host sends) and on the switch-side veth (egress = what it
# receives) a tbf token bucket at RATE and, where the kernel has netem, a netem delay of
# DELAY / 2 (so host-to-host one-way latency is DELAY). Open MPI runs over TCP between hosts and
# shared memory (vader) within a host; mpirun itself runs in host 1 and reaches the others
# through an rsh agent that enters their namespace (no ssh).
#
# As a library (source it): cluster_up H RATE DELAY; cluster_shape RATE DELAY;
#   cluster_mpirun RANKS_PER_HOST [mpirun options] -- COMMAND...; cluster_down (also on EXIT,
#   INT, TERM once cluster_up ran). RATE as tc spells it (100mbit, 1gbit), DELAY in ms (0: none).
# As a command: cluster.sh check H [RATE DELAY]: builds H hosts, checks rank placement and the
#   shaping, tears down, and verifies nothing was left behind (the CTest test).
# Needs root, ip, tc, unshare; exits 77 (skip) without them.
CL_ID=${CL_ID:-$$}
CL_PREFIX="slmc${CL_ID}"
CL_H=0
CL_NETEM=0
CL_WORK=""
CL_NET="10.$((150 + CL_ID % 100)).$(((CL_ID / 100) % 250))"

cl_ns() { echo "${CL_PREFIX}h$1"; }    # host i's namespace (1-based)
cl_sw() { echo "${CL_PREFIX}sw"; }     # the switch namespace
cl_addr() { echo "$CL_NET.$1"; }       # host i's address

cluster_requirements() {
    command -v ip >/dev/null && command -v tc >/dev/null && command -v unshare >/dev/null ||
        { echo "SKIP: needs ip, tc and unshare"; return 77; }
    [ "$(id -u)" = 0 ] || { echo "SKIP: needs root (network namespaces)"; return 77; }
    return 0
}

cluster_down() {
    local i
    for ((i = 1; i <= CL_H; i++)); do ip netns del "$(cl_ns $i)" 2>/dev/null; done
    ip netns del "$(cl_sw)" 2>/dev/null
    [ -n "$CL_WORK" ] && rm -rf "$CL_WORK"
    CL_H=0
    CL_WORK=""
}

# One direction of a link: tbf at RATE (burst: 4 ms of RATE, at least 128 KiB, so segments
# that GSO merges up to 64 KiB pass), under netem DELAY_HALF ms when available.
cl_shape_dev() { # cl_shape_dev NS DEV RATE DELAY_MS
    local ns=$1 dev=$2 rate=$3 d=$4 bits burst
    ip netns exec "$ns" tc qdisc del dev "$dev" root 2>/dev/null
    bits=$(tc_rate_bits "$rate") || return 1
    burst=$((bits / 8 / 250))
    [ "$burst" -lt 131072 ] && burst=131072
    if [ "$CL_NETEM" = 1 ] && [ "$d" != 0 ]; then
        local half
        half=$(awk -v d="$d" 'BEGIN { printf "%.3fms", d / 2 }')
        ip netns exec "$ns" tc qdisc add dev "$dev" root handle 1: netem delay "$half" limit 100000 &&
            ip netns exec "$ns" tc qdisc add dev "$dev" parent 1: handle 2: tbf rate "$rate" \
                burst "$burst" latency "${CL_QUEUE_MS:-20}ms"
    else
        ip netns exec "$ns" tc qdisc add dev "$dev" root tbf rate "$rate" burst "$burst" latency "${CL_QUEUE_MS:-20}ms"
    fi
}

# bits/s of a tc rate: 100mbit, 1gbit, 2.5gbit, 800kbit, 1000000 (bit/s).
tc_rate_bits() {
    awk -v r="$1" 'BEGIN {
        if (match(r, /^[0-9.]+/) == 0) exit 1
        v = substr(r, 1, RLENGTH); u = substr(r, RLENGTH + 1)
        m = (u == "" || u == "bit") ? 1 : (u == "kbit") ? 1e3 : (u == "mbit") ? 1e6 : (u == "gbit") ? 1e9 : -1
        if (m < 0) exit 1
        printf "%.0f\n", v * m }'
}

cluster_shape() { # cluster_shape RATE DELAY_MS
    local i
    for ((i = 1; i <= CL_H; i++)); do
        cl_shape_dev "$(cl_ns $i)" eth0 "$1" "$2" || return 1
        cl_shape_dev "$(cl_sw)" "v$i" "$1" "$2" || return 1
    done
}

cluster_up() { # cluster_up H RATE DELAY_MS
    local h=$1 rate=$2 delay=$3 i sw
    cluster_requirements || return $?
    trap cluster_down EXIT
    trap 'cluster_down; exit 130' INT
    trap 'cluster_down; exit 143' TERM
    CL_WORK=$(mktemp -d "${TMPDIR:-/tmp}/slm_cluster.XXXXXX")
    sw=$(cl_sw)
    ip netns add "$sw" || { echo "cannot create network namespaces"; return 77; }
    ip netns exec "$sw" ip link add br0 type bridge && ip netns exec "$sw" ip link set br0 up &&
        ip netns exec "$sw" ip link set lo up || return 1
    CL_H=$h
    for ((i = 1; i <= h; i++)); do
        local ns
        ns=$(cl_ns $i)
        ip netns add "$ns" || return 1
        ip link add "${CL_PREFIX}e$i" netns "$ns" type veth peer name "v$i" netns "$sw" || return 1
        ip netns exec "$ns" ip link set "${CL_PREFIX}e$i" name eth0 || return 1
        ip netns exec "$ns" ip addr add "$(cl_addr $i)/24" dev eth0
        ip netns exec "$ns" ip link set eth0 up
        ip netns exec "$ns" ip link set lo up
        ip netns exec "$sw" ip link set "v$i" master br0 up
    done
    # netem is a kernel option (sch_netem); some VM kernels lack it: then no latency emulation.
    if ip netns exec "$(cl_ns 1)" tc qdisc add dev eth0 root netem delay 1ms 2>/dev/null; then
        CL_NETEM=1
        ip netns exec "$(cl_ns 1)" tc qdisc del dev eth0 root
    else
        CL_NETEM=0
        [ "$delay" != 0 ] && echo "cluster: this kernel has no netem qdisc: latency $delay ms NOT emulated (rate only)" >&2
    fi
    cluster_shape "$rate" "$delay" || return 1
    # rsh agent: "agent HOST command..." runs the command in that host's namespace, hostname hI.
    {
        echo '#!/bin/sh'
        echo 'host=$1; shift'
        echo 'case "$host" in'
        for ((i = 1; i <= h; i++)); do echo "  $(cl_addr $i)) ns=$(cl_ns $i); hn=h$i ;;"; done
        echo '  *) echo "agent: unknown host $host" >&2; exit 1 ;;'
        echo 'esac'
        echo 'exec ip netns exec "$ns" unshare --uts /bin/sh -c "hostname $hn; $*"'
    } > "$CL_WORK/agent.sh"
    chmod +x "$CL_WORK/agent.sh"
    sleep 0.3 # let the links come up (mpirun's daemons retry their connections anyway)
}

# cluster_mpirun RANKS_PER_HOST [mpirun options] -- COMMAND...: ranks 0..n-1 on h1, the next n
# on h2, ... (by slot), TCP between hosts, shared memory within.
cluster_mpirun() {
    local n=$1 i hosts="" opts=()
    shift
    while [ $# -gt 0 ] && [ "$1" != "--" ]; do opts+=("$1"); shift; done
    [ "${1:-}" = "--" ] && shift
    for ((i = 1; i <= CL_H; i++)); do hosts+="${hosts:+,}$(cl_addr $i):$n"; done
    local mpi=(mpirun --host "$hosts" -np $((n * CL_H)) --map-by slot --oversubscribe
               --mca routed direct --mca plm_rsh_agent "$CL_WORK/agent.sh"
               --mca btl tcp,vader,self --mca btl_tcp_if_include "$CL_NET.0/24"
               --mca oob_tcp_if_include "$CL_NET.0/24" "${opts[@]}")
    local q=() a
    for a in "${mpi[@]}" "$@"; do q+=("$(printf '%q' "$a")"); done
    ip netns exec "$(cl_ns 1)" unshare --uts /bin/sh -c "hostname h1; exec ${q[*]}" 2>&1 |
        grep -v 'setpgid'
    return "${PIPESTATUS[0]}"
}

# Names this cluster put anywhere: namespaces with its prefix (the links live inside them).
cluster_leftovers() {
    ip netns list 2>/dev/null | grep "$CL_PREFIX" || true
    ip -o link show 2>/dev/null | grep -E "${CL_PREFIX}|: v[0-9]+@" || true
}

cluster_check() { # cluster_check H [RATE DELAY]
    local h=$1 rate=${2:-200mbit} delay=${3:-2} rc=0 i
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    cluster_up "$h" "$rate" "$delay" || return $?
    local n
    n=$(ip netns list | grep -c "^$CL_PREFIX")
    echo "namespaces: $n (hosts $h + switch)"
    [ "$n" = $((h + 1)) ] || { echo "FAIL: expected $((h + 1)) namespaces"; rc=1; }
    [ -z "$(ip -o link show | grep "${CL_PREFIX}")" ] || { echo "FAIL: links in the root namespace"; rc=1; }
    ip -o addr show | grep -q "$CL_NET\." && { echo "FAIL: cluster address in the root namespace"; rc=1; }
    for ((i = 1; i <= h; i++)); do
        ip netns exec "$(cl_ns $i)" tc qdisc show dev eth0 | grep -q "tbf" ||
            { echo "FAIL: host $i eth0 not shaped"; rc=1; }
        ip netns exec "$(cl_sw)" tc qdisc show dev "v$i" | grep -q "tbf" ||
            { echo "FAIL: switch port $i not shaped"; rc=1; }
    done
    local out
    out=$(timeout 60 bash -c "$(declare -f cluster_mpirun cl_addr cl_ns); CL_H=$CL_H CL_NET=$CL_NET CL_WORK=$CL_WORK CL_PREFIX=$CL_PREFIX; cluster_mpirun 2 -- sh -c 'echo \"rank \$OMPI_COMM_WORLD_RANK on \$(hostname)\"'" | sort -n -k2)
    echo "$out"
    local want="" got
    for ((i = 0; i < 2 * h; i++)); do want+="rank $i on h$((i / 2 + 1));"; done
    got=$(echo "$out" | grep '^rank' | tr '\n' ';')
    [ "$got" = "$want" ] || { echo "FAIL: ranks not placed 2 per host (want $want)"; rc=1; }
    cluster_down
    local left
    left=$(cluster_leftovers)
    [ -z "$left" ] || { echo "FAIL: left behind: $left"; rc=1; }
    [ "$rc" = 0 ] && echo "cluster check passed (H=$h, nothing left behind)"
    return $rc
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    case "${1:-}" in
    check) shift; cluster_check "$@"; exit $? ;;
    *) echo "usage: cluster.sh check H [RATE DELAY_MS]  (or source it: cluster_up / cluster_mpirun / cluster_down)" >&2; exit 2 ;;
    esac
fi
