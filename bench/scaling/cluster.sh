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
# As a command: cluster.sh check H [RATE DELAY] (default 200mbit 0): builds H hosts, checks rank placement and the
#   shaping, tears down, and verifies nothing was left behind (the CTest test).
# Latency (DELAY > 0): this project's kernels may lack sch_netem, so by default a delayed
#   cluster does not use netem but bench/scaling/delayswitch (a userspace learning switch over
#   TAP devices, in the switch namespace): each host's eth0 is a TAP whose other end is the
#   switch process (no veth, no bridge), which holds every frame DELAY ms (one-way host-to-host
#   latency DELAY, ping RTT 2 DELAY) and serializes each output port at RATE (what the host
#   receives, as the switch-side tbf does on the veth path, with the same burst); tbf at RATE
#   stays on the host's eth0 (what it sends). MTU CL_MTU (default 65000: frames as large as the veth path's GSO
#   segments, so the switch handles ~2k frames/s per Gbit/s). CL_DELAY_BY=netem uses netem on
#   the veth path instead where the kernel has it. DELAY 0: the veth path, unchanged.
#   cluster_shape switches between the two (rebuilding the links) when DELAY changes to or
#   from 0. The switch binary: $CL_SWITCH, else build/bench/delayswitch when not older than its
#   source, else compiled with cc into the cluster's work directory. After cluster_up,
#   CL_LATENCY=1 says DELAY > 0 is emulated (run.sh skips latency points otherwise), CL_MODE
#   says which links exist (veth | switch). `check H RATE DELAY` with DELAY > 0 also checks the
#   TAP ports, ping RTT (>= 2 DELAY, <= 2 DELAY + CL_RTT_SLACK_MS, default 100) and the switch's
#   clean exit on SIGTERM.
# As a command: cluster.sh measure H RATE DELAY: builds H hosts, prints ping RTT h1 -> hI,
#   iperf3 throughput h1 -> h2 and all hosts at once (hI -> hI+1), the switch's CPU time and
#   counters, the hosts' drops (tbf, TAP queue) and TCP retransmits (CL_NSTAT=1: loss detail).
# Needs root, ip, tc, unshare; exits 77 (skip) without them.
CL_ID=${CL_ID:-$$}
CL_PREFIX="slmc${CL_ID}"
CL_H=0
CL_NETEM=0
CL_WORK=""
CL_MODE=""         # links: veth (bridge) or switch (delayswitch over TAP)
CL_SWITCH_PID=""
CL_LAST_SWITCH_PID=""
CL_LATENCY=0       # 1: DELAY > 0 is emulated (set by cluster_up)
CL_DELAY_BY=${CL_DELAY_BY:-switch} # switch | netem (netem only where the kernel has it)
# Queue bound of every shaped link direction (tbf latency, the delayswitch's --queue-us), in ms
# of backlog at RATE. 100 ms: deep enough that the linear all-gather's incast (H - 1 senders
# into one host's port) drops nothing at H = 8 (with 20 ms, each host's ports dropped 20-380
# 64 KiB segments per 5 steps at 250 Mbit/s and TCP's loss recovery added 10-20% to the step;
# docs/scaling.md "Third correction"), as the lossless fabrics the model stands for (InfiniBand,
# EFA) never drop.
CL_QUEUE_MS=${CL_QUEUE_MS:-100}
CL_HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
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
    cl_switch_stop # first: its TAPs must not outlive it in a namespace being deleted
    for ((i = 1; i <= CL_H; i++)); do ip netns del "$(cl_ns $i)" 2>/dev/null; done
    ip netns del "$(cl_sw)" 2>/dev/null
    [ -n "$CL_WORK" ] && rm -rf "$CL_WORK"
    CL_H=0
    CL_WORK=""
    CL_MODE=""
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
                burst "$burst" latency "${CL_QUEUE_MS}ms"
    else
        ip netns exec "$ns" tc qdisc add dev "$dev" root tbf rate "$rate" burst "$burst" latency "${CL_QUEUE_MS}ms"
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
    local i want=veth
    cl_wants_switch "$2" && want=switch
    if [ "$want" != "$CL_MODE" ] || [ "$want" = switch ]; then
        # A change of link kind, or new switch parameters: rebuild the links (same hosts,
        # same addresses; nothing may be running on the links).
        cl_links_down
        if [ "$want" = switch ]; then cl_links_switch "$1" "$2" || return 1; else cl_links_veth || return 1; fi
    fi
    for ((i = 1; i <= CL_H; i++)); do
        if [ "$CL_MODE" = switch ]; then
            cl_shape_dev "$(cl_ns $i)" eth0 "$1" 0 || return 1 # the switch holds the delay
        else
            cl_shape_dev "$(cl_ns $i)" eth0 "$1" "$2" || return 1
            cl_shape_dev "$(cl_sw)" "v$i" "$1" "$2" || return 1
        fi
    done
}

# Whether DELAY_MS is emulated by the delaying switch: DELAY > 0, CL_DELAY_BY=switch (the
# default) and /dev/net/tun present (else the veth path, with netem where asked for and present).
cl_wants_switch() {
    awk -v d="$1" 'BEGIN { exit !(d > 0) }' && [ "$CL_DELAY_BY" = switch ] && [ "$CL_LATENCY" = 1 ]
}

# The hosts' eth0 as veth pairs to a bridge in the switch namespace (the DELAY 0 path).
cl_links_veth() {
    local i ns sw
    sw=$(cl_sw)
    ip netns exec "$sw" ip link add br0 type bridge && ip netns exec "$sw" ip link set br0 up || return 1
    for ((i = 1; i <= CL_H; i++)); do
        ns=$(cl_ns $i)
        ip link add "${CL_PREFIX}e$i" netns "$ns" type veth peer name "v$i" netns "$sw" || return 1
        ip netns exec "$ns" ip link set "${CL_PREFIX}e$i" name eth0 || return 1
        cl_host_addr "$i"
        ip netns exec "$sw" ip link set "v$i" master br0 up
    done
    CL_MODE=veth
}

cl_host_addr() { # address, link and loopback up on host i's eth0
    local ns
    ns=$(cl_ns "$1")
    ip netns exec "$ns" ip addr add "$(cl_addr "$1")/24" dev eth0
    ip netns exec "$ns" ip link set eth0 up
    ip netns exec "$ns" ip link set lo up
}

# The delayswitch binary: $CL_SWITCH, build/bench/delayswitch if not older than the source,
# else compiled into the work directory (once per cluster).
cl_switch_bin() {
    local src=$CL_HERE/delayswitch.c built=$CL_HERE/../../build/bench/delayswitch
    if [ -n "${CL_SWITCH:-}" ]; then echo "$CL_SWITCH"; return 0; fi
    if [ -x "$built" ] && ! [ "$src" -nt "$built" ]; then echo "$built"; return 0; fi
    if ! [ -x "$CL_WORK/delayswitch" ]; then
        ${CC:-cc} -std=c11 -O2 -Wall -Wextra -o "$CL_WORK/delayswitch" "$src" >&2 ||
            { echo "cluster: cannot build $src" >&2; return 1; }
    fi
    echo "$CL_WORK/delayswitch"
}

# The hosts' eth0 as TAP ports of a delayswitch in the switch namespace (the DELAY > 0 path).
cl_links_switch() { # cl_links_switch RATE DELAY_MS
    local rate=$1 d=$2 bin bits us i ports=() mtu=${CL_MTU:-65000} burst
    bin=$(cl_switch_bin) || return 1
    bits=$(tc_rate_bits "$rate") || return 1
    burst=$((bits / 8 / 250)) # as the tbf's (cl_shape_dev)
    [ "$burst" -lt 131072 ] && burst=131072
    us=$(awk -v d="$d" 'BEGIN { printf "%.0f", d * 1000 }')
    for ((i = 1; i <= CL_H; i++)); do ports+=(--port "${CL_PREFIX}t$i=/run/netns/$(cl_ns $i)"); done
    # --exit-with-parent: should this shell die without its trap, the switch and its TAPs go too.
    : > "$CL_WORK/switch.log"
    # A frame's hold time is only as exact as the switch's wake-ups, and a late wake-up bunches
    # frames: on a loaded machine (2 CPUs, load 6-10) at nice 0 or -10 frames left up to 170 ms
    # late (mean 2.7 ms at 5 ms delay) and 0.6% were dropped; at SCHED_FIFO priority 10 the mean
    # is 0.1 ms and none were (cluster.sh measure 4 250mbit 5). It sleeps between frames and
    # uses < 50% of a core at 4 x 1 Gbit/s, and the kernel's RT throttling bounds it anyway.
    # CL_SWITCH_SCHED=nice: nice -10 instead; none: as any process.
    local sched=()
    case "${CL_SWITCH_SCHED:-fifo}" in
    fifo) if chrt -f 10 true 2>/dev/null; then sched=(chrt -f 10); else sched=(nice -n -10); fi ;;
    nice) sched=(nice -n -10) ;;
    esac
    ip netns exec "$(cl_sw)" "${sched[@]}" "$bin" --delay-us "$us" --rate "$bits" --burst-bytes "$burst" \
        --queue-us $((CL_QUEUE_MS * 1000)) --exit-with-parent "${ports[@]}" \
        > "$CL_WORK/switch.log" 2>&1 &
    CL_SWITCH_PID=$!
    CL_LAST_SWITCH_PID=$CL_SWITCH_PID
    for ((i = 0; i < 200; i++)); do
        grep -q 'delayswitch: ready' "$CL_WORK/switch.log" && break
        kill -0 "$CL_SWITCH_PID" 2>/dev/null || break
        sleep 0.05
    done
    if ! grep -q 'delayswitch: ready' "$CL_WORK/switch.log"; then
        echo "cluster: delayswitch did not start:" >&2
        cat "$CL_WORK/switch.log" >&2
        cl_switch_stop
        return 1
    fi
    for ((i = 1; i <= CL_H; i++)); do
        ip netns exec "$(cl_ns $i)" ip link set "${CL_PREFIX}t$i" name eth0 mtu "$mtu" || return 1
        cl_host_addr "$i"
    done
    CL_MODE=switch
}

cl_switch_stop() { # SIGTERM, then (after 5 s) SIGKILL; its TAP devices vanish with it
    [ -n "$CL_SWITCH_PID" ] || return 0
    local i
    kill -TERM "$CL_SWITCH_PID" 2>/dev/null
    for ((i = 0; i < 100; i++)); do kill -0 "$CL_SWITCH_PID" 2>/dev/null || break; sleep 0.05; done
    kill -KILL "$CL_SWITCH_PID" 2>/dev/null
    wait "$CL_SWITCH_PID" 2>/dev/null
    CL_SWITCH_RC=$? # its exit status (when this shell started it): 0 after SIGTERM
    CL_SWITCH_PID=""
}

# Removes the links (not the hosts): the switch process, or the veth pairs and the bridge.
cl_links_down() {
    local i
    cl_switch_stop
    if [ "$CL_MODE" = veth ]; then
        for ((i = 1; i <= CL_H; i++)); do ip netns exec "$(cl_ns $i)" ip link del eth0 2>/dev/null; done
        ip netns exec "$(cl_sw)" ip link del br0 2>/dev/null
    fi
    CL_MODE=""
}

# The switch's counters and CPU time so far (SIGUSR1: it prints them to its log).
cluster_switch_stats() {
    [ -n "$CL_SWITCH_PID" ] || { echo "cluster: no delayswitch running"; return 0; }
    local n
    n=$(wc -l < "$CL_WORK/switch.log")
    kill -USR1 "$CL_SWITCH_PID"
    sleep 0.2
    tail -n +$((n + 1)) "$CL_WORK/switch.log"
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
    ip netns exec "$sw" ip link set lo up || return 1
    CL_H=$h
    for ((i = 1; i <= h; i++)); do ip netns add "$(cl_ns $i)" || return 1; done
    # netem is a kernel option (sch_netem); some VM kernels lack it. Probed on host 1's
    # loopback before any link exists (added and removed at once).
    if ip netns exec "$(cl_ns 1)" tc qdisc add dev lo root netem delay 1ms 2>/dev/null; then
        CL_NETEM=1
        ip netns exec "$(cl_ns 1)" tc qdisc del dev lo root
    else
        CL_NETEM=0
    fi
    # Latency without netem: the delayswitch over TAP devices.
    if [ "$CL_DELAY_BY" = netem ]; then
        CL_LATENCY=$CL_NETEM
    else
        [ -c /dev/net/tun ] && CL_LATENCY=1 || CL_LATENCY=0
    fi
    if [ "$delay" != 0 ] && [ "$CL_LATENCY" != 1 ]; then
        echo "cluster: no latency emulation here (CL_DELAY_BY=$CL_DELAY_BY, netem $CL_NETEM, /dev/net/tun): latency $delay ms NOT emulated (rate only)" >&2
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
    # a delayswitch of this cluster (its command line names the TAP ports slmcIDtN)
    local f
    for f in /proc/[0-9]*/cmdline; do
        tr '\0' ' ' 2>/dev/null < "$f" | grep -q -- "--port ${CL_PREFIX}t[1]=" &&
            echo "process ${f//[^0-9]/}: $(tr '\0' ' ' 2>/dev/null < "$f")"
    done
    true
}

# ping RTT from host 1 to host I (ms): "min avg max" of COUNT pings 0.2 s apart (iputils-ping).
cluster_ping() { # cluster_ping I COUNT
    ip netns exec "$(cl_ns 1)" ping -n -q -c "$2" -i 0.2 -W 5 "$(cl_addr "$1")" |
        awk -F'[/ =]+' '/^(rtt|round-trip)/ { print $6, $7, $8 }'
}

cluster_check() { # cluster_check H [RATE DELAY]
    local h=$1 rate=${2:-200mbit} delay=${3:-0} rc=0 i
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    cluster_up "$h" "$rate" "$delay" || return $?
    local n
    n=$(ip netns list | grep -c "^$CL_PREFIX")
    echo "namespaces: $n (hosts $h + switch), links: $CL_MODE"
    [ "$n" = $((h + 1)) ] || { echo "FAIL: expected $((h + 1)) namespaces"; rc=1; }
    [ -z "$(ip -o link show | grep "${CL_PREFIX}")" ] || { echo "FAIL: links in the root namespace"; rc=1; }
    ip -o addr show | grep -q "$CL_NET\." && { echo "FAIL: cluster address in the root namespace"; rc=1; }
    for ((i = 1; i <= h; i++)); do
        ip netns exec "$(cl_ns $i)" tc qdisc show dev eth0 | grep -q "tbf" ||
            { echo "FAIL: host $i eth0 not shaped"; rc=1; }
        if [ "$CL_MODE" = switch ]; then
            ip netns exec "$(cl_ns $i)" ip -d link show eth0 | grep -q "tun type tap" ||
                { echo "FAIL: host $i eth0 is not a TAP port of the switch"; rc=1; }
        else
            ip netns exec "$(cl_sw)" tc qdisc show dev "v$i" | grep -q "tbf" ||
                { echo "FAIL: switch port $i not shaped"; rc=1; }
        fi
    done
    if [ "$CL_MODE" = switch ]; then
        kill -0 "$CL_SWITCH_PID" 2>/dev/null || { echo "FAIL: delayswitch not running"; rc=1; }
        [ "$(ip netns exec "$(cl_sw)" ip -o link show | grep -vc ': lo:')" = 0 ] ||
            { echo "FAIL: interfaces other than lo in the switch namespace"; rc=1; }
    fi
    if awk -v d="$delay" 'BEGIN { exit !(d > 0) }'; then
        # RTT h1 -> hI crosses the switch twice: >= 2 DELAY strictly (every frame is held DELAY),
        # and above by a generous load-robust bound (the minimum of 10: a stall must hit all).
        local rtt mn hi=${CL_RTT_SLACK_MS:-100}
        command -v ping > /dev/null || { echo "FAIL: no ping (iputils-ping, scripts/setup_test.sh)"; rc=1; }
        for ((i = 2; i <= h; i++)); do
            rtt=$(cluster_ping "$i" 10)
            mn=${rtt%% *}
            echo "ping h1 -> h$i: rtt min/avg/max ${rtt// //} ms (configured one-way delay $delay ms)"
            awk -v m="$mn" -v d="$delay" -v s="$hi" 'BEGIN { exit !(m != "" && m >= 2 * d && m <= 2 * d + s) }' ||
                { echo "FAIL: RTT min '$mn' ms outside [2 x $delay, 2 x $delay + $hi] ms"; rc=1; }
        done
    fi
    local out
    out=$(timeout 60 bash -c "$(declare -f cluster_mpirun cl_addr cl_ns); CL_H=$CL_H CL_NET=$CL_NET CL_WORK=$CL_WORK CL_PREFIX=$CL_PREFIX; cluster_mpirun 2 -- sh -c 'echo \"rank \$OMPI_COMM_WORLD_RANK on \$(hostname)\"'" | sort -n -k2)
    echo "$out"
    local want="" got
    for ((i = 0; i < 2 * h; i++)); do want+="rank $i on h$((i / 2 + 1));"; done
    got=$(echo "$out" | grep '^rank' | tr '\n' ';')
    [ "$got" = "$want" ] || { echo "FAIL: ranks not placed 2 per host (want $want)"; rc=1; }
    if [ "$CL_MODE" = switch ]; then # a clean exit on SIGTERM, with its counters
        cl_switch_stop
        grep 'delayswitch: exit:' "$CL_WORK/switch.log"
        [ "$CL_SWITCH_RC" = 0 ] && grep -q 'delayswitch: exit:' "$CL_WORK/switch.log" ||
            { echo "FAIL: delayswitch did not exit cleanly on SIGTERM (status $CL_SWITCH_RC)"; cat "$CL_WORK/switch.log"; rc=1; }
    fi
    cluster_down
    local left
    left=$(cluster_leftovers)
    [ -z "$left" ] || { echo "FAIL: left behind: $left"; rc=1; }
    [ "$rc" = 0 ] && echo "cluster check passed (H=$h, links $rate ${delay} ms, nothing left behind)"
    return $rc
}

# The switch's CPU time so far, in seconds (utime + stime of /proc/PID/stat).
cl_switch_cpu() {
    [ -n "$CL_SWITCH_PID" ] || { echo 0; return; }
    awk -v hz="$(getconf CLK_TCK)" '{ sub(/^.*\) /, ""); printf "%.3f\n", ($12 + $13) / hz }' \
        "/proc/$CL_SWITCH_PID/stat"
}

# iperf3 TCP transfers for SECS seconds, all at once: "SRC DST" pairs of host numbers; prints
# each pair's received Mbit/s and, with the switch, its CPU use over the transfer.
cl_iperf() { # cl_iperf SECS SRC:DST...
    local secs=$1 p s d pids=() c0 c1 t0 t1 k=0
    shift
    for p in "$@"; do
        d=${p#*:}
        ip netns exec "$(cl_ns "$d")" timeout $((secs + 20)) iperf3 -s -1 -p $((5201 + k)) > /dev/null 2>&1 &
        pids+=($!)
        k=$((k + 1))
    done
    sleep 0.5
    c0=$(cl_switch_cpu)
    t0=$(date +%s.%N)
    k=0
    for p in "$@"; do
        s=${p%:*} d=${p#*:}
        ip netns exec "$(cl_ns "$s")" timeout $((secs + 20)) iperf3 -f m -c "$(cl_addr "$d")" -p $((5201 + k)) \
            -t "$secs" > "$CL_WORK/iperf_$k.txt" 2>&1 &
        k=$((k + 1))
    done
    wait "${pids[@]}" 2>/dev/null
    for ((k = 0; k < $#; k++)); do while ! grep -q 'iperf Done\|error' "$CL_WORK/iperf_$k.txt" 2>/dev/null; do sleep 0.1; done; done
    c1=$(cl_switch_cpu)
    t1=$(date +%s.%N)
    k=0
    for p in "$@"; do
        echo "  h${p%:*} -> h${p#*:}: $(awk '/receiver/ { print $(NF-2), $(NF-1) }' "$CL_WORK/iperf_$k.txt")"
        k=$((k + 1))
    done
    [ "$CL_MODE" = switch ] &&
        awk -v a="$c0" -v b="$c1" -v t0="$t0" -v t1="$t1" 'BEGIN { printf "  delayswitch CPU: %.2f s in %.1f s (%.0f%% of one core)\n", b - a, t1 - t0, 100 * (b - a) / (t1 - t0) }'
    return 0
}

cluster_measure() { # cluster_measure H RATE DELAY: RTT, throughput, switch CPU (a benchmark)
    local h=$1 rate=$2 delay=$3 i pairs=() secs=${CL_IPERF_SECS:-5}
    command -v ping > /dev/null && command -v iperf3 > /dev/null ||
        { echo "SKIP: needs ping and iperf3 (scripts/setup_test.sh)"; return 77; }
    cluster_up "$h" "$rate" "$delay" || return $?
    echo "cluster: H=$h rate $rate one-way delay $delay ms, links $CL_MODE, MTU $(ip netns exec "$(cl_ns 1)" cat /sys/class/net/eth0/mtu)"
    for ((i = 2; i <= h; i++)); do echo "  ping h1 -> h$i: rtt min avg max $(cluster_ping "$i" 20) ms"; done
    echo " one stream h1 -> h2, $secs s:"
    cl_iperf "$secs" 1:2
    if [ "$h" -gt 2 ]; then
        for ((i = 1; i <= h; i++)); do pairs+=("$i:$((i % h + 1))"); done
        echo " all hosts at once (hI -> hI+1), $secs s:"
        cl_iperf "$secs" "${pairs[@]}"
    fi
    for ((i = 1; i <= h; i++)); do # drops on the hosts' side: the tbf, the TAP's own queue
        echo "  h$i eth0: tbf $(ip netns exec "$(cl_ns $i)" tc -s qdisc show dev eth0 | grep -o 'dropped [0-9]*' | head -1), tx_dropped $(ip netns exec "$(cl_ns $i)" cat /sys/class/net/eth0/statistics/tx_dropped), TCP retransmits $(ip netns exec "$(cl_ns $i)" awk '/^Tcp:/ { if (h) print $13; h = 1 }' /proc/net/snmp)"
    done
    [ -n "${CL_NSTAT:-}" ] && for ((i = 1; i <= h; i++)); do echo "  h$i: $(ip netns exec "$(cl_ns $i)" nstat -as 2>/dev/null | awk '$1 ~ /Retrans|Loss|Drop|Prune|Collapse|OFO|Timeout|Recovery|SACK|TLP|Spurious/ { printf "%s=%s ", $1, $2 }')"; done
    [ "$CL_MODE" = switch ] && cluster_switch_stats | grep -E 'dropped|cpu'
    cluster_down
    return 0
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    case "${1:-}" in
    check) shift; cluster_check "$@"; exit $? ;;
    measure) shift; cluster_measure "$@"; exit $? ;;
    *) echo "usage: cluster.sh check H [RATE DELAY_MS] | measure H RATE DELAY_MS  (or source it: cluster_up / cluster_mpirun / cluster_down)" >&2; exit 2 ;;
    esac
fi
