"""Times one training step (forward + backward, float32) of the PyTorch reference.
Usage: bench_ref.py CONFIG_JSON [B=8] [T=256] [steps=5] [threads=2]"""
import sys
import time

import numpy as np
import torch

import llama_ref as ref


def main():
    cfg = ref.load_config(sys.argv[1])
    args = sys.argv[2:] + ["8", "256", "5", "2"][len(sys.argv) - 2 :]
    B, T, steps, threads = (int(x) for x in args[:4])
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = ref.build_model(cfg, dtype=torch.float32)
    rng = np.random.default_rng(0)
    tok = torch.as_tensor(rng.integers(0, cfg["vocab_size"], (B, T)), dtype=torch.long)
    tgt = torch.as_tensor(rng.integers(0, cfg["vocab_size"], (B, T)), dtype=torch.long)
    best = cpu_best = 1e30
    for s in range(steps + 1):
        c0 = time.process_time()
        t0 = time.perf_counter()
        model.zero_grad(set_to_none=False)
        _, loss = model(tok, tgt)
        loss.backward()
        dt = time.perf_counter() - t0
        cpu = time.process_time() - c0
        if s > 0:
            best = min(best, dt)
            cpu_best = min(cpu_best, cpu)
    print(f"torch {torch.__version__} threads={threads} B={B} T={T}: {best * 1e3:.1f} ms/step, "
          f"{B * T / best:.0f} tok/s, CPU time {cpu_best * 1e3:.1f} ms/step")


if __name__ == "__main__":
    main()
