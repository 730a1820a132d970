"""PyTorch 2.x side of bench/bench_train.sh and bench/bench_fsdp.sh: training steps of the
reference Llama (tests/reference/llama_ref.py's modules, float32) with AdamW (fused where this
torch supports it on CPU, else foreach) and global-norm clipping 1.0, on uniform random tokens,
the same shapes as the shardlm rows. Run it with bench/.venv-torch/bin/python
(bench/setup_torch.sh); not a test, nothing here is asserted.

usage: bench_torch2.py --config CONFIG.json --batch B --seq T --steps S --threads N
                       --mode eager|compile|ddp|fsdp2 [--world W] [--attn sdpa|naive]
                       [--optim auto|fused|foreach]

  eager    one process, N threads
  compile  one process, N threads, torch.compile(model) (inductor, C++ backend); the first
           step (compilation) is excluded like every first step
  ddp      W processes x N threads (torch.multiprocessing), DistributedDataParallel over gloo
  fsdp2    W processes x N threads, FSDP2 fully_shard on every decoder layer, then on the root
           (embedding, final norm, lm_head), gloo
--batch is the global batch: the distributed modes give each rank B / W sequences.
--attn sdpa (default) computes the same causal softmax attention with
F.scaled_dot_product_attention (PyTorch's fastest CPU path); naive keeps llama_ref's explicit
[T, T] scores.

Prints `key value` lines: torch_version, mode, world, threads, optimizer, attn,
flops_per_token (6 N + 12 L C T, docs/model.md), tokens_per_s (global, tokens / wall time
of the steps after the first, as shardlm's `done:` line), tokens_per_s_median, ms_per_step (mean, the slowest rank's time per step),
rss_mib_ranks (peak RSS of each rank, getrusage, MiB), rss_mib_max, rss_mib_import (the
largest rank's peak RSS right after `import torch`, before the model), loss_first, loss_last.
"""
import argparse
import math
import os
import resource
import socket
import statistics
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "reference"))
import llama_ref as R  # noqa: E402

# peak RSS of the interpreter with torch imported, before any model exists (the PyPI Linux wheel
# maps its CUDA libraries even on CPU): printed as rss_mib_import
_RSS_IMPORT_MIB = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


class SdpaAttention(R.Attention):
    """llama_ref.Attention with the scores / mask / softmax / AV product done by
    F.scaled_dot_product_attention(is_causal=True): the same math, PyTorch's fused CPU kernel."""

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        H, KV, D = self.H, self.KV, self.D
        q = self.q_proj(x).view(B, T, H, D).transpose(1, 2)
        k = self.k_proj(x).view(B, T, KV, D).transpose(1, 2)
        v = self.v_proj(x).view(B, T, KV, D).transpose(1, 2)
        q = q * cos + R.rotate_half(q) * sin
        k = k * cos + R.rotate_half(k) * sin
        if KV != H:
            k = k.repeat_interleave(H // KV, dim=1)
            v = v.repeat_interleave(H // KV, dim=1)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(y.transpose(1, 2).reshape(B, T, H * D))


def flops_per_token(c, T):
    """6 N + 12 L C T with N every matmul weight (lm_head counted once even when tied)."""
    C, L, V = c["hidden_size"], c["num_hidden_layers"], c["vocab_size"]
    H, KV, Fd = c["num_attention_heads"], c["num_key_value_heads"], c["intermediate_size"]
    D = c.get("head_dim") or C // H
    per_layer = C * H * D + 2 * C * KV * D + H * D * C + 3 * C * Fd
    n = L * per_layer + V * C
    A = H * D if c.get("head_dim") else C  # attention width (explicit head_dim: heads x head_dim)
    return 6 * n + 12 * L * A * T


def build(cfg, attn):
    torch.manual_seed(0)
    model = R.build_model(cfg, dtype=torch.float32)
    if attn == "sdpa":
        for layer in model.model.layers:
            layer.self_attn.__class__ = SdpaAttention
    return model


def make_optimizer(model, want):
    """AdamW lr 3e-4, betas (0.9, 0.95), eps 1e-8, decay 0.1 on llama_ref.decay_flags' set.
    Returns (optimizer, "fused" | "foreach")."""
    flags = R.decay_flags(model)
    groups = [
        {"params": [p for n, p in model.named_parameters() if flags[n]], "weight_decay": 0.1},
        {"params": [p for n, p in model.named_parameters() if not flags[n]], "weight_decay": 0.0},
    ]
    kw = dict(lr=3e-4, betas=(0.9, 0.95), eps=1e-8)
    if want in ("auto", "fused"):
        try:
            return torch.optim.AdamW(groups, fused=True, **kw), "fused"
        except (RuntimeError, TypeError, ValueError) as e:
            if want == "fused":
                raise
            print(f"note: fused AdamW unavailable ({e}); using foreach", file=sys.stderr)
    return torch.optim.AdamW(groups, foreach=True, **kw), "foreach"


def run_steps(model, opt, args, rank, world):
    """Runs args.steps steps on this rank's slice of the global batch; returns (per-step seconds,
    losses)."""
    c = R.normalize_config(json_cfg(args.config))
    B, T = args.batch // world, args.seq
    rng = np.random.default_rng(0)
    times, losses = [], []
    dist = torch.distributed if world > 1 else None
    for _ in range(args.steps):
        w = rng.integers(0, c["vocab_size"], size=(args.batch, T + 1))[rank * B : (rank + 1) * B]
        x = torch.as_tensor(w[:, :-1], dtype=torch.long)
        y = torch.as_tensor(w[:, 1:], dtype=torch.long)
        if dist is not None:
            dist.barrier()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=False)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.autocast == "bf16"):
            _, loss = model(x, y)
        loss.float().backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        lv = float(loss.detach())
        times.append(time.perf_counter() - t0)
        losses.append(lv)
    return times, losses


def json_cfg(path):
    import json

    with open(path) as f:
        return json.load(f)


def rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def worker(rank, args, port, q):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(args.threads)
    import torch.distributed as dist

    dist.init_process_group("gloo", rank=rank, world_size=args.world)
    model = build(json_cfg(args.config), args.attn)
    if args.mode == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP

        model = DDP(model)
        inner = model.module
    else:
        try:
            from torch.distributed.fsdp import fully_shard
        except ImportError:  # torch < 2.6
            from torch.distributed._composable.fsdp import fully_shard
        from torch.distributed.device_mesh import init_device_mesh

        mesh = init_device_mesh("cpu", (args.world,))
        for layer in model.model.layers:
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        inner = model
    opt, kind = make_optimizer(inner, args.optim)
    times, losses = run_steps(model, opt, args, rank, args.world)
    q.put((rank, times, losses, rss_mib(), kind, _RSS_IMPORT_MIB))
    dist.barrier()
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", required=True)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--seq", type=int, required=True)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--mode", choices=["eager", "compile", "ddp", "fsdp2"], required=True)
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--attn", choices=["sdpa", "naive"], default="sdpa")
    ap.add_argument("--optim", choices=["auto", "fused", "foreach"], default="auto")
    ap.add_argument("--autocast", choices=["off", "bf16"], default="off",
                    help="bf16: forward under torch.autocast('cpu', bfloat16) (mixed precision)")
    args = ap.parse_args()
    if args.steps < 2:
        ap.error("--steps must be >= 2 (the first step is excluded from the timing)")
    if args.mode in ("eager", "compile"):
        args.world = 1
    if args.batch % args.world:
        ap.error(f"--batch {args.batch} is not a multiple of --world {args.world}")
    cfg = R.normalize_config(json_cfg(args.config))

    if args.world == 1:
        torch.set_num_threads(args.threads)
        model = build(cfg, args.attn)
        opt, kind = make_optimizer(model, args.optim)
        if args.mode == "compile":
            model = torch.compile(model)
        times, losses = run_steps(model, opt, args, 0, 1)
        per_rank = [(0, times, losses, rss_mib(), kind, _RSS_IMPORT_MIB)]
    else:
        import torch.multiprocessing as mp

        ctx = mp.get_context("spawn")
        q = ctx.SimpleQueue()
        mp.spawn(worker, args=(args, free_port(), q), nprocs=args.world, join=True)
        per_rank = sorted(q.get() for _ in range(args.world))
        kinds = {r[4] for r in per_rank}
        kind = kinds.pop() if len(kinds) == 1 else "mixed"
        # a step lasts until its slowest rank is done
        times = [max(r[1][i] for r in per_rank) for i in range(args.steps)]
        losses = [statistics.fmean(r[2][i] for r in per_rank) for i in range(args.steps)]

    timed = times[1:]
    tok = args.batch * args.seq
    mean = statistics.fmean(timed)
    rate = tok * len(timed) / sum(timed)  # tokens / time of the timed steps, as shardlm's done: line
    rss = [r[3] for r in per_rank]
    print(f"torch_version {torch.__version__}")
    print(f"mode {args.mode}")
    print(f"world {args.world}")
    print(f"threads {args.threads}")
    print(f"optimizer {kind}")
    print(f"attn {args.attn}")
    print(f"flops_per_token {flops_per_token(cfg, args.seq):.6g}")
    print(f"tokens_per_s {rate:.1f}")
    print(f"tokens_per_s_median {tok / statistics.median(timed):.1f}")
    print(f"ms_per_step {mean * 1e3:.1f}")
    print("rss_mib_ranks " + ",".join(f"{v:.0f}" for v in rss))
    print(f"rss_mib_max {max(rss):.0f}")
    print(f"rss_mib_import {max(r[5] for r in per_rank):.0f}")
    print(f"loss_first {losses[0]:.4f}")
    print(f"loss_last {losses[-1]:.4f}")
    if not all(math.isfinite(v) for v in losses):
        print("error: non-finite loss", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
