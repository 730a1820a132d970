#!/usr/bin/env python3
"""docs/scaling.md's 16 nodes x 8 GPUs prediction (issue 14), every assumption a named constant.

Step time = compute + communication, with communication not hidden ("no overlap", what the
emulated cluster measured for shardlm: exposed time ~= bare transfer time) or 70% hidden.
Collectives are NCCL-style topology-aware rings: a ring of N ranks over nodes of 8 enters each
node once per channel, and with one channel per NIC the node's inter-node link carries
(N-1)/N X per all-gather / reduce-scatter of X (not 8 ranks' worth: the other 7 hops are NVLink),
and 2 (R-1)/R X_node for an all-reduce of the X_node bytes its 8 ranks hold. A collective runs at
its slowest hop: time = bytes on that hop / its bus bandwidth.
"""
import sys

MODELS = {  # Llama-2 (Touvron et al. 2023): layers, hidden, intermediate, heads, kv heads, vocab
    "7B": (32, 4096, 11008, 32, 32, 32000),
    "13B": (40, 5120, 13824, 40, 40, 32000),
    "70B": (80, 8192, 28672, 64, 8, 32000),
}
GPUS = {  # dense bf16 peak FLOP/s, NVLink all-gather / reduce-scatter bus bandwidth (B/s), memory
    "A100": (312e12, 230e9, 80e9),
    "H100": (989e12, 370e9, 80e9),
}
MFU = 0.50            # model FLOPs utilisation of the compute (both GPUs)
NET_EFF = 0.80        # NCCL bus bandwidth / line rate between nodes
TOKENS = 2 * 4096     # tokens per rank per optimizer step (2 sequences of 4096)
NODES, GPN = 16, 8
HIDDEN = 0.70         # the overlap variant: share of communication hidden behind compute


def params(m):
    L, C, F, H, KV, V = MODELS[m]
    D = C // H
    block = 2 * C * C + 2 * C * KV * D + 3 * C * F + 2 * C
    return L * block + 2 * V * C + C, L * block + V * C  # all, matmul (lm_head counted)


def step(m, gpu, gbps, strategy, nodes, g_bytes, p_bytes=2):
    P, Pmm = params(m)
    L, C = MODELS[m][0], MODELS[m][1]
    peak, nvl, mem = GPUS[gpu]
    compute = (6 * Pmm + 12 * L * C * 4096) * TOKENS / (MFU * peak)
    net = gbps * 1e9 / 8 * NET_EFF  # per node, bytes/s
    N = nodes * GPN
    state = 16 * P / (N if strategy == "FULL" else GPN)  # fp32 master + grad + m + v per rank
    if nodes == 1 or strategy == "HYBRID":
        S = GPN  # in-node FULL_SHARD over NVLink
        comm = (S - 1) / S * (2 * p_bytes + g_bytes) * P / nvl
        if nodes > 1:
            comm += 2 * (nodes - 1) / nodes * g_bytes * P / net  # replica all-reduce per node
    else:
        comm = (N - 1) / N * (2 * p_bytes + g_bytes) * P / min(net, nvl)
    return compute, comm, state <= mem * 0.8  # leave 20% for activations and buffers


def main():
    out = []
    out.append("| model | GPU | inter-node | strategy | reduce | compute s | comm s (16 nodes) | "
               "eff. no overlap | eff. 70% hidden |")
    out.append("|---|---|---:|---|---|---:|---:|---:|---:|")
    for m in MODELS:
        for gpu in GPUS:
            for gbps in (400, 3200):
                for s in ("FULL", "HYBRID"):
                    for g, gname in ((2, "bf16"), (4, "fp32")):
                        c1, m1, _ = step(m, gpu, gbps, s, 1, g)
                        c, k, fits = step(m, gpu, gbps, s, NODES, g)
                        if not fits:
                            out.append(f"| {m} | {gpu} | {gbps} Gb/s | {s}_SHARD | {gname} | - | - | "
                                       f"does not fit (16 P / 8 > 80% of 80 GB) | - |")
                            continue
                        e0 = (c1 + m1) / (c + k)
                        e7 = (c1 + (1 - HIDDEN) * m1) / (c + (1 - HIDDEN) * k)
                        out.append(f"| {m} | {gpu} | {gbps} Gb/s | {s}_SHARD | {gname} | {c:.2f} | "
                                   f"{k:.2f} | {100*e0:.0f}% | {100*e7:.0f}% |")
    print("\n".join(out))


if __name__ == "__main__":
    main()
