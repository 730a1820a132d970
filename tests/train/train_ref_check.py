"""PyTorch side of tests/train/test_train_ref.c: replays shardlm's training steps with the
independent reference model (tests/reference/llama_ref.py, float64) and torch.optim.AdamW, and
compares the per-step losses and the final weights.

usage: train_ref_check.py DUMP.slt CONFIG.json
DUMP holds init/<hf name> (initial weights), final/<hf name> (shardlm's weights after the run),
tokens [steps*K*B, T+1] (i32), losses [steps] (f64) and meta {B, T, K, steps, warmup, lr, min_lr,
weight_decay, grad_clip, beta1, beta2, eps, compute}. Exit status 0 when losses match to rel 1e-4 and
every final tensor to 1e-3 norm-wise.

compute "bf16" (shardlm's --compute-dtype bf16): the reference is float32 under
torch.autocast("cpu", dtype=torch.bfloat16), PyTorch's own bf16 mixed precision. The two are not
the same function: autocast also rounds every matmul's OUTPUT to bf16 (shardlm keeps fp32
outputs), so each of the ~8 matmuls a token's loss passes through per block (q, k, v, scores,
probabilities x v, o, gate/up, down; 2 blocks here, plus lm_head) may differ by up to 2^-9
relative. Through the network that moves the logits by at most a few times 2^-9 of their size and
the loss (log-sum-exp minus the target logit: 2-Lipschitz in the largest logit change) by about
2 x 17 x 2^-9 x max|logit| ~ 0.07 x max|logit| in the worst case, far less in practice as the
errors are independent and mostly cancel. The bound used: every step's loss within rel 2e-2 (the
logits here stay below ~2 in size), and final weights within rel 5e-2 norm-wise (10 AdamW steps
at lr 1e-2 amplify gradient differences through the sign-like update). That bound alone would
also pass a run that ignored bf16, so step 1 (same weights on both sides, before any update) must
also be closer to autocast's loss than to the float64 model's: rounding the weights and
activations to bf16 moves the loss by ~1e-4 here, 1000 times the fp32 accumulation noise.
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
    bf16 = meta.get("compute", "fp32") == "bf16"
    loss_tol, w_tol = (2e-2, 5e-2) if bf16 else (1e-4, 1e-3)
    model = R.build_model(cfg, dtype=torch.float32 if bf16 else torch.float64)
    R.load_flat_weights(model, tensors, prefix="init/")
    opt = R.make_adamw(model, lr=meta["lr"], betas=(meta["beta1"], meta["beta2"]),
                       eps=meta["eps"], weight_decay=meta["weight_decay"])
    toks = tensors["tokens"].astype(np.int64)
    n_total = K * B * T
    if bf16:  # step 1's loss of the float64 model on the same weights and batches
        m64 = R.build_model(cfg, dtype=torch.float64)
        R.load_flat_weights(m64, tensors, prefix="init/")
        with torch.no_grad():
            f64 = sum(float(R.forward(m64, toks[k * B:(k + 1) * B, :-1],
                                      toks[k * B:(k + 1) * B, 1:])[1]) for k in range(K)) / K
    ok = True
    for s in range(steps):
        opt.zero_grad(set_to_none=False)
        lsum = 0.0
        for k in range(K):
            w = toks[(s * K + k) * B:(s * K + k + 1) * B]
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                _, loss = R.forward(model, w[:, :-1], w[:, 1:])
            loss = loss.float() if bf16 else loss
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
        ok &= rel <= loss_tol
        if bf16 and s == 0:
            near = abs(got - ref_loss) < abs(got - f64)
            print(f"step 1: |shardlm - autocast| {abs(got - ref_loss):.2e}, "
                  f"|shardlm - float64| {abs(got - f64):.2e} (must be the smaller: {near})")
            ok &= near
    worst = 0.0
    for name, p in R.named_weights(model).items():
        e = R.rel_err(tensors["final/" + name], p)
        worst = max(worst, e)
        if e > w_tol:
            print(f"FAIL {name}: rel err {e:.3e}")
            ok = False
    print(f"final weights: worst norm-wise rel err {worst:.3e} (limit {w_tol:g})")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
