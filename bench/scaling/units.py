#!/usr/bin/env python3
"""Per-unit exposed communication, measured vs the model (issue 14, docs/scaling.md).

usage: units.py [--md] OUT_DIR [RUN ...]   (--md: markdown tables; OUT_DIR: a bench/scaling/run.sh --out folder; RUN: names of
its rd_* run directories, default: every multi-host one)

For every inter-host collective of a step (the forward and backward all-gather and the backward
reduce-scatter of each FSDP unit, HYBRID_SHARD's replica all-reduce) it prints the time the
ranks were blocked on it (flight recorder, SHARDLM_FLIGHT_DUMP=end: t_end - t_wait of a
collective some wait completed; 0 when it completed in a hook's poll, i.e. hidden or paid
inside another wait) next to what the no-overlap model charges it alone (model.unit_collectives:
its libnbc transfer time at the link rate). Mean over the steps after the first and over the
ranks; "max rank" is the rank whose mean is the largest. The last rows compare the step's
totals: the sum of the waits, the trainer's exposed-communication figure (which also counts the
hook polls and the intra-host collectives) and the model's inter-host time.
"""
import glob
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import model  # noqa: E402

BIG = 65536  # bytes: smaller collectives (flags, norms, token counts) are not FSDP units


def rate_bits(r):
    for k, v in (("kbit", 1e3), ("mbit", 1e6), ("gbit", 1e9)):
        if r.endswith(k):
            return float(r[: -len(k)]) * v
    return float(r)


def label_step(entries, L):
    """[(phase, unit, op, wait_s)] of one step's FSDP collectives on one rank, in start order.
    All-gathers are named by position (forward: root, 0 .. L-1; backward: L-1 .. 0, the root
    stays gathered), reductions by the unit their context names."""
    out, ng = [], 0
    for e in entries:
        wait = (e["t_end"] - e["t_wait"]) if e.get("t_wait") and e.get("t_end") else 0.0
        if e["op"] == "allgather":
            if ng == 0:
                ph, u = "forward", L
            elif ng <= L:
                ph, u = "forward", ng - 1
            else:
                ph, u = "backward", 2 * L - ng
            ng += 1
            out.append((ph, u, "all-gather", wait, e["group"]))
        else:
            m = re.search(r"FSDP unit (\d+)", e["context"] or "")
            u = int(m.group(1)) if m else -1
            op = "reduce-scatter" if e["op"] == "reduce_scatter" else "all-reduce"
            out.append(("backward", u, op, wait, e["group"]))
    return out


MD = False


def row(cells, widths):
    if MD:
        return "| " + " | ".join(str(c) for c in cells) + " |"
    if cells[1] == "" and cells[2] == "":  # a summary row: the label spans the first four columns
        head = f"{cells[0]:<{sum(abs(w) for w in widths[:4]) + 3}}"
        return head + " " + " ".join(f"{c:>{w}}" for c, w in zip(cells[4:], widths[4:]))
    return " ".join(f"{c:<{-w}}" if w < 0 else f"{c:>{w}}" for c, w in zip(cells, widths))


def analyze(rd, cfg, B, T, K):
    m = re.match(r"rd_(\w+?_SHARD)_H(\d+)_n(\d+)_(\w+?)_(\d+)$", os.path.basename(rd))
    if not m:
        return None
    s, H, n, rate, delay = m.group(1), int(m.group(2)), int(m.group(3)), m.group(4), float(m.group(5))
    if H < 2:
        return None
    L = cfg["num_hidden_layers"]
    dumps = sorted(glob.glob(os.path.join(rd, "logs", "flight_rank_*.json")))
    if not dumps:
        return None
    per_rank = []  # rank -> {(phase, unit, op, group kind): [waits]}
    for f in dumps:
        d = json.load(open(f))
        steps = {}
        for e in d["entries"]:
            if e["bytes"] >= BIG and e["state"] == "done" and e["step"] >= 2:
                steps.setdefault(e["step"], []).append(e)
        acc = {}
        for st, es in steps.items():
            for ph, u, op, w, grp in label_step(es, L):
                kind = "intra" if grp.startswith("shard group") and s == "HYBRID_SHARD" else "inter"
                acc.setdefault((ph, u, op, kind), []).append(w)
        per_rank.append({k: sum(v) / len(v) for k, v in acc.items()})
    pred = {(ph, u, op): t for ph, u, op, t in
            model.unit_collectives(cfg, s, H, n, rate_bits(rate) / 8, delay / 1e3)}
    log = os.path.join(os.path.dirname(rd), f"run_{s}_H{H}_n{n}_{rate}_{m.group(5)}.log")
    exposed = None
    if os.path.exists(log):
        rows = re.findall(r"step +(\d+)/\d+ \| simulated \| [0-9.]+ ms/step \| compute [0-9.]+ ms \| exposed comm ([0-9.]+) ms", open(log).read())
        rows = [float(r[1]) for r in rows if int(r[0]) > 1]
        exposed = sum(rows) / len(rows) if rows else None
    print(f"\n{s} H={H} n={n} {rate} {m.group(5)} ms ({len(dumps)} ranks; ms per step, mean of steps 2..)")
    W = (-9, 4, -15, -6, 11, 13, 8)
    print(row(("phase", "unit", "collective", "group", "model alone", "measured wait", "max rank"), W))
    if MD:
        print("|---|---:|---|---|---:|---:|---:|")
    keys = []
    for k in per_rank[0]:
        if k not in keys:
            keys.append(k)
    tot_m = tot_p = 0.0
    res = {"keys": keys, "mean": {}, "pred": {}}
    for k in keys:
        ph, u, op, kind = k
        vals = [r.get(k, 0.0) for r in per_rank]
        mean = sum(vals) / len(vals)
        p = pred.get((ph, u, op), 0.0) if kind == "inter" else 0.0
        tot_m += mean
        tot_p += p
        res["mean"][k], res["pred"][k] = mean, p
        name = "root" if u == L else str(u)
        print(row((ph, name, op, kind, f"{1e3 * p:.1f}", f"{1e3 * mean:.1f}", f"{1e3 * max(vals):.1f}"), W))
    inter = model.inter_host_s(cfg, s, H, n, rate_bits(rate) / 8, delay / 1e3, K=K)
    print(row(("sum of the waits", "", "", "", f"{1e3 * tot_p:.1f}", f"{1e3 * tot_m:.1f}", ""), W))
    if exposed is not None:
        print(row(("trainer's exposed comm (waits + polls)", "", "", "", "", f"{exposed:.1f}", ""), W))
    print(row(("model's inter-host time (libnbc)", "", "", "", f"{1e3 * inter:.1f}", "", ""), W))
    res.update(tot_m=tot_m, tot_p=tot_p, exposed=exposed, inter=inter)
    return res


def main():
    if len(sys.argv) < 2:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        sys.exit(2)
    global MD
    if sys.argv[1] == "--md":
        MD = True
        del sys.argv[1]
    out = sys.argv[1]
    cfg = json.load(open(os.path.join(out, "config.json")))
    B, T, K = 4, 128, 1  # run.sh's workload
    runs = sys.argv[2:] or sorted(os.path.basename(p) for p in glob.glob(os.path.join(out, "rd_*")))
    for r in runs:
        analyze(os.path.join(out, r), cfg, B, T, K)


if __name__ == "__main__":
    main()
