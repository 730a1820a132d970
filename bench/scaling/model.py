#!/usr/bin/env python3
"""The communication model of docs/scaling.md, as a function (issue 14).

step time = compute + local + sum over the step's inter-host collectives of their time
(no overlap: docs/scaling.md measured exposed communication ~= the bare transfer time).

compute: the model's FLOPs per unit (the same count as `shardlm train --simulate-compute`,
  6 N + 12 L C T per token) / rate.
local:   the intra-host part (shared memory copies and reductions, hook polling, the optimizer on
  the shards); the bench takes it from the same configuration at H = 1 (measured), so only the
  inter-host part is predicted.
inter-host, per host link of `rate` bytes/s each way and one-way latency `alpha`:
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
          -> 2 log2(H) X / rate + 2 log2(H) alpha
"""
import json
import math
import sys


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


def inter_host_s(cfg, strategy, H, n, rate_bytes, alpha_s, p=4, g=4, K=1, algo="libnbc"):
    """Seconds of inter-host communication per optimizer step (K micro-batches)."""
    if H <= 1:
        return 0.0
    blocks, root = unit_numels(cfg)
    lg = math.log2(H)
    t = 0.0
    if strategy == "FULL_SHARD":
        N = H * n
        gathers = [root] + blocks * 2  # root gathered once per micro-batch, blocks twice
        for u in gathers:
            X = u * p
            if algo == "ring":
                t += (N - 1) / N * X / (rate_bytes / n) + (N - 1) * alpha_s
            else:
                t += n * (H - 1) / H * X / rate_bytes + alpha_s
        for u in [root] + blocks:
            X = u * g
            if algo == "ring":
                t += (N - 1) / N * X / (rate_bytes / n) + (N - 1) * alpha_s
            else:
                t += (lg + (H - 1) / H) * X / rate_bytes + (lg + 1) * alpha_s
    elif strategy == "HYBRID_SHARD":  # shard group = host: only the replica all-reduce crosses
        for u in [root] + blocks:
            Xs = u * g / n
            if algo == "ring":
                t += 2 * (H - 1) / H * Xs / (rate_bytes / n) + 2 * (H - 1) * alpha_s
            else:
                t += 2 * lg * n * Xs / rate_bytes + 2 * lg * alpha_s
    else:
        raise ValueError(strategy)
    return K * t


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
