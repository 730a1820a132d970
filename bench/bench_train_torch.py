"""The old PyTorch side of bench/bench_train.sh, now only its labelled `--debian-torch` extra row
(Debian's torch 1.13 on .venv/bin/python; the comparison is bench/bench_torch2.py on PyTorch 2.x):
training steps of the reference Llama
(tests/reference/llama_ref.py, float32) with torch.optim.AdamW and global-norm clipping, on
uniform random tokens, the same shapes and thread count as the shardlm run.

usage: bench_train_torch.py CONFIG.json B T STEPS THREADS
Prints `tokens_per_s X` (mean over the steps after the first) and `ms_per_step X`.
"""
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "reference"))
import llama_ref as R  # noqa: E402


def main():
    cfg_path, B, T, steps, threads = sys.argv[1], *map(int, sys.argv[2:6])
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    cfg = R.load_config(cfg_path)
    model = R.build_model(cfg, dtype=torch.float32)
    opt = R.make_adamw(model, lr=3e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    rng = np.random.default_rng(0)
    times = []
    for _ in range(steps):
        w = rng.integers(0, cfg["vocab_size"], size=(B, T + 1))
        t0 = time.perf_counter()
        R.train_step(model, opt, w[:, :-1], w[:, 1:], max_grad_norm=1.0)
        times.append(time.perf_counter() - t0)
    dt = sum(times[1:]) / max(1, len(times) - 1) if len(times) > 1 else times[0]
    print(f"tokens_per_s {B * T / dt:.1f}")
    print(f"ms_per_step {dt * 1e3:.1f}")


if __name__ == "__main__":
    main()
