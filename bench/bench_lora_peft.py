"""PyTorch + peft side of bench/bench_lora.sh: training steps of transformers'
LlamaForCausalLM loaded from the same Hugging Face directory shardlm fine-tunes, either in full
(every parameter trained) or with peft LoRA adapters (get_peft_model, the base frozen), AdamW
(fused where this torch has it on CPU, else foreach) over the trainable parameters, clipping
1.0, uniform random tokens, float32, SDPA attention. Run with bench/.venv-torch/bin/python
(bench/setup_torch.sh --peft); not a test, nothing is asserted.

usage: bench_lora_peft.py --base HF_DIR [--gguf FILE] --batch B --seq T --steps S --threads N
                          --mode full|lora [--rank R] [--alpha A] [--targets LIST]

--gguf FILE: load the model from that llama.cpp GGUF file instead (from_pretrained(dir,
gguf_file=name): transformers 5.x dequantizes it through gguf-py), fp32.

Prints `key value` lines: torch_version, peft_version, mode, trainable_params,
state_bytes (parameters + their gradients + AdamW exp_avg / exp_avg_sq, after the first step:
the persistent training state, as shardlm's "state per rank"), tokens_per_s (tokens / wall
time of the steps after the first), ms_per_step, rss_mib (peak RSS, getrusage), loss_first,
loss_last.
"""
import argparse
import os
import resource
import time

import numpy as np
import torch
import torch.nn.functional as F


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True)
    ap.add_argument("--gguf", default=None)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--seq", type=int, required=True)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--mode", choices=["full", "lora"], required=True)
    ap.add_argument("--rank", type=int, default=8)
    ap.add_argument("--alpha", type=float, default=16.0)
    ap.add_argument("--targets", default="q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    import peft
    import transformers
    from transformers import LlamaForCausalLM
    src, kw = a.base, {}
    if a.gguf:
        src, kw = os.path.dirname(os.path.abspath(a.gguf)), {"gguf_file": os.path.basename(a.gguf)}
    # transformers 5 names the dtype argument `dtype` (4.x: torch_dtype)
    kw["dtype" if int(transformers.__version__.split(".")[0]) >= 5 else "torch_dtype"] = torch.float32
    model = LlamaForCausalLM.from_pretrained(src, attn_implementation="sdpa", **kw)
    model.train()
    if a.mode == "lora":
        cfg = peft.LoraConfig(r=a.rank, lora_alpha=a.alpha, lora_dropout=0.0,
                              target_modules=a.targets.split(","), task_type="CAUSAL_LM")
        model = peft.get_peft_model(model, cfg)
    params = [p for p in model.parameters() if p.requires_grad]
    kw = dict(lr=1e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.0)
    try:
        opt = torch.optim.AdamW(params, fused=True, **kw)
        opt_name = "fused"
    except (RuntimeError, TypeError):
        opt = torch.optim.AdamW(params, foreach=True, **kw)
        opt_name = "foreach"
    V = model.config.vocab_size
    rng = np.random.default_rng(0)
    times, losses = [], []
    for _ in range(a.steps):
        w = torch.as_tensor(rng.integers(0, V, size=(a.batch, a.seq + 1)))
        t0 = time.perf_counter()
        logits = model(input_ids=w[:, :-1]).logits
        loss = F.cross_entropy(logits.reshape(-1, V), w[:, 1:].reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=False)
        times.append(time.perf_counter() - t0)
        losses.append(float(loss))
    state = 0
    for p in model.parameters():
        state += p.numel() * p.element_size()
        if p.grad is not None:
            state += p.grad.numel() * p.grad.element_size()
    for s in opt.state.values():
        for k in ("exp_avg", "exp_avg_sq"):
            if k in s:
                state += s[k].numel() * s[k].element_size()
    dt = sum(times[1:]) / max(1, len(times) - 1) if len(times) > 1 else times[0]
    print(f"torch_version {torch.__version__}")
    print(f"peft_version {peft.__version__}")
    print(f"mode {a.mode}")
    print(f"optimizer {opt_name}")
    print(f"trainable_params {sum(p.numel() for p in params)}")
    print(f"state_bytes {state}")
    print(f"tokens_per_s {a.batch * a.seq / dt:.1f}")
    print(f"ms_per_step {dt * 1e3:.1f}")
    print(f"rss_mib {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0:.0f}")
    print(f"loss_first {losses[0]:.4f}")
    print(f"loss_last {losses[-1]:.4f}")


if __name__ == "__main__":
    main()
