#!/usr/bin/env python3
"""Hand-written run directories for the report's layout and formatting checks (issue 20 item
19): every value below is chosen here, not produced by shardlm.

  long     7-digit steps (1,234,000..1,234,567 of 2,000,000, resumed at 1,234,000), stopped early
           (the end event's steps < planned), a flat learning rate (1.1e-3 at every step), no
           validation at all, a flat MFU, attempts.json with nulls, a start time that is close to
           a float32 (1796161536.125) and a float32-noisy min_lr (3.0000001e-05)
  running  no end event (the status "running, or ended without an end event"); steps logged by
           an older trainer with MFU up to 150 % (a start-up peak measured low)
  evald    validation every 10 steps plus a final validation that only the end event holds

Usage: report_fixtures.py DIR   (writes DIR/long, DIR/running, DIR/evald)
"""
import json
import math
import os
import sys

T0 = 1796161536.125  # within 18 s of a float32 (spacing 128 at 1.8e9)


def start(steps, world=2, start_step=0, eval_batches=None):
    e = {"event": "start", "model": "cfg.json", "n_params": 1234567, "batch": 4, "seq": 128,
         "grad_accum": 2, "steps": steps, "warmup": 10, "lr": 0.000300000014,
         "min_lr": 3.0000001e-05, "weight_decay": 0.100000001, "grad_clip": 1, "seed": 1337,
         "threads": 1, "peak_gflops": 50, "flops_per_token": 781250, "schema": 2,
         "world": world, "start_step": start_step, "attempt": 0, "time": T0,
         "sharding": "full_shard", "data": "/data/shakespeare", "layers": 2, "hidden": 64,
         "vocab": 300, "hosts": ["node1"] * world}
    return e


def step(s, loss, lr=1.1e-3, val=None, t=0.0, world=1, tps=16000):
    # 16000 tok/s x 781250 FLOPs per token / (50 GFLOP/s x world): MFU 25% / world
    return {"event": "step", "step": s, "loss": loss, "lr": lr, "grad_norm": 0.5,
            "tokens_per_s": tps, "mfu": tps * 781250 / (50e9 * world), "ms_per_step": 128, "val_loss": val,
            "tokens": s * 2048, "elapsed_s": t, "data_ms": 1, "comm_ms": 10, "ckpt_ms": 0,
            "time": T0 + t}


def write(path, events):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        for e in events:
            f.write(json.dumps(e) + "\n")


def main():
    root = sys.argv[1]
    # long
    ev = [start(2000000, start_step=1234000)]
    ev.append({"event": "restart", "step": 1234000, "attempt": 2,
               "from": "/runs/long/checkpoints/step_01234000"})
    for i, s in enumerate(range(1234001, 1234568)):
        ev.append(step(s, 2.5 + 0.1 * math.cos(i / 7.0), t=0.128 * (i + 1), world=2))
        if s % 100 == 0:
            ev.append({"event": "ranks", "step": s, "rss_bytes": [3e8, 3.1e8],
                       "peak_rss_bytes": [3.2e8, 3.3e8], "cpu_util": [1, 1],
                       "step_ms": [128, 129]})
    ev.append({"event": "end", "steps": 1234567, "loss": 2.5, "val_loss": None,
               "tokens_per_s": 16000, "mfu": 0.25, "interrupted": False,
               "nonfinite_skips": 0, "empty_skips": 0, "time": T0 + 80})
    write(f"{root}/long/metrics.jsonl", ev)
    attempts = {"attempts": [
        {"attempt": 1, "start": 1796100000.0, "end": 1796100060.5, "world": 2,
         "hosts": "node6,node7", "result": "hang", "reason": "no heartbeat progress",
         "exit_status": None, "exit_signal": 9, "culprit_rank": 1, "culprit_host": "node7",
         "flight_verdict": None, "error": "", "start_step": 0, "steps_reached": 1234000,
         "steps_lost": 0},
        {"attempt": 2, "start": 1796100070.0, "end": 1796100100.0, "world": 2,
         "hosts": "node6,node8", "result": "success", "reason": "", "exit_status": 0,
         "exit_signal": None, "culprit_rank": None, "culprit_host": None,
         "flight_verdict": "", "error": None, "start_step": 1234000,
         "steps_reached": 1234567, "steps_lost": 0}]}
    with open(f"{root}/long/attempts.json", "w") as f:
        json.dump(attempts, f)
    with open(f"{root}/long/config.json", "w") as f:
        json.dump({"vocab_size": 300, "hidden_size": 64, "rms_norm_eps": 1e-05,
                   "rope_theta": 10000.0, "initializer_range": 0.0199999996}, f)
    # running
    ev = [start(100, world=1)]
    for s in range(1, 41):
        # an older trainer's MFU above 100 %: 16000 .. 96000 tok/s against a peak measured low
        ev.append(step(s, 5.0 - math.log(s), lr=1e-3 * min(1, s / 10), t=0.1 * s,
                       tps=16000 * (1 + s / 8)))
    write(f"{root}/running/metrics.jsonl", ev)
    # evald: validation at 10, 20, 30 (3.9, 3.8, 3.7); stopped at 35 (--max-minutes), its final
    # validation 3.65 only in the end event
    ev = [start(100, world=1)]
    for s in range(1, 36):
        v = {10: 3.9, 20: 3.8, 30: 3.7}.get(s)
        ev.append(step(s, 5.0 - math.log(s) / 2, lr=1e-3, val=v, t=0.1 * s))
        if v is not None:
            ev.append({"event": "eval", "step": s, "val_loss": v, "batches": 20})
    ev.append({"event": "end", "steps": 35, "loss": 3.2, "val_loss": 3.65,
               "tokens_per_s": 16000, "mfu": 0.25, "interrupted": False,
               "nonfinite_skips": 0, "empty_skips": 0, "time": T0 + 4})
    write(f"{root}/evald/metrics.jsonl", ev)


if __name__ == "__main__":
    main()
