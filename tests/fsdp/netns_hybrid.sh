#!/usr/bin/env bash
# Two "hosts" on one machine: two network namespaces (each with its own hostname through a UTS
# namespace) joined by veth pairs on a bridge, Open MPI over TCP only (no shared memory), ranks
# 0-1 on host h1 and 2-3 on h2. mpirun starts its daemons through an rsh agent that enters the
# namespace instead of ssh. Runs the HYBRID_SHARD (G = 2) equivalence test, so each shard group
# is one host and the replica all-reduce crosses the virtual network.
# Usage: netns_hybrid.sh MPIEXEC TEST_BINARY. Skips (exit 77) without root / ip netns / unshare.
set -u
MPIEXEC=$1 BIN=$2
command -v ip >/dev/null && command -v unshare >/dev/null || { echo "SKIP: no ip/unshare"; exit 77; }
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root"; exit 77; }
id=$$ net="10.$((100 + id % 100)).$(( (id / 100) % 250 ))"
br="slmbr$id" ns1="slmh1_$id" ns2="slmh2_$id" work=$(mktemp -d)
cleanup() {
    ip netns del "$ns1" 2>/dev/null; ip netns del "$ns2" 2>/dev/null
    ip link del "slmv1_$id" 2>/dev/null; ip link del "slmv2_$id" 2>/dev/null
    ip link del "$br" 2>/dev/null; rm -rf "$work"
}
trap cleanup EXIT
ip netns add "$ns1" 2>/dev/null || { echo "SKIP: cannot create network namespaces"; exit 77; }
ip netns add "$ns2" || exit 1
ip link add "$br" type bridge && ip addr add "$net.254/24" dev "$br" && ip link set "$br" up || exit 1
i=0
for ns in "$ns1" "$ns2"; do
    i=$((i + 1))
    ip link add "slmv${i}_$id" type veth peer name eth0 netns "$ns" || exit 1
    ip link set "slmv${i}_$id" master "$br" up
    ip netns exec "$ns" ip addr add "$net.$i/24" dev eth0
    ip netns exec "$ns" ip link set eth0 up
    ip netns exec "$ns" ip link set lo up
done
cat > "$work/agent.sh" <<AGENT
#!/bin/sh
# rsh agent: "agent HOST command..." runs the command inside HOST's namespace.
host=\$1; shift
case "\$host" in
  $net.1) ns=$ns1; hn=h1 ;;
  $net.2) ns=$ns2; hn=h2 ;;
  *) echo "agent: unknown host \$host" >&2; exit 1 ;;
esac
exec ip netns exec "\$ns" unshare --uts /bin/sh -c "hostname \$hn; \$*"
AGENT
chmod +x "$work/agent.sh"
common=(--host "$net.1:2,$net.2:2" -np 4 --mca routed direct --mca plm_rsh_agent "$work/agent.sh"
        --mca btl tcp,self --mca btl_tcp_if_include "$net.0/24" --mca oob_tcp_if_include "$net.0/24"
        -x OMP_NUM_THREADS=1)
timeout 60 "$MPIEXEC" "${common[@]}" sh -c "hostname > $work/host.\$OMPI_COMM_WORLD_RANK" \
    2>/dev/null || { echo "FAIL: mpirun across the namespaces failed"; exit 1; }
where=$(cat "$work"/host.0 "$work"/host.1 "$work"/host.2 "$work"/host.3 | tr '\n' ' ')
echo "ranks 0-3 on: $where"
[ "$where" = "h1 h1 h2 h2 " ] || { echo "FAIL: ranks not placed on h1, h1, h2, h2"; exit 1; }
timeout 120 "$MPIEXEC" "${common[@]}" "$BIN" --sharding HYBRID_SHARD --shard-group-size 2 2>&1 \
    | grep -v setpgid
rc=${PIPESTATUS[0]}
[ "$rc" = 0 ] && echo "netns test passed" || echo "FAIL: equivalence test over TCP exited $rc"
exit "$rc"
