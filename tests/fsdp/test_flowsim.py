#!/usr/bin/env python3
"""bench/scaling/flowsim.py (issue 14's third model correction) against values derived by hand
from Open MPI's libnbc algorithm (ompi/mca/coll/libnbc/nbc_iallreduce.c, allred_sched_diss) and
from max-min fairness, not from the simulator's own output.

usage: test_flowsim.py SOURCE_DIR
"""
import math
import os
import sys

sys.path.insert(0, os.path.join(sys.argv[1], "bench", "scaling"))
import flowsim  # noqa: E402
import model  # noqa: E402

fails = 0


def check(cond, what):
    global fails
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        fails += 1


def close(a, b, what, rel=1e-9):
    check(abs(a - b) <= rel * max(abs(a), abs(b), 1e-30), f"{what}: {a:.9g} vs {b:.9g}")


def edges(p):
    """(src, dst, tag) of every message of the schedule, from the senders' side, with the
    receivers' side checked to post the same set."""
    rounds = flowsim.binomial_allreduce_rounds(p)
    sends, recvs = set(), set()
    for v, rs in enumerate(rounds):
        for rnd in rs:
            for kind, peer, tag in rnd:
                (sends if kind == "send" else recvs).add((v, peer, tag) if kind == "send" else (peer, v, tag))
    check(sends == recvs, f"p = {p}: every send has its receive")
    return sends


# 1. The tree of allred_sched_diss: reduce round r, vrank % 2^r == 0 receives from
#    vrank + 2^(r-1); broadcast: vrank v in [2^r, 2^(r+1)) receives from v - 2^r.
up8 = {(1, 0), (3, 2), (5, 4), (7, 6), (2, 0), (6, 4), (4, 0)}
down8 = {(0, 1), (0, 2), (0, 4), (1, 3), (1, 5), (2, 6), (3, 7)}
e = edges(8)
check({(a, b) for a, b, t in e if t == "up"} == up8, "p = 8: binomial reduce edges")
check({(a, b) for a, b, t in e if t == "down"} == down8, "p = 8: binomial broadcast edges")
e = edges(5)  # not a power of two: 4 sends up to 0 in round 3; 0 sends to 4 at the end
check({(a, b) for a, b, t in e if t == "up"} == {(1, 0), (3, 2), (2, 0), (4, 0)}, "p = 5: reduce edges")
check({(a, b) for a, b, t in e if t == "down"} == {(0, 1), (0, 2), (0, 4), (1, 3)}, "p = 5: broadcast edges")
r8 = flowsim.binomial_allreduce_rounds(8)
check(r8[0][-1] == [("send", 1, "down"), ("send", 2, "down"), ("send", 4, "down")],
      "p = 8: vrank 0 broadcasts to 1, 2, 4 in one round (at once)")
check(r8[4][-1] == [("send", 0, "up"), ("recv", 0, "down")],
      "p = 8: vrank 4's reduce send and broadcast receive share a round")

# 2. Max-min fairness: 3 flows out of host 0 (to 1, 2, 3) and one 3 -> 1: host 0's egress is
#    shared three ways (1/3 each); host 1's ingress then has 1 - 1/3 left for 3 -> 1.
r = flowsim._maxmin({"a": (0, 1), "b": (0, 2), "c": (0, 3), "d": (3, 1)}, 1.0)
close(r["a"], 1 / 3, "max-min: 0 -> 1")
close(r["c"], 1 / 3, "max-min: 0 -> 3")
close(r["d"], 2 / 3, "max-min: 3 -> 1 takes what host 1's ingress has left")

# 3. One all-reduce of X alone at H hosts, one rank each: the reduce is log2 H rounds of X,
#    each on links of their own; the broadcast's vrank 0 sends log2 H copies at once (its
#    egress shared: log2 H X), then vrank 1 sends log2 H - 1 at once, ... 1: the broadcast is
#    sum_k k = log2 H (log2 H + 1) / 2 X. At rate 1 and X = 1:
for H in (2, 4, 8, 16):
    lg = math.log2(H)
    close(flowsim.hybrid_allreduce_s([1.0], H, 1, 1.0), lg + lg * (lg + 1) / 2, f"one all-reduce, H = {H}")

# 4. n = 2 ranks per host: two replica groups of X / 2 each, both rooted on host 1, so every
#    link carries both halves: the same time as n = 1.
close(flowsim.hybrid_allreduce_s([1.0], 8, 2, 1.0), 3 + 6, "one all-reduce, H = 8, n = 2")

# 5. H = 2, a step's all-reduces all in flight (fsdp/'s order): one connection per direction,
#    in order, so host 2 -> 1 carries every unit's reduce back to back while 1 -> 2 carries each
#    broadcast once its reduce is in: a two-stage pipeline, (sum X + max X) / rate (the
#    closed-form "pipelined" of the second correction, exact at H = 2 when the largest unit is
#    first or last, as fsdp/'s root is).
xs = [3.0, 3.0, 3.0, 3.0, 4.0]
close(flowsim.hybrid_allreduce_s(xs, 2, 1, 1.0), sum(xs) + 4.0, "H = 2 pipeline (sum X + max X)")
xs = [3.0, 5.0, 3.0, 3.0, 4.0]  # the largest in the middle: max X, not max(X_first, X_last)
close(flowsim.hybrid_allreduce_s(xs, 2, 1, 1.0), sum(xs) + 5.0, "H = 2 pipeline, largest unit inside")

# 6. Latency: every message waits the round latency after both ends posted it. H = 2, one
#    all-reduce: reduce (alpha + X) then broadcast (alpha + X).
close(flowsim.hybrid_allreduce_s([1.0], 2, 1, 1.0, 0.25), 2.5, "H = 2 with latency 0.25")

# 7. model.py uses it for HYBRID_SHARD: its libnbc figure at H = 8 equals flowsim's on the
#    units' gradient bytes (fp32), and the closed forms stay available.
cfg = {"vocab_size": 2048, "hidden_size": 256, "intermediate_size": 688, "num_hidden_layers": 4,
       "num_attention_heads": 4, "num_key_value_heads": 4, "tie_word_embeddings": False}
blocks, root = model.unit_numels(cfg)
order = [4 * u for u in blocks[::-1] + [root]]
close(model.inter_host_s(cfg, "HYBRID_SHARD", 8, 1, 31.25e6, 0.0),
      flowsim.hybrid_allreduce_s(order, 8, 1, 31.25e6), "model.py HYBRID_SHARD H = 8 = flowsim")
check(model.inter_host_s(cfg, "HYBRID_SHARD", 8, 1, 31.25e6, 0.0, algo="libnbc-pipelined")
      < model.inter_host_s(cfg, "HYBRID_SHARD", 8, 1, 31.25e6, 0.0)
      < model.inter_host_s(cfg, "HYBRID_SHARD", 8, 1, 31.25e6, 0.0, algo="libnbc-serial"),
      "H = 8: closed-form pipelined < flowsim < serial")

# 8. FULL_SHARD's latency on the critical path (fourth correction): the root's forward
#    all-gather 3 one-way trips, the 2 L prefetched all-gathers 2 each, the last two
#    reduce-scatters side by side (log2 H + 1) rounds of 3: at H = 2, L = 4: 3 + 16 + 6 = 25,
#    at H = 8: 3 + 16 + 12 = 31 one-way latencies.
for H, trips in ((2, 25), (8, 31)):
    d = (model.inter_host_s(cfg, "FULL_SHARD", H, 1, 31.25e6, 0.005)
         - model.inter_host_s(cfg, "FULL_SHARD", H, 1, 31.25e6, 0.0))
    close(d, trips * 0.005, f"FULL_SHARD latency at H = {H}: {trips} one-way trips")

print(f"{fails} failure(s)")
sys.exit(1 if fails else 0)
