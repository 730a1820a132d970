#!/usr/bin/env python3
"""The communication model of docs/scaling.md, as a function (issue 14).

step time = compute + local + the step's inter-host collectives (no overlap with compute: a
rendezvous transfer moves only while the ranks are inside MPI; HYBRID's replica all-reduces,
all in flight at the optimizer's wait, simulated together by flowsim.py; FULL_SHARD's latency
counted where it is on the critical path; docs/scaling.md "Emulated cluster" for the
measurements behind each).

compute: the model's FLOPs per unit (the same count as `shardlm train --simulate-compute`,
  6 N + 12 L C T per token) / rate.
local:   the intra-host part (shared memory copies and reductions, hook polling, the optimizer on
  the shards); the bench takes it from the same configuration at H = 1 (measured), so only the
  inter-host part is predicted.
inter-host, per host link of `rate` bytes/s each way and one-way latency `alpha` (the libnbc
variants charge each message round RNDV_TRIPS = 3 alpha: rendezvous request, acknowledgement,
data):
  "ring" (docs/scaling.md as written, NCCL-like ring algorithms, per-rank bandwidth = link / n):
      all-gather / reduce-scatter of X over S ranks: (S-1)/S X / (rate / n)
      all-reduce of X over R ranks:                   2 (R-1)/R X / (rate / n)
  "libnbc" (Open MPI 4.1's non-blocking collectives, which fsdp/ calls; ompi/mca/coll/libnbc):
      iallgather: linear (every rank sends its shard to every other): a host's link carries
          n (H-1)/H X each way -> n (H-1)/H X / rate + alpha
      ireduce_scatter: binomial reduce of the full X to rank 0, then a linear scatter: log2(H)
          cross-host rounds of X on one link each, then (H-1)/H X out of host 1
          -> (log2 H + (H-1)/H) X / rate + (log2 H + 1) alpha
      iallreduce in place (HYBRID's replica all-reduce): binomial reduce + binomial broadcast
          (in-place requests always take it); the n replica groups all root on host 1, so each
          of the 2 log2 H rounds moves n shards of X / n through one link
          -> 2 log2(H) X / rate + 2 log2(H) alpha   (one all-reduce alone: "libnbc-serial")
      HYBRID's replica all-reduces of a step pipeline ("libnbc", the correction of 250 Mbit/s,
          docs/scaling.md): fsdp/ starts one per unit at its post-backward hook and waits for
          none of them before the optimizer step (slm_fsdp_sync_grads), so all of them are in
          flight when the rank blocks; while it waits, Open MPI progresses every outstanding
          schedule, and the reduce phase of unit k+1 (into host 1: log2 H X through its ingress)
          runs while the broadcast phase of unit k (out of host 1: log2 H X through its egress)
          does, the two directions of a full-duplex link. Host 1's ingress carries log2 H X of
          every unit back to back; its egress starts after the first unit's reduce and ends
          after the last unit's broadcast:
          -> log2(H) (sum_u X_u + max(X_first, X_last)) / rate + 2 log2(H) alpha
          ("libnbc-pipelined") instead of the serial 2 log2(H) sum_u X_u / rate. Exact at
          H = 2 only: the binomial broadcast sends to all of a rank's children at once, and
          units meet in the middle of the tree, so "libnbc" (the model) runs the schedules
          through flowsim.py instead.
      FULL_SHARD's latency ("libnbc"): 3 trips for the root's forward all-gather (started at
          its wait), 2 for every prefetched all-gather (request across during the previous
          unit's compute, acknowledged at the hook's poll), (log2 H + 1) rounds of 3 for the
          last two reduce-scatters (side by side at the optimizer's wait); the other
          reduce-scatters' handshakes overlap the all-gather transfers they are paid inside. No progress during compute (the
          ranks sleep outside MPI; what the kernel's socket buffers carry meanwhile is not
          counted). FULL_SHARD's reduce-scatters get no such credit: the next unit's all-gather
          wait queues behind them on the same TCP connection (first in, first out), so their
          bytes are paid inside the backward's gather waits, unit by unit (the per-unit check,
          units.py, shows it).
"""
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import flowsim  # noqa: E402


def unit_numels(cfg):
    C, F, V, L = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"], cfg["num_hidden_layers"]
    H, KV = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    D = C // H
    block = 2 * C * C + 2 * C * KV * D + 3 * C * F + 2 * C
    root = V * C + C + (0 if cfg.get("tie_word_embeddings", False) else V * C)
    return [block] * L, root


def flops_per_token(cfg, T):
    C, F, V, L = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"], cfg["num_hidden_layers"]
    H, KV = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    D = C // H
    n_mm = L * (2 * C * C + 2 * C * KV * D + 3 * C * F) + V * C
    return 6 * n_mm + 12 * L * C * T


# One-way latencies per message round of libnbc's schedules: every FSDP unit is far above the
# TCP BTL's eager limit (64 KiB), so each message goes by Open MPI's rendezvous protocol (ob1):
# the request to send, the receiver's acknowledgement, then the data: 3 one-way trips.
RNDV_TRIPS = 3


def inter_host_s(cfg, strategy, H, n, rate_bytes, alpha_s, p=4, g=4, K=1, algo="libnbc"):
    """Seconds of inter-host communication per optimizer step (K micro-batches). alpha_s: the
    one-way host-to-host latency; the libnbc variants charge RNDV_TRIPS of it per round."""
    if H <= 1:
        return 0.0
    one_way = alpha_s
    if algo != "ring":
        alpha_s *= RNDV_TRIPS
    blocks, root = unit_numels(cfg)
    lg = math.ceil(math.log2(H))  # binomial rounds: ceil(log2 H) (3 at H = 5), log2 H at 2^k
    t = 0.0
    if strategy == "FULL_SHARD":
        N = H * n
        gathers = [root] + blocks * 2  # root gathered once per micro-batch, blocks twice
        for u in gathers:
            X = u * p
            if algo == "ring":
                t += (N - 1) / N * X / (rate_bytes / n) + (N - 1) * alpha_s
            elif algo == "libnbc":
                t += n * (H - 1) / H * X / rate_bytes
            else:
                t += n * (H - 1) / H * X / rate_bytes + alpha_s
        for u in [root] + blocks:
            X = u * g
            if algo == "ring":
                t += (N - 1) / N * X / (rate_bytes / n) + (N - 1) * alpha_s
            elif algo == "libnbc":
                t += (lg + (H - 1) / H) * X / rate_bytes
            else:  # libnbc-serial and -pipelined
                t += (lg + (H - 1) / H) * X / rate_bytes + (lg + 1) * alpha_s
        if algo == "libnbc":
            # Latency on the step's critical path (fourth correction, docs/scaling.md): the
            # root's forward all-gather is started at its wait (request, acknowledgement, data:
            # RNDV_TRIPS one-way trips); every other all-gather was prefetched a unit earlier,
            # its request crossed during that unit's compute and was acknowledged at the hook's
            # poll before the wait, so the wait pays 2 trips; the blocks' reduce-scatters move
            # inside later all-gathers' waits, their handshakes overlapping those transfers,
            # except the last two (unit 0's and the root's), which the optimizer waits for with
            # nothing else in flight: their log2 H + 1 rounds of RNDV_TRIPS, side by side.
            t += RNDV_TRIPS * one_way + 2 * one_way * 2 * len(blocks) + (lg + 1) * alpha_s
    elif strategy == "HYBRID_SHARD" and algo == "libnbc":
        # The replica all-reduces, all in flight at the optimizer's wait: flowsim.py runs
        # libnbc's binomial schedules over the links (third correction, docs/scaling.md).
        order = blocks[::-1] + [root]  # started in backward order: L-1, ..., 0, then the root
        t = flowsim.hybrid_allreduce_s([u * g for u in order], H, n, rate_bytes, alpha_s)
    elif strategy == "HYBRID_SHARD":  # shard group = host: only the replica all-reduce crosses
        order = blocks[::-1] + [root]  # started in backward order: L-1, ..., 0, then the root
        for u in order:
            Xs = u * g / n
            if algo == "ring":
                t += 2 * (H - 1) / H * Xs / (rate_bytes / n) + 2 * (H - 1) * alpha_s
            elif algo == "libnbc-serial":
                t += 2 * lg * n * Xs / rate_bytes + 2 * lg * alpha_s
            else:  # pipelined: reduce of unit k+1 into host 1 while unit k's broadcast leaves it
                t += lg * n * Xs / rate_bytes + 2 * lg * alpha_s
        if algo == "libnbc-pipelined":
            t += lg * max(order[0], order[-1]) * g / rate_bytes
    else:
        raise ValueError(strategy)
    return K * t


def unit_collectives(cfg, strategy, H, n, rate_bytes, alpha_s, p=4, g=4):
    """The inter-host collectives of one micro-batch in the order fsdp/ starts them, each with
    its own libnbc time alone (what the no-overlap assumption says it exposes):
    [(phase, unit, op, seconds)]; unit L is the root (embedding + final norm + lm_head), as in
    src/fsdp/. HYBRID_SHARD's all-reduces are listed one by one ("libnbc-serial"); their
    pipelined sum is inter_host_s(..., algo="libnbc")."""
    blocks, root = unit_numels(cfg)
    L = len(blocks)
    if H <= 1:
        return []
    alpha_s *= RNDV_TRIPS
    lg = math.ceil(math.log2(H))  # binomial rounds: ceil(log2 H) (3 at H = 5), log2 H at 2^k
    size = [*blocks, root]
    out = []
    if strategy == "FULL_SHARD":
        ag = lambda u: n * (H - 1) / H * size[u] * p / rate_bytes + alpha_s
        rs = lambda u: (lg + (H - 1) / H) * size[u] * g / rate_bytes + (lg + 1) * alpha_s
        out += [("forward", L, "all-gather", ag(L))]
        out += [("forward", u, "all-gather", ag(u)) for u in range(L)]
        for u in range(L - 1, -1, -1):
            out += [("backward", u, "all-gather", ag(u)), ("backward", u, "reduce-scatter", rs(u))]
        out += [("backward", L, "reduce-scatter", rs(L))]
    elif strategy == "HYBRID_SHARD":
        ar = lambda u: 2 * lg * size[u] * g / rate_bytes + 2 * lg * alpha_s
        out += [("backward", u, "all-reduce", ar(u)) for u in range(L - 1, -1, -1)]
        out += [("backward", L, "all-reduce", ar(L))]
    return out


def predict(cfg, strategy, H, n, rate_bits, delay_ms, gflops, B, T, K, local_s, algo="libnbc"):
    compute = flops_per_token(cfg, T) * B * T * K / (gflops * 1e9)
    comm = inter_host_s(cfg, strategy, H, n, rate_bits / 8, delay_ms / 1e3, K=K, algo=algo)
    return compute + local_s + comm, compute, comm


if __name__ == "__main__":
    # model.py CONFIG STRATEGY H N RATE_BITS DELAY_MS GFLOPS B T K LOCAL_S [ALGO]
    a = sys.argv[1:]
    cfg = json.load(open(a[0]))
    r = predict(cfg, a[1], int(a[2]), int(a[3]), float(a[4]), float(a[5]), float(a[6]), int(a[7]),
                int(a[8]), int(a[9]), float(a[10]), a[11] if len(a) > 11 else "libnbc")
    print("%.6f %.6f %.6f" % r)
