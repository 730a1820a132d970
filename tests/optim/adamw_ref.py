"""Independent reference for tests/optim/test_optim.c: torch.optim.AdamW, the LR schedule formula
and torch.nn.utils.clip_grad_norm_.

usage: adamw_ref.py adamw IN OUT | clip IN OUT
adamw IN: int64 n, K, n_ranges; float32 beta1, beta2, eps, wd; n_ranges x int64 (begin, end, decay);
          float32 lr[K]; float32 p0[n]; float32 grads[K, n]
      OUT: float32 p[n], m[n], v[n] after K steps (decayed gaps between ranges, as optim.h states).
clip IN:  int64 n_a, n_b; float32 max_norm; float32 a[n_a], b[n_b]
      OUT: float64 total_norm; float32 a[n_a], b[n_b] after clip_grad_norm_.
"""
import sys

import numpy as np
import torch


def adamw(inp, out):
    raw = open(inp, "rb").read()
    off = 0
    n, K, nr = np.frombuffer(raw, np.int64, 3, off)
    off += 24
    b1, b2, eps, wd = [float(x) for x in np.frombuffer(raw, np.float32, 4, off)]
    off += 16
    rng = np.frombuffer(raw, np.int64, 3 * nr, off).reshape(nr, 3)
    off += 24 * nr
    lrs = np.frombuffer(raw, np.float32, K, off)
    off += 4 * K
    p0 = np.frombuffer(raw, np.float32, n, off)
    off += 4 * n
    grads = np.frombuffer(raw, np.float32, K * n, off).reshape(K, n)
    # Split [0, n) into segments: ranges (sorted) with their flag, gaps decayed.
    segs = []
    pos = 0
    for b, e, d in sorted(rng.tolist()):
        if b > pos:
            segs.append((pos, b, True))
        segs.append((b, e, bool(d)))
        pos = e
    if pos < n:
        segs.append((pos, n, True))
    params = [torch.nn.Parameter(torch.from_numpy(p0[b:e].copy())) for b, e, _ in segs]
    dec = [p for p, s in zip(params, segs) if s[2]]
    nodec = [p for p, s in zip(params, segs) if not s[2]]
    groups = []
    if dec:
        groups.append({"params": dec, "weight_decay": wd})
    if nodec:
        groups.append({"params": nodec, "weight_decay": 0.0})
    opt = torch.optim.AdamW(groups, lr=1.0, betas=(b1, b2), eps=eps)
    for k in range(K):
        for p, (b, e, _) in zip(params, segs):
            p.grad = torch.from_numpy(grads[k, b:e].copy())
        for g in opt.param_groups:
            g["lr"] = float(lrs[k])
        opt.step()
    P = torch.cat([p.detach() for p in params]).numpy()
    M = torch.cat([opt.state[p]["exp_avg"] for p in params]).numpy()
    V = torch.cat([opt.state[p]["exp_avg_sq"] for p in params]).numpy()
    with open(out, "wb") as f:
        f.write(P.astype(np.float32).tobytes())
        f.write(M.astype(np.float32).tobytes())
        f.write(V.astype(np.float32).tobytes())


def clip(inp, out):
    raw = open(inp, "rb").read()
    na, nb = np.frombuffer(raw, np.int64, 2, 0)
    max_norm = float(np.frombuffer(raw, np.float32, 1, 16)[0])
    a = np.frombuffer(raw, np.float32, na, 20).copy()
    b = np.frombuffer(raw, np.float32, nb, 20 + 4 * na).copy()
    pa = torch.nn.Parameter(torch.zeros(na))
    pb = torch.nn.Parameter(torch.zeros(nb))
    pa.grad = torch.from_numpy(a)
    pb.grad = torch.from_numpy(b)
    total = torch.nn.utils.clip_grad_norm_([pa, pb], max_norm)
    with open(out, "wb") as f:
        f.write(np.array([float(total)], np.float64).tobytes())
        f.write(pa.grad.numpy().astype(np.float32).tobytes())
        f.write(pb.grad.numpy().astype(np.float32).tobytes())


if __name__ == "__main__":
    torch.set_num_threads(1)
    {"adamw": adamw, "clip": clip}[sys.argv[1]](sys.argv[2], sys.argv[3])
