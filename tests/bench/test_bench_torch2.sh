#!/usr/bin/env bash
# bench/bench_torch2.py against independent sources: its flops_per_token against the C model's
# (shardlm train --synthetic's metrics.jsonl, docs/model.md's 6 N + 12 L C T) for an MHA and a
# GQA config, and its SDPA attention against tests/reference/llama_ref.py's explicit [T, T]
# attention (float64 loss and every gradient, relative error <= 1e-10: both sum the same
# O(T + D) terms per output, so they differ by a few float64 roundings, ~1e-15). Skips (77)
# without the PyTorch 2.x venv (bench/setup_torch.sh). Never times anything.
set -euo pipefail
SRC="${SLM_SOURCE_DIR:?}"
TPY="${SLM_TORCH_PYTHON:-$SRC/bench/.venv-torch/bin/python}"
[ -x "$TPY" ] || { echo "skip: $TPY missing (bench/setup_torch.sh)"; exit 77; }
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
cat > "$W/gqa.json" <<'JSON'
{"vocab_size": 320, "hidden_size": 64, "intermediate_size": 160, "num_hidden_layers": 2,
 "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64,
 "tie_word_embeddings": false}
JSON
for m in tiny "$W/gqa.json"; do
    n=$(basename "$m" .json)
    "${SHARDLM_BIN:?}" train --synthetic --model "$m" --batch 1 --seq 24 --steps 1 --threads 1 \
        --log-every 0 --peak-gflops 10 --out "$W/$n" > /dev/null 2>&1
done
"$TPY" - "$SRC" "$W" <<'PY'
import json, os, sys
src, w = sys.argv[1], sys.argv[2]
sys.path.insert(0, os.path.join(src, "bench"))
import torch
import bench_torch2 as B
import llama_ref as R

fails = 0
for n in ("tiny", "gqa"):
    with open(os.path.join(w, n, "metrics.jsonl")) as f:
        c_fpt = [json.loads(l) for l in f if "flops_per_token" in l][0]["flops_per_token"]
    cfg = R.load_config(os.path.join(w, n, "config.json"))
    py = B.flops_per_token(cfg, 24)
    ok = abs(py - c_fpt) <= 1e-9 * c_fpt
    print(f"{n}: flops_per_token python {py} C {c_fpt} {'ok' if ok else 'FAIL'}")
    fails += not ok

    torch.manual_seed(1)
    ref = R.build_model(cfg, dtype=torch.float64)
    sdpa = B.build(cfg, "sdpa").to(torch.float64)
    sdpa.load_state_dict(ref.state_dict())
    assert all(type(l.self_attn) is B.SdpaAttention for l in sdpa.model.layers)
    g = torch.Generator().manual_seed(2)
    tok = torch.randint(0, cfg["vocab_size"], (2, 17), generator=g)
    tgt = torch.randint(0, cfg["vocab_size"], (2, 17), generator=g)
    losses = []
    for m in (ref, sdpa):
        _, loss = m(tok, tgt)
        loss.backward()
        losses.append(loss.item())
    le = abs(losses[0] - losses[1]) / abs(losses[0])
    ge = max(R.rel_err(p2.grad.numpy(), p1.grad.numpy())
             for p1, p2 in zip(ref.parameters(), sdpa.parameters()))
    ok = le <= 1e-10 and ge <= 1e-10
    print(f"{n}: sdpa vs explicit attention: loss rel {le:.2e}, max grad rel {ge:.2e} {'ok' if ok else 'FAIL'}")
    fails += not ok
sys.exit(1 if fails else 0)
PY
