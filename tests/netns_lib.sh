# Several "hosts" on one machine for the multi-host tests and benchmarks: H network namespaces,
# each joined by a veth pair (eth0 inside) to a bridge in the machine's own namespace, which
# holds NET.254 so mpirun, `shardlm launch` and servers started there reach every host; host i
# (1-based) is NET.i/24, its loopback up. Every command started on a host gets the host's own
# hostname (h1, h2, ...) through a fresh UTS namespace (unshare --uts), so gethostname() tells
# the hosts apart. Open MPI starts its daemons through an rsh agent that enters the host's
# namespace instead of ssh, and runs over TCP on the virtual network only (no shared memory).
# Source it (bash), after tests/lib.sh where the caller uses it (teardown then joins
# slm_on_exit), else it installs its own EXIT trap. Gives:
#   slm_netns_up H         builds hosts 1..H; exits 77 (skip) without root / ip / unshare / netns
#                          support, 1 on another failure. Sets SLM_NET (the /24's first three
#                          octets), SLM_NETNS (array, host i's namespace at index i-1),
#                          SLM_NET_AGENT (the rsh agent), SLM_NET_MPI (array: the mpirun options
#                          for the agent and TCP on the virtual network)
#   slm_netns_hosts SLOTS [N]  prints Open MPI's host list "NET.1:SLOTS,NET.2:SLOTS,..." of the
#                          first N hosts (default: all)
#   slm_netns_exec I CMD...  runs CMD on host I (its namespace and hostname)
#   slm_netns_down         stops what still runs in the hosts (by pid: `ip netns pids`), removes
#                          the namespaces, links and the agent; idempotent; run on EXIT (also
#                          after SIGINT / SIGTERM / SIGHUP, which this library turns into exit
#                          once the command running in the foreground returns)
#   slm_netns_leftovers    prints any namespace / link of this library's names still present
SLM_NET_ID=$$
SLM_NET_TAG="slmn${SLM_NET_ID}"
SLM_NET_H=0
SLM_NET_DIR=""
SLM_NETNS=()
SLM_NET_MPI=()

slm_netns_requirements_() {
    command -v ip > /dev/null && command -v unshare > /dev/null || { echo "SKIP: no ip/unshare"; return 77; }
    [ "$(id -u)" = 0 ] || { echo "SKIP: needs root"; return 77; }
}
# A 10.x.y.0/24 that no interface of this namespace uses yet (10.100-149: bench/scaling/cluster.sh
# uses 10.150-249).
slm_netns_pick_net_() {
    local k a b
    for k in $(seq 0 49); do
        a=$((100 + (SLM_NET_ID + k) % 50)) b=$(((SLM_NET_ID / 50 + 7 * k) % 250))
        if ! ip -o -4 addr show | grep -q " 10\.$a\.$b\." && ! ip -4 route show | grep -q "^10\.$a\.$b\."; then
            echo "10.$a.$b"
            return 0
        fi
    done
    return 1
}
slm_netns_up() {
    local h=$1 i ns
    slm_netns_requirements_ || return $?
    SLM_NET=$(slm_netns_pick_net_) || { echo "no free 10.x.y.0/24 for the hosts"; return 1; }
    if declare -F slm_on_exit > /dev/null; then
        slm_on_exit slm_netns_down
    else
        trap slm_netns_down EXIT
    fi
    trap 'exit 130' INT
    trap 'exit 143' TERM
    trap 'exit 129' HUP
    SLM_NET_H=$h
    SLM_NET_DIR=$(mktemp -d "${TMPDIR:-/tmp}/slm_netns.XXXXXX")
    ns="${SLM_NET_TAG}h1"
    if ! ip netns add "$ns" 2> /dev/null; then
        echo "SKIP: cannot create network namespaces"
        return 77
    fi
    SLM_NETNS=("$ns")
    for i in $(seq 2 "$h"); do
        ns="${SLM_NET_TAG}h$i"
        ip netns add "$ns" || return 1
        SLM_NETNS+=("$ns")
    done
    ip link add "${SLM_NET_TAG}b" type bridge && ip addr add "$SLM_NET.254/24" dev "${SLM_NET_TAG}b" &&
        ip link set "${SLM_NET_TAG}b" up || return 1
    for i in $(seq 1 "$h"); do
        ns=${SLM_NETNS[$((i - 1))]}
        ip link add "${SLM_NET_TAG}v$i" type veth peer name eth0 netns "$ns" || return 1
        ip link set "${SLM_NET_TAG}v$i" master "${SLM_NET_TAG}b" up || return 1
        ip netns exec "$ns" ip addr add "$SLM_NET.$i/24" dev eth0 || return 1
        ip netns exec "$ns" ip link set eth0 up || return 1
        ip netns exec "$ns" ip link set lo up || return 1
    done
    SLM_NET_AGENT=$SLM_NET_DIR/agent.sh
    {
        echo '#!/bin/sh'
        echo '# rsh agent: "agent HOST command..." runs the command in HOST'"'"'s namespace, hostname hI.'
        echo 'host=$1; shift'
        echo 'case "$host" in'
        for i in $(seq 1 "$h"); do
            echo "  $SLM_NET.$i) ns=${SLM_NETNS[$((i - 1))]}; hn=h$i ;;"
        done
        echo '  *) echo "agent: unknown host $host" >&2; exit 1 ;;'
        echo 'esac'
        echo 'exec ip netns exec "$ns" unshare --uts /bin/sh -c "hostname $hn; $*"'
    } > "$SLM_NET_AGENT"
    chmod +x "$SLM_NET_AGENT"
    SLM_NET_MPI=(--mca routed direct --mca plm_rsh_agent "$SLM_NET_AGENT" --mca btl tcp,self
                 --mca btl_tcp_if_include "$SLM_NET.0/24" --mca oob_tcp_if_include "$SLM_NET.0/24")
}
slm_netns_hosts() {
    local i out="" sep=""
    for i in $(seq 1 "${2:-$SLM_NET_H}"); do
        out+="$sep$SLM_NET.$i:$1"
        sep=","
    done
    echo "$out"
}
slm_netns_exec() {
    local i=$1
    shift
    ip netns exec "${SLM_NETNS[$((i - 1))]}" unshare --uts /bin/sh -c 'hostname "$0"; exec "$@"' "h$i" "$@"
}
slm_netns_down() {
    local ns pids i
    [ "$SLM_NET_H" -gt 0 ] || return 0
    for ns in "${SLM_NETNS[@]}"; do
        pids=$(ip netns pids "$ns" 2> /dev/null || true)
        [ -z "$pids" ] && continue
        kill -TERM $pids 2> /dev/null || true
        for i in $(seq 1 50); do
            pids=$(ip netns pids "$ns" 2> /dev/null || true)
            [ -z "$pids" ] && break
            sleep 0.1
        done
        [ -n "$pids" ] && kill -KILL $pids 2> /dev/null || true
    done
    for ns in "${SLM_NETNS[@]}"; do ip netns del "$ns" 2> /dev/null || true; done
    for i in $(seq 1 "$SLM_NET_H"); do ip link del "${SLM_NET_TAG}v$i" 2> /dev/null || true; done
    ip link del "${SLM_NET_TAG}b" 2> /dev/null || true
    [ -n "$SLM_NET_DIR" ] && rm -rf "$SLM_NET_DIR"
    SLM_NET_H=0
}
slm_netns_leftovers() {
    { ip netns list 2> /dev/null; ip -o link show 2> /dev/null; } | grep -F "$SLM_NET_TAG" || true
}
