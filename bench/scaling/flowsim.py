#!/usr/bin/env python3
"""A flow-level simulation of concurrent libnbc schedules over shaped host links (issue 14,
docs/scaling.md "Third correction").

Used by model.py for HYBRID_SHARD's replica all-reduces: at the optimizer step every unit's
all-reduce is in flight at once and Open MPI progresses all of them, so their rounds overlap
on the links in ways no closed form captures (the binomial broadcast sends to all of a
rank's children at once, so they share its link; a unit's reduce competes with the previous
unit's broadcast on the ranks in the middle of the tree).

What is simulated (no fitted constant; only the algorithms and the links):
- Ranks r = 0 .. H n - 1 on hosts r // n (run.sh places n consecutive ranks per host).
- Every host has one link to the switch, `rate` bytes/s in each direction (egress: what it
  sends, ingress: what it receives); messages between ranks of one host cost nothing here
  (shared memory; the bench's H = 1 term holds them).
- A message moves once both ranks have posted it (the rendezvous protocol of every FSDP-sized
  message: request, acknowledgement, data), and one at a time per ordered pair of ranks in the
  order they were matched (Open MPI's TCP BTL has one connection per pair and sends a
  connection's fragments in order).
- The messages moving at a time share the links max-min fairly (TCP's long-run share at a
  common bottleneck): progressive filling over the egress and ingress of every host.
- A schedule is a list of rounds per rank (libnbc's NBC_Sched_* with barriers); a round is
  posted when the previous one completed; local reductions take no time.
- Latency: each round of messages costs `rounds_alpha` seconds before its data moves (the
  caller passes RNDV_TRIPS one-way latencies).

binomial_allreduce_rounds(p) reproduces ompi/mca/coll/libnbc/nbc_iallreduce.c's
allred_sched_diss (the algorithm chosen for in-place requests): a binomial reduce into vrank 0
(round r: vrank % 2^r == 0 receives from vrank + 2^(r-1), else sends to vrank - 2^(r-1) and
leaves), then the broadcast: a rank receives from vrank - 2^r (for the r with 2^r <= vrank <
2^(r+1)), posted in the same round as its reduce send, and then sends to every vrank + 2^r
with vrank < 2^r at once (vrank 0: to 1, 2, 4, ...).
"""
import math


def binomial_allreduce_rounds(p):
    """Per group rank v: a list of rounds, each a list of ('send' | 'recv', peer, tag); tag
    'up' (reduce) or 'down' (broadcast) names the message together with the pair."""
    maxr = math.ceil(math.log2(p)) if p > 1 else 0
    out = []
    for v in range(p):
        rounds = []
        sent_up = None
        for r in range(1, maxr + 1):
            if v % (1 << r) == 0:
                peer = v + (1 << (r - 1))
                if peer < p:
                    rounds.append([("recv", peer, "up")])
            else:
                sent_up = ("send", v - (1 << (r - 1)), "up")
                break
        first = [sent_up] if sent_up else []
        if v != 0:
            for r in range(maxr):
                if (1 << r) <= v < (1 << (r + 1)):
                    first.append(("recv", v - (1 << r), "down"))
        if first:
            rounds.append(first)
        sends = []
        for r in range(maxr):
            if v + (1 << r) < p and (v < (1 << r) or v == 0):
                sends.append(("send", v + (1 << r), "down"))
        if sends:
            rounds.append(sends)
        out.append(rounds)
    return out


def _maxmin(flows, cap):
    """flows: {fid: (src_host, dst_host)}; cap: per-link capacity. Returns {fid: rate}."""
    rate = {}
    left = dict(flows)
    used = {}
    while left:
        load = {}
        for s, d in left.values():
            load[("e", s)] = load.get(("e", s), 0) + 1
            load[("i", d)] = load.get(("i", d), 0) + 1
        share, link = min(((cap - used.get(k, 0.0)) / c, k) for k, c in load.items())
        for f, (s, d) in list(left.items()):
            if ("e", s) == link or ("i", d) == link:
                rate[f] = share
                used[("e", s)] = used.get(("e", s), 0.0) + share
                used[("i", d)] = used.get(("i", d), 0.0) + share
                del left[f]
    return rate


def simulate(colls, host_of, rate, round_alpha=0.0):
    """colls: a list of (group, rounds, nbytes) in start order: group maps group rank -> world
    rank, rounds is binomial_allreduce_rounds(len(group)) (or any schedule of that form),
    nbytes the message size. All are posted at t = 0 (the optimizer's wait). Returns the time
    at which the last completes, in seconds. ValueError for a rate that is not a positive finite
    number, a negative or non-finite message size or latency."""
    if not (isinstance(rate, (int, float)) and math.isfinite(rate) and rate > 0):
        raise ValueError(f"flowsim: link rate {rate!r} bytes/s: expected a positive finite number")
    if not (math.isfinite(round_alpha) and round_alpha >= 0):
        raise ValueError(f"flowsim: round latency {round_alpha!r} s: expected >= 0")
    for c, (group, _, nbytes) in enumerate(colls):
        if not (math.isfinite(nbytes) and nbytes >= 0):
            raise ValueError(f"flowsim: collective {c}: message size {nbytes!r} bytes: expected >= 0")
    # state per (coll, group rank): index of the current round, and its open messages
    cur = {}
    msgs = {}  # (c, src_w, dst_w, tag) -> dict(posted_s, posted_r, left, t_ready)
    order = []  # matched messages in match order
    t = 0.0
    done_ranks = 0
    total_ranks = sum(len(g) for g, _, _ in colls)

    def post(c, v, now):
        nonlocal done_ranks
        group, all_rounds, nbytes = colls[c]
        rounds = all_rounds[v]
        while cur[(c, v)] < len(rounds):
            rnd = rounds[cur[(c, v)]]
            pend = 0
            for kind, peer, tag in rnd:
                a, b = (group[v], group[peer]) if kind == "send" else (group[peer], group[v])
                k = (c, a, b, tag)
                m = msgs.setdefault(k, {"s": False, "r": False, "left": float(nbytes), "done": False})
                m["s" if kind == "send" else "r"] = True
                if m["s"] and m["r"] and "t" not in m:
                    m["t"] = now + round_alpha
                    order.append(k)
                if not m["done"]:
                    pend += 1
            if pend:
                return
            cur[(c, v)] += 1
        if cur[(c, v)] == len(rounds) and not colls_done.get((c, v)):
            colls_done[(c, v)] = True
            done_ranks += 1

    colls_done = {}
    for c, (group, _, _) in enumerate(colls):
        for v in range(len(group)):
            cur[(c, v)] = 0
    for c, (group, _, _) in enumerate(colls):
        for v in range(len(group)):
            post(c, v, 0.0)
    while done_ranks < total_ranks:
        # the moving flow of every ordered pair: its first matched, unfinished, ready message
        heads, pending_t = {}, []
        for k in order:
            m = msgs[k]
            if m["done"]:
                continue
            pair = (k[1], k[2])
            if pair in heads:
                continue
            if host_of(k[1]) == host_of(k[2]):
                heads[pair] = k  # local: completes at once
            elif m["t"] <= t + 1e-15:
                heads[pair] = k
            else:
                pending_t.append(m["t"])
        local = [k for k in heads.values() if host_of(k[1]) == host_of(k[2])]
        if local:
            for k in local:
                msgs[k]["left"] = 0.0
        else:
            flows = {k: (host_of(k[1]), host_of(k[2])) for k in heads.values()}
            if not flows and not pending_t:
                raise RuntimeError("flowsim: deadlock (no message can move)")
            r = _maxmin(flows, rate) if flows else {}
            dt = min([msgs[k]["left"] / r[k] for k in flows] + [x - t for x in pending_t if x > t])
            for k in flows:
                msgs[k]["left"] -= r[k] * dt
            t += dt
        finished = [k for k in heads.values() if msgs[k]["left"] <= 1e-6]
        for k in finished:
            msgs[k]["done"] = True
        if finished:  # done messages never move again: drop them from the scan (same order)
            order[:] = [k for k in order if not msgs[k]["done"]]
        for k in finished:
            group = colls[k[0]][0]
            for v in range(len(group)):
                if group[v] in (k[1], k[2]):
                    post(k[0], v, t)
    return t


def hybrid_allreduce_s(unit_bytes, H, n, rate, alpha_s=0.0):
    """HYBRID_SHARD (shard group = host, n ranks each): every unit's replica all-reduce of
    nbytes / n per rank in each of the n replica groups, all in flight at once, in fsdp/'s start
    order (`unit_bytes` in that order). Seconds until the last completes. ValueError for H or n
    not a positive integer (and simulate()'s checks of rate, sizes and latency)."""
    for name, v in (("H", H), ("n", n)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"flowsim: {name} = {v!r}: expected a positive integer")
    if H <= 1:
        return 0.0
    rounds = binomial_allreduce_rounds(H)
    colls = []
    for nb in unit_bytes:
        for j in range(n):
            colls.append(([j + n * g for g in range(H)], rounds, nb / n))
    return simulate(colls, lambda r: r // n, rate, alpha_s)


if __name__ == "__main__":
    import sys
    X = 3.2e6
    for H in (2, 4, 8, 16):
        one = hybrid_allreduce_s([X], H, 1, 31.25e6)
        five = hybrid_allreduce_s([X] * 4 + [4.2e6], H, 1, 31.25e6)
        print(f"H={H}: one all-reduce {one * 1e3:.1f} ms ({one * 31.25e6 / X:.2f} X/rate), "
              f"five {five * 1e3:.1f} ms", file=sys.stdout)
