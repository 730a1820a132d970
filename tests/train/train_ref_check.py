"""PyTorch side of tests/train/test_train_ref.c: replays shardlm's training steps with the
independent reference model (tests/reference/llama_ref.py, float64) and torch.optim.AdamW, and
compares the per-step losses and the final weights.

usage: train_ref_check.py DUMP.slt CONFIG.json
DUMP holds init/<hf name> (initial weights), final/<hf name> (shardlm's weights after the run),
tokens [steps*K*B, T+1] (i32), losses [steps] (f64) and meta {B, T, K, steps, warmup, lr, min_lr,
weight_decay, grad_clip, beta1, beta2, eps}. Exit status 0 when losses match to rel 1e-4 and every
final tensor to 1e-3 norm-wise.
"""
import math
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reference"))
import llama_ref as R  # noqa: E402


def lr_at(step, warmup, total, peak, floor):
    # The schedule documented in src/optim/optim.h / adamw.c, written out independently.
    if warmup > 0 and step < warmup:
        return peak * (step + 1) / warmup
    if step >= total:
        return floor
    prog = (step - warmup) / (total - warmup)
    return floor + 0.5 * (peak - floor) * (1 + math.cos(math.pi * prog))


def main():
    torch.set_num_threads(2)
    tensors, meta = R.read_tensors(sys.argv[1])
    cfg = R.load_config(sys.argv[2])
    B, T, K, steps = meta["B"], meta["T"], meta["K"], meta["steps"]
    model = R.build_model(cfg, dtype=torch.float64)
    R.load_flat_weights(model, tensors, prefix="init/")
    opt = R.make_adamw(model, lr=meta["lr"], betas=(meta["beta1"], meta["beta2"]),
                       eps=meta["eps"], weight_decay=meta["weight_decay"])
    toks = tensors["tokens"].astype(np.int64)
    n_total = K * B * T
    ok = True
    for s in range(steps):
        opt.zero_grad(set_to_none=False)
        lsum = 0.0
        for k in range(K):
            w = toks[(s * K + k) * B:(s * K + k + 1) * B]
            _, loss = R.forward(model, w[:, :-1], w[:, 1:])
            (loss * (B * T / n_total)).backward()
            lsum += float(loss) * B * T
        ref_loss = lsum / n_total
        if meta["grad_clip"] > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), meta["grad_clip"])
        lr = lr_at(s, meta["warmup"], steps, meta["lr"], meta["min_lr"])
        for g in opt.param_groups:
            g["lr"] = lr
        opt.step()
        got = float(tensors["losses"][s])
        rel = abs(got - ref_loss) / abs(ref_loss)
        print(f"step {s + 1}: loss shardlm {got:.7f} torch {ref_loss:.7f} rel {rel:.2e} lr {lr:.3e}")
        ok &= rel <= 1e-4
    worst = 0.0
    for name, p in R.named_weights(model).items():
        e = R.rel_err(tensors["final/" + name], p)
        worst = max(worst, e)
        if e > 1e-3:
            print(f"FAIL {name}: rel err {e:.3e}")
            ok = False
    print(f"final weights: worst norm-wise rel err {worst:.3e} (limit 1e-3)")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
